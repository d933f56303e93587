-- Migration 0030's downgrade (migrations/versions/0030_edge_symmetry.py), run by it as one script:
-- The symmetry table goes; 0029's substitution, summary builder, carry-over and KAR statement come
-- back.
-- What it restores:
--   stark.focus_revise and stark.focus_substitute (sql/functions/focus.sql), stark.edge_type_link_build
--   (sql/functions/graph.sql), stark.carry_over_skb (sql/functions/skb.sql) and stark.kar_neighbours_sql
--   (sql/functions/kar.sql) as of migration 0029, verbatim

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
    linked bigint[];
    relations text[];
    type_size bigint;
begin
    if x.top and (y.top or y_size > 64) then
        linked := stark.focus_linked(skb, y, x.node_type, relation, y_end);
        if linked is not null then
            return linked;
        end if;
    end if;
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
        if y_size > 1000 then
            linked := stark.focus_linked(skb, y, x.node_type, relation, y_end);
            if linked is not null then
                y.top := false;
                y.node_ids := linked;
            end if;
        end if;
        if linked is not null and not x.top and x.node_type is not null and y_size > 1000 then
            select count(*) into type_size from stark.node n where n.skb_id = skb and n.type = x.node_type;
            if (type_size - x_size) * (3 * x_degree + 4) + type_size + y_size < probe then
                return stark.focus_complement(skb, y, x, relation, y_end);
            end if;
        end if;
        if relation is null and x.node_type is not null then
            relations := array(select distinct l.relation from stark.edge_type_link l
                               where l.skb_id = skb and (y.node_type is null or l.node_type = y.node_type)
                                 and l.other_type = x.node_type and (y_end is null or l.out = (y_end = 'src')));
        end if;
        execute stark.focus_probe_sql(skb, y, x_ids is not null, relation, y_end, cardinality(relations) > 0)
            into result using y.node_ids, x_ids, relation, y.node_type, relations;
    else
        -- more edges to look up than nodes in y's type: worth the summary's list of that type
        if y.top and not x.top and x_size * x_degree > 2 * y_size then
            linked := stark.focus_linked(skb, y, x.node_type, relation, y_end);
        end if;
        if linked is not null then
            execute stark.focus_gather_sql(skb, relation, y_end) into result using linked, x.node_ids, relation;
        else
            execute stark.focus_revise_sql(skb, y, x, relation, y_end)
                into result using y.node_ids, x.node_ids, relation, y.node_type, x.node_type;
        end if;
    end if;
    return result;
end
$$;
comment on function stark.focus_revise(int, stark.focus_domain, bigint, stark.focus_domain, bigint[], bigint, bigint, text, text, double precision) is
    'Internal (4StepFocus): the members of one candidate set with an edge to a member of another, probed or gathered, whichever reads less.';

create or replace function stark.focus_substitute(skb_name text, problem jsonb,
                                                  respect_relations boolean default false,
                                                  directed boolean default false, max_rounds int default 1000)
returns table (variable text, node_type text, unconstrained boolean, size bigint, node_ids bigint[], rounds int)
language plpgsql stable as $$
declare
    skb int := stark.skb_id(skb_name);
    doms stark.focus_domain[] := '{}';
    univ stark.focus_domain[] := '{}';     -- each variable's type's nodes (node_ids loaded when first needed)
    names text[] := '{}';
    type_size bigint[] := '{}';
    ver int[] := '{}';                     -- each set's version: bumped whenever it shrinks
    arc_head int[] := '{}';
    arc_tail int[] := '{}';
    arc_rel text[] := '{}';
    -- per side of a variable-variable triplet (2i-1: head revised against tail, 2i: tail against head):
    -- the version of the other set it was last revised against, and that set
    seen_ver int[];
    seen_dom stark.focus_domain[];
    degree double precision;
    v record;
    t jsonb;
    h jsonb;
    tl jsonb;
    rel text;
    var_i int;
    const_ids bigint[];
    const_dom stark.focus_domain;
    var_end text;
    n_rounds int := 0;
    changed boolean;
    pass int;
    i int;
    k int;
    k2 int;
    side int;
    a int;
    b int;
    a_end text;
    new_ids bigint[];
    old_ids bigint[];
    lost bigint[];
    old_size bigint;
    a_size bigint;
    b_size bigint;
    r_size bigint;
    full_cost double precision;
    inc_cost double precision;
    ends int := case when directed then 1 else 2 end;
    probe_each double precision;
    n_nodes bigint;
    incremental boolean;
    done boolean[];
