-- The graph part of the SQL API: names to ids, neighbours, summaries. Stable, documented in README.

create or replace function stark.skb_id(skb_name text) returns int
language sql stable strict as $$
    select skb_id from stark.skb where name = skb_name
$$;
comment on function stark.skb_id(text) is 'The numeric key of the SKB with this name (NULL if none).';

create or replace function stark.require_skb(skb_name text) returns int
language plpgsql stable as $$
-- stark.skb_id, but an unknown name is an error: the functions of the SQL API that take an SKB name
-- use it, so a typo fails loudly instead of returning no rows (which looks like "nothing matched").
declare
    found int := stark.skb_id(skb_name);
begin
    if found is null then
        raise exception 'no SKB named %', coalesce(quote_literal(skb_name), 'NULL')
            using errcode = 'invalid_parameter_value';
    end if;
    return found;
end
$$;
comment on function stark.require_skb(text) is 'The numeric key of the SKB with this name; an error if there is none.';

-- Argument checks shared by the SQL API, so that psql users and applications get the refusals the CLI
-- gives (`-o` settings are checked against the same bounds in Python) instead of NULL or NaN scores, a
-- division by zero deep inside a statement, or an allocation the server cannot make. Each names the
-- function and the argument, and raises invalid_parameter_value (SQLSTATE 22023).
create or replace function stark.check_count(fn text, arg text, value bigint, low bigint, high bigint) returns int
language plpgsql immutable as $$
begin
    if value is null or value < low or value > high then
        raise exception '% % must be an integer from % to %, not %', fn, arg, low, high, coalesce(value::text, 'NULL')
            using errcode = 'invalid_parameter_value';
    end if;
    return value;
end
$$;
comment on function stark.check_count(text, text, bigint, bigint, bigint) is
    'An integer argument of function `fn` within [low, high], or an error naming both (NULL is refused).';

create or replace function stark.check_number(fn text, arg text, value double precision, low double precision,
                                              high double precision) returns double precision
language plpgsql immutable as $$
begin
    if value is null or value = 'NaN'::float8 or value < low or value > high then
        raise exception '% % must be a number from % to %, not %', fn, arg, low, high, coalesce(value::text, 'NULL')
            using errcode = 'invalid_parameter_value';
    end if;
    return value;
end
$$;
comment on function stark.check_number(text, text, double precision, double precision, double precision) is
    'A finite number argument of function `fn` within [low, high], or an error naming both (NULL, NaN refused).';

create or replace function stark.check_choice(fn text, arg text, value text, choices text[]) returns text
language plpgsql immutable as $$
begin
    if value is null or not value = any(choices) then
        raise exception '% % must be one of %, not %', fn, arg, array_to_string(choices, ', '),
            coalesce(quote_literal(value), 'NULL') using errcode = 'invalid_parameter_value';
    end if;
    return value;
end
$$;
comment on function stark.check_choice(text, text, text, text[]) is
    'A text argument of function `fn` that must be one of `choices`, or an error naming both.';

create or replace function stark.k_max() returns int
language sql immutable as $$ select 100000 $$;
comment on function stark.k_max() is
    'The most results (k) and candidates (pool) a search of the SQL API returns or reads: stark_pg.retrieve.results.K_MAX.';

