-- KAR (Xia et al. 2024), steps 3-4 in SQL: relation propagation from the nodes a query's entities
-- matched, and document-based relation filtering (DRF) of the neighbours found.
--
-- From each anchor node, hop by hop (at most `hops`):
--   * the next hop's nodes are those one edge away from the previous hop's kept nodes (outgoing edges,
--     or either direction unless `directed`) that this anchor has not reached before (the anchor itself
--     and every node discovered at an earlier hop, kept or not: a node is reported at its shortest hop);
--   * a node reached from several kept nodes takes its path through the smallest predecessor id, then
--     the alphabetically first relation (the tie rule that makes the result deterministic);
--   * each node scores the cosine similarity of its document vector to `query` (NULL without a query,
--     or for a node without a vector);
--   * per anchor, only the `per_hop_cap` best of the hop (similarity descending, NULLs last, then node
--     id) are kept and expanded further, so a hub cannot explode the next hop. NULL: no cap.
-- Finally DRF keeps, per anchor, the `k` best neighbours over all hops (similarity descending, NULLs
-- last, then hop, then node id); NULL k keeps them all.
--
-- One statement runs, one common table expression per hop, built for the requested number of hops
-- (`stark.kar_neighbours_sql` returns it, for traces and EXPLAIN). The SKB id is inlined as a literal,
-- so only its edge partition and vectors are read; no temporary tables.

create or replace function stark.kar_neighbours_sql(skb int, vectors text, hops int, directed boolean)
returns text
language plpgsql immutable as $$
declare
    body text := format('anchors as (select distinct a as anchor from unnest($1::bigint[]) a where a is not null), '
                        'k0 as (select anchor, anchor as node, 0 as hop, array[]::text[] as relations, '
                        'array[]::bigint[] as path, null::double precision as similarity from anchors)');
    edges text;
    seen text := 'select anchor, node from k0';
    score text;
    relation text;
begin
    -- the text built below grows with the square of `hops`: 2000 hops ran past a 5 s statement timeout
    if hops is null or hops < 1 or hops > 6 then
        raise exception 'kar_neighbours hops must be between 1 and 6, not %', coalesce(hops::text, 'NULL')
            using errcode = 'invalid_parameter_value';
    end if;
    -- The edges out of f.node, correlated inside each branch: PostgreSQL does not push `x.src = f.node`
    -- into a UNION ALL whose branches have their own WHERE, and would scan the whole partition per hop.
    if directed then
        edges := format('(select e.relation, e.dst from stark.edge e where e.skb_id = %s and e.src = f.node)', skb);
    else
        edges := format('(select e.relation, e.dst from stark.edge e where e.skb_id = %1$s and e.src = f.node '
                        'union all select e.relation, e.src from stark.edge e where e.skb_id = %1$s and e.dst = f.node)',
                        skb);
    end if;
    -- The relation a kept node is reached by: the first, alphabetically, among the edges from its
    -- predecessor c.pred to it (either way unless `directed`).
    if directed then
        relation := format('(select min(e.relation) from stark.edge e where e.skb_id = %s and e.src = c.pred '
                           'and e.dst = c.node)', skb);
    else
        relation := format('(select min(x.relation) from (select e.relation from stark.edge e where e.skb_id = %1$s '
                           'and e.src = c.pred and e.dst = c.node union all select e.relation from stark.edge e '
                           'where e.skb_id = %1$s and e.dst = c.pred and e.src = c.node) x)', skb);
    end if;
    if vectors is null then
        score := 'null::double precision';
    else
        score := format('(select 1 - (d.vec <=> $2) from stark.%I d where d.skb_id = %s and d.node_id = s.node)',
                        vectors, skb);
    end if;
    -- Per hop: c = every (anchor, neighbour) pair with its smallest predecessor, grouped by hashing
    -- narrow rows (the paths are built only for the kept nodes: sorting a few hundred thousand rows
    -- that carried their paths was most of a call's time at Prime's size); s = those not reached
    -- before; r = scored; k = the cap's best, each with its predecessor's path and the alphabetically
    -- first relation between the two.
    for h in 1..hops loop
        body := body || format(
            ', c%1$s as (select f.anchor, e.dst as node, min(f.node) as pred '
            '  from k%2$s f cross join lateral %3$s e group by f.anchor, e.dst), '
            's%1$s as (select c.anchor, c.node, c.pred from c%1$s c '
            '  where not exists (select 1 from (%4$s) v where v.anchor = c.anchor and v.node = c.node)), '
            'r%1$s as (select s.*, %5$s as similarity from (select * from s%1$s order by node) s), '
            'k%1$s as materialized (select c.anchor, c.node, %1$s as hop, p.relations || %6$s as relations, '
            '  p.path || c.node as path, c.similarity from '
            '  (select r.*, row_number() over (partition by r.anchor order by r.similarity desc nulls last, r.node) as i '
            '   from r%1$s r) c join k%2$s p on p.anchor = c.anchor and p.node = c.pred '
            '  where $4::int is null or c.i <= $4)',
            h, h - 1, edges, seen, score, relation);
        seen := seen || format(' union all select anchor, node from s%s', h);
    end loop;
    return 'with ' || body || ', found as (' ||
           (select string_agg(format('select * from k%s', h), ' union all ') from generate_series(1, hops) h) ||
           ') select anchor, hop, relations, path, node, similarity, rank::int from '
           '(select found.*, row_number() over (partition by anchor order by similarity desc nulls last, hop, node) '
           'as rank from found) ranked where $3::int is null or rank <= $3 order by anchor, rank';
end
$$;
comment on function stark.kar_neighbours_sql(int, text, int, boolean) is
    'Internal: the one statement stark.kar_neighbours runs (skb id, vector table or NULL, hops, directed).';

create or replace function stark.kar_neighbours(skb_name text, node_ids bigint[], hops int default 2,
                                                query vector default null, k int default 10,
                                                per_hop_cap int default 100,
                                                model text default 'all-MiniLM-L6-v2',
                                                directed boolean default false)
returns table (anchor bigint, hop int, relations text[], path bigint[], neighbour bigint,
               similarity double precision, rank int)
language plpgsql stable as $$
declare
    skb int := stark.skb_id(skb_name);
    vectors text;
begin
    if skb is null then
        raise exception 'no SKB named %', coalesce(quote_literal(skb_name), 'NULL');
    end if;
    if hops is null or hops < 1 or hops > 6 then
        raise exception 'kar_neighbours hops must be between 1 and 6, not %', coalesce(hops::text, 'NULL');
    end if;
    if k is not null and k < 1 then
        raise exception 'kar_neighbours k must be positive (or NULL for all), not %', k;
    end if;
    if per_hop_cap is not null and per_hop_cap < 1 then
        raise exception 'kar_neighbours per_hop_cap must be positive (or NULL for no cap), not %', per_hop_cap;
    end if;
    if query is not null then
        vectors := (stark.dense_target(skb_name, model, query, false)).tbl;
    end if;
    return query execute stark.kar_neighbours_sql(skb, vectors, hops, coalesce(directed, false))
        using node_ids, query, k, per_hop_cap;
end
$$;
comment on function stark.kar_neighbours(text, bigint[], int, vector, int, int, text, boolean) is
    'KAR relation propagation + DRF: per anchor node, the k neighbours within `hops` most similar to `query`, with their relation paths.';