begin
    if skb is null then
        raise exception 'no SKB named %', coalesce(quote_literal(skb_name), 'NULL');
    end if;
    if problem is null or jsonb_typeof(problem -> 'variables') is distinct from 'object' then
        raise exception 'focus_substitute: problem must be a JSON object with "variables" (an object) and "triplets"';
    end if;
    for v in select key, value from jsonb_each(problem -> 'variables') order by key loop
        if jsonb_typeof(v.value) not in ('string', 'null') then
            raise exception 'focus_substitute: the type of variable % must be a string or null, not %', v.key, v.value;
        end if;
        names := names || v.key;
        doms := doms || row(v.key, v.value #>> '{}', true, null)::stark.focus_domain;
        univ := univ || row(v.key, v.value #>> '{}', true, null)::stark.focus_domain;
        type_size := type_size || null::bigint;
        ver := ver || 0;
    end loop;
    -- Average edges per node and direction, from the load's counts (or counted, for SKBs loaded without them).
    select (s.meta -> 'load' ->> 'edges')::float8, (s.meta -> 'load' ->> 'nodes')::bigint
    into degree, n_nodes from stark.skb s where s.skb_id = skb;
    if degree is null or n_nodes is null then
        select count(*) into n_nodes from stark.node n where n.skb_id = skb;
        select count(*) into degree from stark.edge e where e.skb_id = skb;
    end if;
    degree := degree / greatest(n_nodes, 1);
    -- Constants first: each variable-constant triplet narrows its variable once (constants never change).
    for t in select value from jsonb_array_elements(coalesce(problem -> 'triplets', '[]')) loop
        h := t -> 'head';
        tl := t -> 'tail';
        rel := case when respect_relations then t ->> 'relation' end;
        if jsonb_typeof(h) not in ('string', 'array') or jsonb_typeof(tl) not in ('string', 'array') then
            raise exception 'focus_substitute: a triplet''s head and tail are a variable name or an array of node ids: %', t;
        end if;
        foreach side in array array[1, 2] loop
            if jsonb_typeof(case when side = 1 then h else tl end) <> 'string' then
                continue;
            end if;
            var_i := array_position(names, case when side = 1 then h else tl end #>> '{}');
            if var_i is null then
                raise exception 'focus_substitute: triplet % names variable %, which is not among the variables',
                    t, case when side = 1 then h else tl end;
            end if;
        end loop;
        if jsonb_typeof(h) = 'array' and jsonb_typeof(tl) = 'array' then
            continue;                                          -- constant-constant: nothing to substitute
        elsif jsonb_typeof(h) = 'string' and jsonb_typeof(tl) = 'string' then
            arc_head := arc_head || array_position(names, h #>> '{}');
            arc_tail := arc_tail || array_position(names, tl #>> '{}');
            arc_rel := arc_rel || rel;
            continue;
        end if;
        if jsonb_typeof(h) = 'string' then
            var_i := array_position(names, h #>> '{}');
            const_ids := array(select distinct jsonb_array_elements_text(tl)::bigint order by 1);
            var_end := 'src';
        else
            var_i := array_position(names, tl #>> '{}');
            const_ids := array(select distinct jsonb_array_elements_text(h)::bigint order by 1);
            var_end := 'dst';
        end if;
        const_dom := row('constant', null, false, const_ids)::stark.focus_domain;
        if doms[var_i].top then
            if type_size[var_i] is null then
                select count(*) into old_size from stark.node n
                where n.skb_id = skb and (doms[var_i].node_type is null or n.type = doms[var_i].node_type);
                type_size[var_i] := old_size;
            end if;
            a_size := type_size[var_i];
        else
            a_size := cardinality(doms[var_i].node_ids);
        end if;
        new_ids := stark.focus_revise(skb, doms[var_i], a_size, const_dom, const_ids, cardinality(const_ids),
                                      n_nodes, rel, case when directed then var_end end, degree);
        doms[var_i].top := false;
        doms[var_i].node_ids := new_ids;
        ver[var_i] := ver[var_i] + 1;
    end loop;

    -- Then the variable-variable triplets, round after round, until no set changes. Within a round,
    -- triplets with a materialised side go first; a triplet between two untouched variables (both
    -- "every node of the type") is applied last, when one of them may have been narrowed meanwhile.
    -- A revision whose other set has not changed since it last ran is skipped: it would keep every
    -- member again. So is the second side of a triplet after the first narrowed its set, if the second
    -- was last revised against that set as it was before: whatever had an edge to the old set has one
    -- to the members that kept theirs. And when the other set only lost a few members, just the members
    -- with an edge to a lost one are checked again. Each gives the set a full revision would, so the
    -- sets and the rounds are those of applying every triplet in full every round.
    seen_ver := array_fill(null::int, array[2 * coalesce(array_length(arc_head, 1), 0)]);
    seen_dom := array_fill(null::stark.focus_domain, array[2 * coalesce(array_length(arc_head, 1), 0)]);
    loop
        n_rounds := n_rounds + 1;
        if n_rounds > max_rounds then
            raise exception 'focus_substitute: no fixed point after % rounds', max_rounds;
        end if;
        changed := false;
        done := array_fill(false, array[coalesce(array_length(arc_head, 1), 0)]);
        for pass in 1 .. 2 loop
            for i in 1 .. coalesce(array_length(arc_head, 1), 0) loop
                continue when done[i];
                continue when pass = 1 and doms[arc_head[i]].top and doms[arc_tail[i]].top;
                done[i] := true;
                foreach side in array array[1, 2] loop
                    k := 2 * i - 2 + side;
                    a := case when side = 1 then arc_head[i] else arc_tail[i] end;   -- the set revised
                    b := case when side = 1 then arc_tail[i] else arc_head[i] end;   -- against this one
                    continue when seen_ver[k] = ver[b];
                    a_end := case when not directed then null when side = 1 then 'src' else 'dst' end;
                    foreach var_i in array array[a, b] loop
                        if type_size[var_i] is null then
                            select count(*) into old_size from stark.node n
                            where n.skb_id = skb and (doms[var_i].node_type is null or n.type = doms[var_i].node_type);
                            type_size[var_i] := old_size;
                        end if;
                    end loop;
                    a_size := case when doms[a].top then type_size[a] else cardinality(doms[a].node_ids) end;
                    b_size := case when doms[b].top then type_size[b] else cardinality(doms[b].node_ids) end;
                    inc_cost := 'infinity';
                    if seen_ver[k] is not null then       -- b lost r_size members since a was last revised against it
                        r_size := case when seen_dom[k].top then type_size[b]
                                       else cardinality(seen_dom[k].node_ids) end - b_size;
                        probe_each := 4 + least(ends * degree, n_nodes::float8 / greatest(b_size, 1));
                        full_cost := least(a_size * probe_each, b_size * ends * (3 * degree + 4));
                        inc_cost := r_size * ends * (3 * degree + 4) + least(a_size, r_size * ends * degree) * probe_each;
                    end if;
                    incremental := coalesce(inc_cost < full_cost, false);
                    -- the nodes of a top set's type, where a statement needs them as a list
                    foreach var_i in array array[a, b] loop
                        if univ[var_i].node_ids is null and doms[var_i].top
                           and (var_i = b and doms[b].node_type is not null and not incremental
                                or var_i = a and incremental) then
                            univ[var_i].node_ids := array(select n.node_id from stark.node n where n.skb_id = skb
                                and (doms[var_i].node_type is null or n.type = doms[var_i].node_type) order by n.node_id);
                        end if;
                    end loop;
                    if incremental then
                        if seen_dom[k].top and univ[b].node_ids is null then
                            univ[b].node_ids := array(select n.node_id from stark.node n where n.skb_id = skb
                                and (doms[b].node_type is null or n.type = doms[b].node_type) order by n.node_id);
                        end if;
                        lost := array(select o from unnest(case when seen_dom[k].top then univ[b].node_ids
                                                                else seen_dom[k].node_ids end) o
                                      except select m from unnest(doms[b].node_ids) m);
                        -- the members of a with an edge to a lost member of b ...
                        execute stark.focus_revise_sql(skb, doms[a], row('lost', null, false, lost)::stark.focus_domain,
                                                       arc_rel[i], a_end)
                            into old_ids using doms[a].node_ids, lost, arc_rel[i], doms[a].node_type, null::text;
                        -- ... and those of them with an edge to a member of b still
                        new_ids := '{}';
                        if cardinality(old_ids) > 0 then
                            execute stark.focus_probe_sql(skb, row('checked', null, false, old_ids)::stark.focus_domain,
                                                          true, arc_rel[i], a_end)
                                into new_ids using old_ids, doms[b].node_ids, arc_rel[i], null::text;
                        end if;
                        if cardinality(new_ids) < cardinality(old_ids) then
                            lost := array(select c from unnest(old_ids) c except select s from unnest(new_ids) s);
                            new_ids := array(select m from unnest(case when doms[a].top then univ[a].node_ids
                                                                       else doms[a].node_ids end) m
                                             except select l from unnest(lost) l order by 1);
                        else
                            new_ids := null;                     -- every member keeps an edge
                        end if;
                    else
                        old_ids := case when not doms[b].top then doms[b].node_ids
                                        when doms[b].node_type is not null then univ[b].node_ids end;
                        new_ids := stark.focus_revise(skb, doms[a], a_size, doms[b], old_ids,
                                                      b_size, n_nodes, arc_rel[i], a_end, degree);
                        if cardinality(new_ids) >= a_size then
                            new_ids := null;
                        end if;
                    end if;
                    seen_ver[k] := ver[b];
                    seen_dom[k] := doms[b];
                    if new_ids is not null then
                        changed := true;
                        doms[a].top := false;
                        doms[a].node_ids := new_ids;
                        ver[a] := ver[a] + 1;
                        k2 := case when side = 1 then k + 1 else k - 1 end;
                        if a <> b and seen_ver[k2] = ver[a] - 1 then
                            seen_ver[k2] := ver[a];
                            seen_dom[k2] := doms[a];
                        end if;
                    end if;
                end loop;
            end loop;
        end loop;
        exit when not changed;
    end loop;

    for i in 1 .. coalesce(array_length(names, 1), 0) loop
        if doms[i].top and type_size[i] is null then
            select count(*) into old_size from stark.node n
            where n.skb_id = skb and (doms[i].node_type is null or n.type = doms[i].node_type);
            type_size[i] := old_size;
        end if;
        variable := doms[i].variable;
        node_type := doms[i].node_type;
        unconstrained := doms[i].top;
        size := case when doms[i].top then type_size[i] else cardinality(doms[i].node_ids) end;
        node_ids := case when doms[i].top then null else doms[i].node_ids end;
        rounds := n_rounds;
        return next;
    end loop;
end
$$;
comment on function stark.focus_substitute(text, jsonb, boolean, boolean, int) is
    '4StepFocus substitution: each variable''s candidates after applying the triplets until no set changes.';

create or replace function stark.edge_type_link_build(skb_name text, rebuild boolean default false)
returns bigint
language plpgsql as $$
declare
    skb int := stark.require_skb(skb_name);
    rows_written bigint;
begin
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
    'Builds the typed-link summary of an SKB (stark.edge_type_link) unless it exists; returns its rows. `stark-pg index` runs it.';

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
          and t.relname not in ('skb', 'node', 'node_field', 'edge', 'query', 'edge_type_link')
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

create or replace function stark.kar_neighbours_sql(skb int, vectors text, hops int, directed boolean,
                                                    last_hop text default 'exact')
returns text
language plpgsql stable as $$
declare
    body text := format('anchors as (select distinct a as anchor from unnest($1::bigint[]) a where a is not null), '
                        'k0 as (select anchor, anchor as node, 0 as hop, array[]::text[] as relations, '
                        'array[]::bigint[] as path, null::double precision as similarity from anchors)');
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
                'c%1$s as (select f.anchor, e.dst as node, min(f.node) as pred '
                '  from k%2$s f cross join lateral %3$s e '
                '  where not exists (select 1 from b%1$s b where b.anchor = f.anchor) group by f.anchor, e.dst), '
                's%1$s as (select c.anchor, c.node, c.pred from c%1$s c '
                '  where not exists (select 1 from (%4$s) v where v.anchor = c.anchor and v.node = c.node)), '
                'r%1$s as (select s.*, %5$s as similarity from (select * from s%1$s order by node) s), '
                'x%1$s as (select c.anchor, c.node, %1$s as hop, p.relations || %6$s as relations, '
                '  p.path || c.node as path, c.similarity from '
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
                '  c.similarity from i%1$s c join k%2$s p on p.anchor = c.anchor and p.node = c.pred)',
                h, h - 1, edges, seen, score, relation, min_rows, vectors, skb,
                replace(incoming, 'o.node', 'd.node_id'),
                case when earlier is null then '' else format(
                    'and not exists (select 1 from %s o where (b.anchor, o.node) in (%s))',
                    replace(incoming, 'o.node', 'd.node_id'), earlier) end,
                replace(stark.vector_distance('d', ix.storage, ix.dim), '$1', '$2'), overfetch);
        else
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
        end if;
        seen := seen || format(' union all select anchor, node from s%s', h);
        if h < hops then
            earlier := coalesce(earlier || ' union all ', '') || format('select anchor, node from k%s', h - 1);
        end if;
    end loop;
    return 'with ' || body || ', found as (' ||
           (select string_agg(format('select * from k%s', h), ' union all ') from generate_series(1, hops) h) ||
           ') select anchor, hop, relations, path, node, similarity, rank::int from '
           '(select found.*, row_number() over (partition by anchor order by similarity desc nulls last, hop, node) '
           'as rank from found) ranked where $3::int is null or rank <= $3 order by anchor, rank';
end
$$;
comment on function stark.kar_neighbours_sql(int, text, int, boolean, text) is
    'Internal: the one statement stark.kar_neighbours runs (skb id, vector table or NULL, hops, directed, last_hop).';

drop function if exists stark.edge_both_ways(int);   -- 0031's, kept by its downgrade

drop table if exists stark.edge_symmetry;
