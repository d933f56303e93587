-- Migration 0026's downgrade (migrations/versions/0026_edge_type_link.py), run by it as one script:
-- The summary, its builder and the functions reading it go; 0025's revision functions and carry-over
-- come back.
-- What it restores:
--   stark.focus_probe_sql and stark.focus_revise (sql/functions/focus.sql) and stark.carry_over_skb
--   (sql/functions/skb.sql) as of migration 0025, verbatim

drop function if exists
    stark.focus_probe_sql(int, stark.focus_domain, boolean, text, text, boolean),
    stark.focus_linked(int, stark.focus_domain, text, text, text),
    stark.focus_complement(int, stark.focus_domain, stark.focus_domain, text, text),
    stark.focus_gather_sql(int, text, text),
    stark.focus_edge_ends_sql(int, text, text, int, int),
    stark.edge_type_link_build(text, boolean);

drop table if exists stark.edge_type_link;

create or replace function stark.focus_probe_sql(skb int, y stark.focus_domain, x_filter boolean,
                                                 relation text, y_end text)
returns text
language plpgsql immutable as $$
declare
    rel text := case when relation is null then '' else ' and e.relation = $3' end;
    one text := 'exists (select from stark.edge e where e.skb_id = %s and e.%I = y.id%s%s offset 0)';
    parts text[] := '{}';
begin
    if y_end is null or y_end = 'src' then
        parts := parts || format(one, skb, 'src', rel,
                                 case when x_filter then ' and (e.dst + 0) = any ($2::bigint[])' else '' end);
    end if;
    if y_end is null or y_end = 'dst' then
        parts := parts || format(one, skb, 'dst', rel,
                                 case when x_filter then ' and (e.src + 0) = any ($2::bigint[])' else '' end);
    end if;
    return format('select coalesce(array_agg(y.id order by y.id), ''{}'') from %s where %s',
                  stark.focus_domain_source(skb, y, 1, 4, 'y'), array_to_string(parts, ' or '));
end
$$;
comment on function stark.focus_probe_sql(int, stark.focus_domain, boolean, text, text) is
    'Internal (4StepFocus): SQL keeping the members of one candidate set with an edge to a member of another, probing from the first.';

create or replace function stark.focus_revise(skb int, y stark.focus_domain, y_size bigint,
                                              x stark.focus_domain, x_ids bigint[], x_size bigint,
                                              nodes bigint, relation text, y_end text,
                                              degree double precision)
returns bigint[]
language plpgsql stable as $$
declare
    ends int := case when y_end is null then 2 else 1 end;
    y_degree double precision := ends * degree;
    x_degree double precision := ends * degree;
    probe double precision;
    gather double precision;
    sample bigint[];
    side int;
    d stark.focus_domain;
    n bigint;
    measured double precision;
    result bigint[];
begin
    for side in 1 .. 3 loop
        probe := y_size * (4 + case when x_ids is null then 1
                                    else least(y_degree, nodes::float8 / greatest(x_size, 1)) end);
        gather := case when x.top and x.node_type is null then 'infinity'::float8
                       else x_size * (3 * x_degree + 4) end;
        exit when side = 3 or least(probe, gather) < 20000;
        d := case when side = 1 then y else x end;
        n := case when side = 1 then y_size else x_size end;
        if d.top then
            sample := array(select m.node_id from stark.node m
                            where m.skb_id = skb and (d.node_type is null or m.type = d.node_type) limit 16);
        else
            sample := array(select distinct d.node_ids[(1 + (g * n) / least(n, 16))::int]
                            from generate_series(0, least(n, 16) - 1) g);
        end if;
        -- edges at this side's end of the triplet (y's end for y, the other for x)
        select (select count(*) from unnest(sample) s(id)
                join stark.edge e on e.skb_id = skb and e.src = s.id and (focus_revise.relation is null or e.relation = focus_revise.relation)
                where coalesce(y_end = case when side = 1 then 'src' else 'dst' end, true))
             + (select count(*) from unnest(sample) s(id)
                join stark.edge e on e.skb_id = skb and e.dst = s.id and (focus_revise.relation is null or e.relation = focus_revise.relation)
                where coalesce(y_end = case when side = 1 then 'dst' else 'src' end, true))
        into measured;
        if cardinality(sample) > 0 then
            if side = 1 then y_degree := measured / cardinality(sample); else x_degree := measured / cardinality(sample); end if;
        end if;
    end loop;
    if probe <= gather then
        execute stark.focus_probe_sql(skb, y, x_ids is not null, relation, y_end)
            into result using y.node_ids, x_ids, relation, y.node_type;
    else
        execute stark.focus_revise_sql(skb, y, x, relation, y_end)
            into result using y.node_ids, x.node_ids, relation, y.node_type, x.node_type;
    end if;
    return result;
end
$$;
comment on function stark.focus_revise(int, stark.focus_domain, bigint, stark.focus_domain, bigint[], bigint, bigint, text, text, double precision) is
    'Internal (4StepFocus): the members of one candidate set with an edge to a member of another, probed or gathered, whichever reads less.';

create or replace function stark.carry_over_skb(old_id int, new_id int) returns jsonb
language plpgsql as $$
declare
    tbl record;
    moved bigint;
    report jsonb := '{}'::jsonb;
begin
    for tbl in
        select t.relname as table_name
        from pg_class t
        join pg_namespace ns on ns.oid = t.relnamespace
        join pg_attribute a on a.attrelid = t.oid and a.attname = 'skb_id' and not a.attisdropped
        where ns.nspname = 'stark' and t.relkind = 'r' and not t.relispartition
          and t.relname not in ('skb', 'node', 'node_field', 'edge', 'query')
          and t.relname not like '%\_\_skb%'
        order by t.relname
    loop
        execute format('update stark.%I set skb_id = $2 where skb_id = $1', tbl.table_name)
            using old_id, new_id;
        get diagnostics moved = row_count;
        if moved > 0 then
            report := report || jsonb_build_object(tbl.table_name, moved);
        end if;
    end loop;
    return report;
end
$$;
comment on function stark.carry_over_skb(int, int) is
    'Moves the derived rows (indexes, vectors, eval runs, models) of SKB old_id to new_id (used by a replacing load).';