create or replace function stark.neighbors(skb_name text, start_node bigint, rel text default null, hops int default 1)
returns table (node_id bigint, type text, name text, hop int)
language plpgsql stable as $$
#variable_conflict use_column
-- Nodes reachable from start_node in at most `hops` outgoing edges (of relation `rel` if given),
-- each at its shortest distance; the start node itself is not returned. `hops` is capped at 10
-- (a walk's cost grows with every hop and 10 already spans any STaRK graph), and an unknown SKB
-- is an error rather than an empty result that looks like "no neighbours".
declare
    skb int := stark.require_skb(skb_name);
begin
    if hops is null or hops < 1 or hops > 10 then
        raise exception 'hops must be between 1 and 10, not %', coalesce(hops::text, 'NULL')
            using errcode = 'invalid_parameter_value';
    end if;
    return query
    with recursive walk(node_id, hop) as (
        select e.dst, 1
        from stark.edge e
        where e.skb_id = skb and e.src = start_node and (rel is null or e.relation = rel)
        union
        select e.dst, w.hop + 1
        from walk w
        join stark.edge e on e.skb_id = skb and e.src = w.node_id
        where w.hop < hops and (rel is null or e.relation = rel)
    )
    select n.node_id, n.type, n.name, min(w.hop)::int as hop
    from walk w
    join stark.node n on n.skb_id = skb and n.node_id = w.node_id
    where w.node_id <> start_node
    group by n.node_id, n.type, n.name
    order by hop, n.node_id;
end
$$;
comment on function stark.neighbors(text, bigint, text, int) is
    'Nodes within `hops` (1 to 10) outgoing edges of a node, optionally of one relation, with their distance; an unknown SKB is an error.';

create or replace view stark.skb_summary as
select s.name,
       s.format,
       s.source,
       s.loaded_at,
       (select count(*) from stark.node n where n.skb_id = s.skb_id) as nodes,
       (select count(*) from stark.edge e where e.skb_id = s.skb_id) as edges,
       (select count(*) from stark.query q where q.skb_id = s.skb_id) as queries
from stark.skb s;
comment on view stark.skb_summary is 'One line per SKB: where it came from and its node, edge and query counts.';

-- Whether every edge of an SKB is also stored reversed (stark.edge_symmetry, built by `stark-pg index`;
-- false when it has not been built). Where it is, an edge either way between a and b is an edge from a
-- to b, so a walk that ignores direction reads outgoing edges alone: 4StepFocus's substitution and
-- KAR's relation propagation both ask it. PL/pgSQL, so that earlier migrations that run this file
-- before the table exists can still create it.
create or replace function stark.edge_both_ways(skb int) returns boolean
language plpgsql stable as $$
begin
    return exists (select from stark.edge_symmetry s where s.skb_id = edge_both_ways.skb and s.one_way = 0);
end
$$;
comment on function stark.edge_both_ways(int) is
    'Whether every edge of the SKB (by id) is also stored reversed, per stark.edge_symmetry; false until `stark-pg index` built it.';

-- The typed-link summary of one SKB (stark.edge_type_link, see sql/schema/0026_edge_type_link.sql)
-- and whether its edges are all stored both ways (stark.edge_symmetry, sql/schema/0030_edge_symmetry.sql):
-- built once per loaded version, since a loaded version's edges never change. Returns the summary's
-- rows; `rebuild` recomputes a summary that exists. The symmetry check is one merge anti-join of the
-- edge partition's two indexes.
create or replace function stark.edge_type_link_build(skb_name text, rebuild boolean default false)
returns bigint
language plpgsql as $$
declare
    skb int := stark.require_skb(skb_name);
    rows_written bigint;
begin
    if rebuild or not exists (select from stark.edge_symmetry s where s.skb_id = skb) then
        delete from stark.edge_symmetry s where s.skb_id = skb;
        insert into stark.edge_symmetry (skb_id, edges, one_way)
        select skb, (select count(*) from stark.edge e where e.skb_id = skb),
               (select count(*) from stark.edge e
                where e.skb_id = skb
                  and not exists (select from stark.edge r where r.skb_id = skb and r.src = e.dst
                                                              and r.relation = e.relation and r.dst = e.src));
    end if;
    if not rebuild and exists (select from stark.edge_type_link l where l.skb_id = skb) then
        return (select count(*) from stark.edge_type_link l where l.skb_id = skb);
    end if;
    delete from stark.edge_type_link l where l.skb_id = skb;
    insert into stark.edge_type_link (skb_id, node_type, relation, out, other_type, node_ids, edges)
    select skb, n.type, t.relation, t.out, t.other_type, array_agg(t.node_id order by t.node_id),
           array_agg(t.edges order by t.node_id)
    from (select x.node_id, x.relation, x.out, m.type as other_type, count(*)::int as edges
          from (select e.src as node_id, e.relation, true as out, e.dst as other
                from stark.edge e where e.skb_id = skb
                union all
                select e.dst, e.relation, false, e.src
                from stark.edge e where e.skb_id = skb) x
          join stark.node m on m.skb_id = skb and m.node_id = x.other
          group by x.node_id, x.relation, x.out, m.type) t
    join stark.node n on n.skb_id = skb and n.node_id = t.node_id
    group by n.type, t.relation, t.out, t.other_type;
    get diagnostics rows_written = row_count;
    return rows_written;
end
$$;
comment on function stark.edge_type_link_build(text, boolean) is
    'Builds the typed-link summary of an SKB (stark.edge_type_link) and its edge symmetry (stark.edge_symmetry) unless they exist; returns the summary''s rows. `stark-pg index` runs it.';
