-- KAR (Xia et al. 2024), steps 3-4 in SQL: relation propagation from the nodes a query's entities
-- matched, and document-based relation filtering (DRF) of the neighbours found.
--
-- From each anchor node, hop by hop (at most `hops`):
--   * the next hop's nodes are those one edge away from the previous hop's kept nodes (outgoing edges,
--     or either direction unless `directed`; outgoing edges alone where every edge is also stored
--     reversed, stark.edge_symmetry: the same nodes) that this anchor has not reached before (the anchor itself
--     and every node discovered at an earlier hop, kept or not: a node is reported at its shortest hop);
--   * a node reached from several kept nodes takes its path through the smallest predecessor id, then
--     the alphabetically first relation (the tie rule that makes the result deterministic);
--   * each node scores the cosine similarity of its document vector to `query` (NULL without a query,
--     or for a node without a vector);
--   * per anchor, only the `per_hop_cap` best of the hop (similarity descending, NULLs last, then node
--     id) are kept and expanded further, so a hub cannot explode the next hop. NULL: no cap.
--   * the tail's bound: per anchor, at most `max_frontier` of a hop's new nodes are scored, those with
--     the most edges from the anchor's kept nodes of the previous hop first (then node id); a hub among
--     the kept nodes otherwise puts tens of thousands of nodes in the next hop, each a vector look-up.
--     Each row's `frontier` is the most new nodes one hop of its anchor reached, before that bound: above
--     `max_frontier`, the anchor's neighbours were chosen among part of its frontier (the trace says so).
--     NULL: no bound (the exact answer, with no per_hop_cap either).
-- Finally DRF keeps, per anchor, the `k` best neighbours over all hops (similarity descending, NULLs
-- last, then hop, then node id); NULL k keeps them all.
--
-- One statement runs, one common table expression per hop, built for the requested number of hops
-- (`stark.kar_neighbours_sql` returns it, for traces and EXPLAIN). The SKB id is inlined as a literal,
-- so only its edge partition and vectors are read; no temporary tables.
--
-- last_hop => 'index' (approximate; needs a query vector, k and an HNSW index over the SKB's document
-- vectors; without a query or k the last hop is the exact one): the last hop does not enumerate and
-- score its whole frontier (at STaRK-Prime's size some 24,000 nodes after two hops, whose vector
-- look-ups were most of a call's time). Per anchor it walks the HNSW index in order of similarity to
-- the query (iterative scan, relaxed order, at most hnsw.max_scan_tuples 20,000 tuples) and keeps the
-- first nodes that the exact hop would have reached: adjacent to one of the anchor's kept nodes of the
-- previous hop (an edge into the node from it, or either way unless `directed`), and not to a kept node
-- of any earlier hop, nor the anchor itself (so not reached before). It keeps min(per_hop_cap,
-- `stark.kar_index_overfetch` (2) * k) of them: the final top k takes at most k nodes of the last hop,
-- and the spare ones make up for the walk's relaxed order. Paths, relations and tie rules are those of
-- the exact hop; with an exact index the rows are the exact ones (ties aside), HNSW may miss some.
-- An anchor whose last frontier is small takes the exact hop instead: the walk would pass many index
-- tuples (each tested against the graph) per node it keeps. That is one whose previous hop's kept
-- nodes have fewer than `stark.kar_index_min_rows` (15,000) edge rows to follow, counted up to that
-- bound. Both are session settings (`set stark.kar_index_min_rows = 0`: every anchor walks); the
-- defaults were chosen by measurement at STaRK-Prime's size (docs/kar.md).

create or replace function stark.kar_neighbours_sql(skb int, vectors text, hops int, directed boolean,
                                                    last_hop text default 'exact')
returns text
language plpgsql stable as $$
declare
    body text := format('anchors as (select distinct a as anchor from unnest($1::bigint[]) a where a is not null), '
                        'k0 as (select anchor, anchor as node, 0 as hop, array[]::text[] as relations, '
                        'array[]::bigint[] as path, null::double precision as similarity, 0::bigint as reached from anchors)');
    edges text;
    seen text := 'select anchor, node from k0';
    score text;
    relation text;
    incoming text;          -- the nodes one edge before o.node (its possible predecessors), for the index hop
    earlier text := null;   -- (anchor, node) kept at hops before the previous one
    ix record;
    min_rows int;
    overfetch int;
    raw text;
begin
    -- the text built below grows with the square of `hops`: a large `hops` runs past any timeout
    if hops is null or hops < 1 or hops > 6 then
        raise exception 'kar_neighbours hops must be between 1 and 6, not %', coalesce(hops::text, 'NULL')
            using errcode = 'invalid_parameter_value';
    end if;
    -- Where the SKB stores every edge both ways too (stark.edge_symmetry, built by `stark-pg index`),
    -- "either way" reaches the same nodes by the same relations as outgoing edges alone: those are read,
    -- half the edges, and the rows are the same.
    if not directed and stark.edge_both_ways(skb) then
        directed := true;
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
    if last_hop is null or last_hop not in ('exact', 'index') then
        raise exception 'kar_neighbours last_hop must be exact or index, not %', coalesce(quote_literal(last_hop), 'NULL')
            using errcode = 'invalid_parameter_value';
    end if;
    if last_hop = 'index' then
        if vectors is null then
            raise exception 'kar_neighbours last_hop index needs a query vector' using errcode = 'invalid_parameter_value';
        end if;
        select * into ix from stark.vector_index(vectors, skb);     -- NULLs when there is no index
        if ix.method is distinct from 'hnsw' then
            raise exception 'kar_neighbours last_hop index needs an HNSW index over the SKB''s document vectors (stark.%), not %',
                vectors, coalesce(ix.method, 'none') using errcode = 'invalid_parameter_value',
                hint = 'run `stark-pg index SKB` (the default --vector-index hnsw)';
        end if;
        raw := nullif(current_setting('stark.kar_index_min_rows', true), '');
        if raw is not null and raw !~ '^\s*[0-9]{1,9}\s*$' then
            raise exception 'stark.kar_index_min_rows must be a non-negative integer, not %', quote_literal(raw)
                using errcode = 'invalid_parameter_value';
        end if;
        min_rows := coalesce(raw::int, 15000);
        raw := nullif(current_setting('stark.kar_index_overfetch', true), '');
        if raw is not null and (raw !~ '^\s*[0-9]{1,3}\s*$' or raw::int < 1) then
            raise exception 'stark.kar_index_overfetch must be an integer from 1 to 999, not %', quote_literal(raw)
                using errcode = 'invalid_parameter_value';
        end if;
        overfetch := coalesce(raw::int, 2);
    end if;
    -- The nodes with an edge into o.node from them (either way unless `directed`): its predecessors.
    if directed then
        incoming := format('(select e.src as node from stark.edge e where e.skb_id = %s and e.dst = o.node)', skb);
    else
        incoming := format('(select e.src as node from stark.edge e where e.skb_id = %1$s and e.dst = o.node '
                           'union all select e.dst from stark.edge e where e.skb_id = %1$s and e.src = o.node)', skb);
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
        if h = hops and last_hop = 'index' then
            -- b = the anchors that take the index walk (the previous hop's kept nodes have at least
            -- min_rows edge rows to follow, counted up to that); the others take the exact hop (c, s, r,
            -- x). i = per anchor, the first min(cap, overfetch * k) nodes of the walk reached at this hop and not
            -- before (each candidate's incoming edges against the (anchor, node) pairs kept before),
            -- with their smallest predecessors (in the walk's select list: computed only for the rows
            -- the filter passes); k = both, with paths and relations as the exact hop builds them.
            body := body || format(
                ', b%1$s as materialized (select a.anchor from anchors a where %7$s = 0 or (select count(*) from '
                '  (select 1 from k%2$s f cross join lateral %3$s e where f.anchor = a.anchor limit %7$s) n) >= %7$s), '
                'c%1$s as (select f.anchor, e.dst as node, min(f.node) as pred, count(*) as links '
                '  from k%2$s f cross join lateral %3$s e '
                '  where not exists (select 1 from b%1$s b where b.anchor = f.anchor) group by f.anchor, e.dst), '
                's%1$s as (select c.anchor, c.node, c.pred, c.links from c%1$s c '
                '  where not exists (select 1 from (%4$s) v where v.anchor = c.anchor and v.node = c.node)), '
                'r%1$s as (select s.anchor, s.node, s.pred, s.reached, %5$s as similarity from (select * from '
                '  (select s.*, count(*) over (partition by s.anchor) as reached, row_number() over '
                '   (partition by s.anchor order by s.links desc, s.node) as o from s%1$s s) s '
                '  where $5::int is null or s.o <= $5 order by s.node) s), '
                'x%1$s as (select c.anchor, c.node, %1$s as hop, p.relations || %6$s as relations, '
                '  p.path || c.node as path, c.similarity, c.reached from '
                '  (select r.*, row_number() over (partition by r.anchor order by r.similarity desc nulls last, r.node) as i '
                '   from r%1$s r) c join k%2$s p on p.anchor = c.anchor and p.node = c.pred '
                '  where $4::int is null or c.i <= $4), '
                'i%1$s as materialized (select b.anchor, w.node, w.similarity, w.pred from b%1$s b cross join lateral '
                '  (select d.node_id as node, 1 - (d.vec <=> $2) as similarity, (select min(o.node) from %10$s o '
                '    where (b.anchor, o.node) in (select anchor, node from k%2$s)) as pred from stark.%8$I d '
                '   where d.skb_id = %9$s and d.node_id <> b.anchor '
                '   and exists (select 1 from %10$s o where (b.anchor, o.node) in (select anchor, node from k%2$s)) '
                '   %11$s '
                '   order by %12$s limit least($3::bigint * %13$s, coalesce($4, $3::bigint * %13$s))) w), '
                'k%1$s as (select * from x%1$s union all '
                '  select c.anchor, c.node, %1$s as hop, p.relations || %6$s as relations, p.path || c.node as path, '
                '  c.similarity, 0::bigint from i%1$s c join k%2$s p on p.anchor = c.anchor and p.node = c.pred)',
                h, h - 1, edges, seen, score, relation, min_rows, vectors, skb,
                replace(incoming, 'o.node', 'd.node_id'),
                case when earlier is null then '' else format(
                    'and not exists (select 1 from %s o where (b.anchor, o.node) in (%s))',
                    replace(incoming, 'o.node', 'd.node_id'), earlier) end,
                replace(stark.vector_distance('d', ix.storage, ix.dim), '$1', '$2'), overfetch);
        else
            body := body || format(
                ', c%1$s as (select f.anchor, e.dst as node, min(f.node) as pred, count(*) as links '
                '  from k%2$s f cross join lateral %3$s e group by f.anchor, e.dst), '
                's%1$s as (select c.anchor, c.node, c.pred, c.links from c%1$s c '
                '  where not exists (select 1 from (%4$s) v where v.anchor = c.anchor and v.node = c.node)), '
                'r%1$s as (select s.anchor, s.node, s.pred, s.reached, %5$s as similarity from (select * from '
                '  (select s.*, count(*) over (partition by s.anchor) as reached, row_number() over '
                '   (partition by s.anchor order by s.links desc, s.node) as o from s%1$s s) s '
                '  where $5::int is null or s.o <= $5 order by s.node) s), '
                'k%1$s as materialized (select c.anchor, c.node, %1$s as hop, p.relations || %6$s as relations, '
                '  p.path || c.node as path, c.similarity, c.reached from '
                '  (select r.*, row_number() over (partition by r.anchor order by r.similarity desc nulls last, r.node) as i '
                '   from r%1$s r) c join k%2$s p on p.anchor = c.anchor and p.node = c.pred '
                '  where $4::int is null or c.i <= $4)',
                h, h - 1, edges, seen, score, relation);
        end if;
        seen := seen || format(' union all select anchor, node from s%s', h);
        if h < hops then
            earlier := coalesce(earlier || ' union all ', '') || format('select anchor, node from k%s', h - 1);
        end if;
    end loop;
    return 'with ' || body || ', found as (' ||
           (select string_agg(format('select * from k%s', h), ' union all ') from generate_series(1, hops) h) ||
           ') select anchor, hop, relations, path, node, similarity, rank::int, frontier::int from '
           '(select found.*, row_number() over (partition by anchor order by similarity desc nulls last, hop, node) '
           'as rank, max(found.reached) over (partition by anchor) as frontier from found) ranked '
           'where $3::int is null or rank <= $3 order by anchor, rank';
end
$$;
comment on function stark.kar_neighbours_sql(int, text, int, boolean, text) is
    'Internal: the one statement stark.kar_neighbours runs (skb id, vector table or NULL, hops, directed, last_hop).';

drop function if exists stark.kar_neighbours(text, bigint[], int, vector, int, int, text, boolean, text);
create or replace function stark.kar_neighbours(skb_name text, node_ids bigint[], hops int default 2,
                                                query vector default null, k int default 10,
                                                per_hop_cap int default 100,
                                                model text default 'all-MiniLM-L6-v2',
                                                directed boolean default false,
                                                last_hop text default 'exact',
                                                max_frontier int default 10000)
returns table (anchor bigint, hop int, relations text[], path bigint[], neighbour bigint,
               similarity double precision, rank int, frontier int)
language plpgsql stable as $$
declare
    skb int := stark.skb_id(skb_name);
    vectors text;
    walk boolean;
    saved text[];
    saved_tuples text;
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
    if max_frontier is not null and max_frontier < 1 then
        raise exception 'kar_neighbours max_frontier must be positive (or NULL for no bound), not %', max_frontier
            using errcode = 'invalid_parameter_value';
    end if;
    if last_hop is null or last_hop not in ('exact', 'index') then
        raise exception 'kar_neighbours last_hop must be exact or index, not %', coalesce(quote_literal(last_hop), 'NULL')
            using errcode = 'invalid_parameter_value';
    end if;
    if query is not null then
        vectors := (stark.dense_target(skb_name, model, query, false)).tbl;
    end if;
    -- the walk keeps the first k of the last hop: without a query or a k (every neighbour) it is the exact hop
    walk := last_hop = 'index' and vectors is not null and k is not null;
    if not walk then
        return query execute stark.kar_neighbours_sql(skb, vectors, hops, coalesce(directed, false))
            using node_ids, query, k, per_hop_cap, max_frontier;
        return;
    end if;
    -- iterative index scans (relaxed order: the rows are re-sorted), hnsw.ef_search as for VSS (at
    -- least 100, or the session's stark.ef_search), at most 20,000 index tuples per anchor's walk
    saved := stark.vector_search_settings('hnsw', least(k, coalesce(per_hop_cap, k)));
    saved_tuples := current_setting('hnsw.max_scan_tuples', true);
    perform set_config('hnsw.max_scan_tuples', '20000', true);
    return query execute stark.kar_neighbours_sql(skb, vectors, hops, coalesce(directed, false), 'index')
        using node_ids, query, k, per_hop_cap, max_frontier;
    perform stark.vector_search_restore(saved);
    if saved_tuples is not null then
        perform set_config('hnsw.max_scan_tuples', saved_tuples, true);
    end if;
end
$$;
comment on function stark.kar_neighbours(text, bigint[], int, vector, int, int, text, boolean, text, int) is
    'KAR relation propagation + DRF: per anchor node, the k neighbours within `hops` most similar to `query`, with their relation paths (last_hop exact, or index: approximate, through the HNSW index).';
