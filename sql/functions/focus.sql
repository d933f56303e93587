-- 4StepFocus (Boer, Koch, Kramer 2024) in SQL: linking the constants of LLM triplets to nodes
-- (their Algorithm 3, the part PostgreSQL can do), substituting the triplets' variables over the
-- edge table until no candidate set changes (their Algorithm 2). Ranking the surviving candidates
-- (their step 3) is in focus_rank.sql.
--
-- Everything reads one SKB at a time (skb_id literal in every statement, so only that SKB's edge
-- partition and partial indexes are touched); no temporary tables, no cross-SKB joins.

-- ---------------------------------------------------------------------------------------------
-- Names, normalised for exact linking: lower case, every run of characters that are not letters or
-- digits collapsed to one space, trimmed. "Crohn's Colitis" and "crohn s colitis" are the same name.
create or replace function stark.focus_normalize(name text)
returns text
language sql immutable strict parallel safe as $$
    select btrim(regexp_replace(lower(name), '[^[:alnum:]]+', ' ', 'g'))
$$;
comment on function stark.focus_normalize(text) is
    '4StepFocus: a name for exact linking (lower case, runs of non-alphanumerics -> one space, trimmed).';

-- Names with every non-alphanumeric character removed ("SMAD-3", "smad 3" and "SMAD3" agree), indexed,
-- so names that differ only in spacing or punctuation reach the linker's shortlist.
create or replace function stark.focus_compact(name text)
returns text
language sql immutable strict parallel safe as $$
    select regexp_replace(lower(name), '[^[:alnum:]]+', '', 'g')
$$;
comment on function stark.focus_compact(text) is
    '4StepFocus: a name without spaces or punctuation, lower case (the key of node_compact_name_idx).';
create index if not exists node_compact_name_idx on stark.node (skb_id, stark.focus_compact(name));

-- The nodes a constant of a triplet may link to: those whose name equals the constant but for case,
-- spaces, punctuation and up to two trailing characters (plurals: "ORMDL3s"), plus the `pool` best BM25 matches over the name field (the lexical index's
-- `name` scope; without it only the former are found). `exact` says whether the normalised names
-- (stark.focus_normalize) are equal. Python scores these few by string and embedding similarity
-- (stark_pg/retrieve/focus/link.py).
create or replace function stark.focus_name_candidates(skb_name text, constant text, pool int default 20)
returns table (node_id bigint, type text, name text, exact boolean, bm25 double precision)
language sql stable as $$
    with skb as (select stark.skb_id(skb_name) as id),
    lexical as (select b.node_id, b.score from stark.bm25_scores(stark.require_skb(skb_name), 'name', constant) b
                order by b.score desc, b.node_id
                limit stark.check_count('focus_name_candidates', 'pool', pool, 0, stark.k_max())),   -- empty without a lexical index
    same_name as (select n.node_id from stark.node n, skb
                  where n.skb_id = skb.id
                    and stark.focus_compact(n.name) = any (array[stark.focus_compact(constant),
                                                                 left(stark.focus_compact(constant), -1),
                                                                 left(stark.focus_compact(constant), -2)])),
    found as (select l.node_id from lexical l union select s.node_id from same_name s)
    select n.node_id, n.type, n.name, stark.focus_normalize(n.name) = stark.focus_normalize(constant),
           l.score
    from found f
    cross join skb
    join stark.node n on n.skb_id = skb.id and n.node_id = f.node_id
    left join lexical l on l.node_id = f.node_id
    order by 4 desc, l.score desc nulls last, n.node_id
$$;
comment on function stark.focus_name_candidates(text, text, int) is
    '4StepFocus linking: nodes named like `constant` (same name but for case, spaces and punctuation, or among the best BM25 name matches).';

-- ---------------------------------------------------------------------------------------------
-- Substitution (Algorithm 2). A problem is JSON:
--   {"variables": {"x1": "drug", "x2": "gene/protein", "x3": null},      -- each variable's node type (null: any)
--    "triplets": [{"head": "x1", "relation": "target", "tail": "x2"},     -- variable-variable
--                 {"head": "x2", "relation": "interacts with", "tail": [144, 2001]}]}  -- a constant: its linked nodes
-- Each variable's candidate set starts as the nodes of its type; a triplet between a variable and a
-- constant keeps the candidates with an edge to one of the constant's nodes; a triplet between two
-- variables keeps, on each side, the candidates with an edge to a candidate of the other side. The
-- variable-variable triplets are applied round after round until a whole round changes no set: the
-- largest arc-consistent candidate sets, which are the same whatever order the triplets are applied in.
-- Edges: either direction (directed => false, the default: LLMs often reverse a relation, and PrimeKG
-- stores each edge both ways anyway) or head -> tail only; where the SKB stores every edge both ways
-- (stark.edge_symmetry, built by `stark-pg index`), either direction is read as outgoing edges alone,
-- the same sets from half the edges. Relations: the triplet's relation only (respect_relations =>
-- true) or any relation (the paper's setting).
--
-- `max_cost` bounds the tail: a variable-variable revision whose cheaper statement is estimated (with
-- the degrees stark.focus_revise measures) to read more index entries than this is not made; the set
-- keeps its members, a superset of the arc-consistent set, so no answer is lost, only less is narrowed.
-- The column `cut` counts such revisions (0: the sets are exact). Those are revisions between two large
-- sets, whose result stays large: a prefilter of little use. NULL: no bound.
--
-- A set nothing has narrowed yet stays symbolic ("every node of the type") and is read from stark.node
-- when a triplet needs it, so an unconstrained variable costs nothing; sets otherwise live in arrays.
-- (Created only where missing, so that later migrations can re-run this file.)
do $$
begin
    if to_regtype('stark.focus_domain') is null then
        create type stark.focus_domain as (
            variable  text,
            node_type text,        -- null: any type
            top       boolean,     -- true: every node of node_type (not materialised)
            node_ids  bigint[]     -- sorted, when not top
        );
    end if;
end
$$;
comment on type stark.focus_domain is '4StepFocus: one variable''s candidate set during substitution.';

-- A candidate set as a FROM item `(...) alias(id)`; $<param> carries its array when materialised.
create or replace function stark.focus_domain_source(skb int, d stark.focus_domain, param int, type_param int,
                                                     alias text)
returns text
language sql immutable as $$
    select case
        when not d.top then format('unnest($%s::bigint[]) %I(id)', param, alias)
        when d.node_type is null then format('(select n.node_id as id from stark.node n where n.skb_id = %s) %I',
                                              skb, alias)
        else format('(select n.node_id as id from stark.node n where n.skb_id = %s and n.type = $%s) %I',
                    skb, type_param, alias)
    end
$$;
comment on function stark.focus_domain_source(int, stark.focus_domain, int, int, text) is
    'Internal (4StepFocus): a candidate set as SQL, an array parameter or the nodes of a type.';

-- The statement that revises candidate set y against set x over edges of `relation` (null: any):
-- the members of y with an edge to a member of x. y_end: 'src' (y is the edge's source: y is the
-- triplet's head), 'dst' (y is its tail) or null (either direction). Parameters: $1 y's ids, $2 x's ids,
-- $3 relation, $4 y's type, $5 x's type. The planner picks the side to start from (the arrays' sizes
-- are known to it, since EXECUTE plans with the actual values).
create or replace function stark.focus_revise_sql(skb int, y stark.focus_domain, x stark.focus_domain,
                                                  relation text, y_end text)
returns text
language plpgsql immutable as $$
declare
    rel text := case when relation is null then '' else ' and e.relation = $3' end;
    one text := 'select y.id from %s join stark.edge e on e.skb_id = %s and e.%I = y.id%s join %s on x.id = e.%I';
    parts text[] := '{}';
    ys text := stark.focus_domain_source(skb, y, 1, 4, 'y');
    xs text := stark.focus_domain_source(skb, x, 2, 5, 'x');
begin
    if y_end is null or y_end = 'src' then
        parts := parts || format(one, ys, skb, 'src', rel, xs, 'dst');
    end if;
    if y_end is null or y_end = 'dst' then
        parts := parts || format(one, ys, skb, 'dst', rel, xs, 'src');
    end if;
    return format('select coalesce(array_agg(distinct r.id order by r.id), ''{}'') from (%s) r',
                  array_to_string(parts, ' union all '));
end
$$;
comment on function stark.focus_revise_sql(int, stark.focus_domain, stark.focus_domain, text, text) is
    'Internal (4StepFocus): SQL keeping the members of one candidate set with an edge to a member of another.';

-- The same revision probed from y's side: each member of y is kept on finding one edge to a member of
-- x, so a candidate with support costs an index descent and a short scan of its edges however many
-- neighbours it has; the other way round (focus_revise_sql) reads every edge of every member of x.
-- With x dense (a large share of its type), as in two-hop chains over Prime's densest relations,
-- that is millions of edges against a few thousand short probes. The EXISTS subqueries carry
-- `offset 0` so the planner keeps them as probes (it would otherwise turn them into a hash semi-join
-- over all of x's edges), and x's membership is `(e.<x end> + 0) = any ($2)`, an expression rather
-- than an index condition, which PostgreSQL evaluates with one hash table built once for the whole
-- statement (as an index condition, the array would be sorted again at every probe).
-- x_filter false: x is every node (any edge counts). Parameters as in focus_revise_sql: $1 y's ids,
-- $2 x's ids (x's type's nodes when x is still every node of its type), $3 relation, $4 y's type;
-- with `relation_list`, $5 the relations that can link y to x (from the SKB's typed-link summary),
-- which the probe's index scan then visits alone instead of every edge of the member.
drop function if exists stark.focus_probe_sql(int, stark.focus_domain, boolean, text, text);
create or replace function stark.focus_probe_sql(skb int, y stark.focus_domain, x_filter boolean,
                                                 relation text, y_end text, relation_list boolean default false)
returns text
language plpgsql immutable as $$
declare
    rel text := case when relation is not null then ' and e.relation = $3'
                     when relation_list then ' and e.relation = any ($5::text[])' else '' end;
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
comment on function stark.focus_probe_sql(int, stark.focus_domain, boolean, text, text, boolean) is
    'Internal (4StepFocus): SQL keeping the members of one candidate set with an edge to a member of another, probing from the first.';

-- The members of set y (every node of its type while y.top) with at least one edge of `relation` (null:
-- any) at y's end `y_end` ('src', 'dst', null: either) to a node of `other_type` (null: of any type),
-- read from the SKB's typed-link summary (stark.edge_type_link, built by `stark-pg index`) instead of
-- probing the edges of every member; sorted. Null where the SKB has no summary.
create or replace function stark.focus_linked(skb int, y stark.focus_domain, other_type text, relation text,
                                              y_end text)
returns bigint[]
language plpgsql stable as $$
declare
    result bigint[];
begin
    if not exists (select from stark.edge_type_link l where l.skb_id = skb) then
        return null;
    end if;
    if y.top then
        select coalesce(array_agg(distinct u.id order by u.id), '{}') into result
        from stark.edge_type_link l cross join unnest(l.node_ids) u(id)
        where l.skb_id = skb and (y.node_type is null or l.node_type = y.node_type)
          and (focus_linked.other_type is null or l.other_type = focus_linked.other_type)
          and (focus_linked.relation is null or l.relation = focus_linked.relation)
          and (y_end is null or l.out = (y_end = 'src'));
    else
        select coalesce(array_agg(m.id order by m.id), '{}') into result
        from unnest(y.node_ids) m(id)
        where m.id in (select u.id
                       from stark.edge_type_link l cross join unnest(l.node_ids) u(id)
                       where l.skb_id = skb and (y.node_type is null or l.node_type = y.node_type)
                         and (focus_linked.other_type is null or l.other_type = focus_linked.other_type)
                         and (focus_linked.relation is null or l.relation = focus_linked.relation)
                         and (y_end is null or l.out = (y_end = 'src')));
    end if;
    return result;
end
$$;
comment on function stark.focus_linked(int, stark.focus_domain, text, text, text) is
    'Internal (4StepFocus): the members of a candidate set with an edge to some node of a type, from stark.edge_type_link.';

-- The edges between the nodes listed in parameter $<from_param> and those listed in $<keep_param>, of
-- `relation` ($3; null: any) with the kept node at y's end (`y_end`: 'src', 'dst', null: either):
-- one row `id` per edge, the kept node. Each listed "from" node is one index scan of its edges
-- (LATERAL ... offset 0: the planner would rather scan the whole relation), and the other end is kept
-- when `(e.<end> + 0) = any ($<keep_param>)`: one hash table for the statement, not an index condition.
create or replace function stark.focus_edge_ends_sql(skb int, relation text, y_end text, from_param int,
                                                     keep_param int)
returns text
language plpgsql immutable as $$
declare
    rel text := case when relation is null then '' else ' and e.relation = $3' end;
    one text := 'select e.id from unnest($%5$s::bigint[]) f(id) cross join lateral (select e.%1$I as id '
                'from stark.edge e where e.skb_id = %2$s and e.%3$I = f.id%4$s '
                'and (e.%1$I + 0) = any ($%6$s::bigint[]) offset 0) e';
    parts text[] := '{}';
begin
    if y_end is null or y_end = 'src' then
        parts := parts || format(one, 'src', skb, 'dst', rel, from_param, keep_param);
    end if;
    if y_end is null or y_end = 'dst' then
        parts := parts || format(one, 'dst', skb, 'src', rel, from_param, keep_param);
    end if;
    return array_to_string(parts, ' union all ');
end
$$;
comment on function stark.focus_edge_ends_sql(int, text, text, int, int) is
    'Internal (4StepFocus): SQL listing, per edge from one listed set to another, the node of the second.';

-- The members of y (materialised, each with at least one edge to a node of x's type: stark.focus_linked)
-- with an edge to a member of x, when x holds most of its type: y less the members all of whose edges
-- to the type go to the few nodes of the type that x lacks. Those edges are counted from the lacking
-- nodes' side and compared with each member's count in stark.edge_type_link, so only the lacking
-- nodes' edges are read (a probe would descend the edge index once per member of y).
create or replace function stark.focus_complement(skb int, y stark.focus_domain, x stark.focus_domain,
                                                  relation text, y_end text)
returns bigint[]
language plpgsql stable as $$
declare
    missing bigint[];
    result bigint[];
begin
    missing := array(select n.node_id from stark.node n where n.skb_id = skb and n.type = x.node_type
                     except select u.id from unnest(x.node_ids) u(id));
    execute format(
        'with hits as (select h.id, count(*) as n from (%s) h group by h.id),
              counted as (select u.id, sum(u.n) as n
                          from stark.edge_type_link l cross join unnest(l.node_ids, l.edges) u(id, n)
                          where l.skb_id = %s and ($4::text is null or l.node_type = $4) and l.other_type = $5
                            and ($3::text is null or l.relation = $3) %s
                            and u.id in (select hits.id from hits)
                          group by u.id)
         select coalesce(array_agg(m.id order by m.id), ''{}'') from unnest($2::bigint[]) m(id)
         where m.id not in (select h.id from hits h join counted c on c.id = h.id and c.n = h.n)',
        stark.focus_edge_ends_sql(skb, relation, y_end, 1, 2), skb,
        case when y_end is null then '' when y_end = 'src' then 'and l.out' else 'and not l.out' end)
        into result using missing, y.node_ids, relation, y.node_type, x.node_type;
    return result;
end
$$;
comment on function stark.focus_complement(int, stark.focus_domain, stark.focus_domain, text, text) is
    'Internal (4StepFocus): the members of a candidate set with an edge to a member of another that holds most of its type, through the nodes of the type it lacks.';

-- The same revision gathered from x's side with y given as a list: every edge of every member of x is
-- read through the edge index, and its other end kept when it is in y (stark.focus_edge_ends_sql).
-- With y still every node of its type, focus_revise_sql joins the node table per edge for the type (a
-- few µs an edge over a hub's tens of thousands); the typed-link summary's list of y's type stands in
-- for it here. Parameters: $1 y's ids, $2 x's ids, $3 relation.
create or replace function stark.focus_gather_sql(skb int, relation text, y_end text)
returns text
language sql immutable as $$
    select format('select coalesce(array_agg(distinct r.id order by r.id), ''{}'') from (%s) r',
                  stark.focus_edge_ends_sql(skb, relation, y_end, 2, 1))
$$;
comment on function stark.focus_gather_sql(int, text, text) is
    'Internal (4StepFocus): SQL keeping the members of a listed candidate set with an edge to a member of another, read from the other''s edges.';

-- One revision: the members of y with an edge to a member of x, by whichever of the two statements
-- reads fewer edges. Probing from y (focus_probe_sql) stops at a member's first supporting edge: about
-- nodes / |x| edges in when x is large, all of a member's edges when it has no support. Gathering
-- from x (focus_revise_sql) reads every edge of every member of x. Degrees differ by an order of
-- magnitude between types and relations (a drug has some 700 edges, a phenotype 40), so when the
-- choice matters the two sides' degrees are measured on 16 of their members (a few thousand index
-- entries) rather than taken from the SKB's average `degree` (edges per node and direction).
-- Where the SKB has a typed-link summary (stark.edge_type_link), a revision against a set nothing has
-- narrowed (every node of a type) is read from it (stark.focus_linked); a large set is cut to the
-- members with an edge to x's type before probing (a member without one would read all its edges to
-- fail); against a set that holds most of its type, the few nodes it lacks are read instead
-- (stark.focus_complement) when that reads less; a probe with relations ignored visits only the
-- relations that link the two types (a gene's hundreds of `expression present` edges are skipped
-- when looking for its `ppi` partner); and a gather into a set still every node of its type tests
-- each edge's end against the summary's list of that type (stark.focus_gather_sql) when there are
-- more edges to test than nodes in the list.
-- `x_ids` are x's members (x's type's nodes while x is every node of its type; null for every node
-- of any type, which only a probe can use), `nodes` the SKB's node count.
-- `max_cost` (null: none): a revision whose cheaper statement is estimated to read more index entries
-- than this is not made, and NULL is returned (y keeps every member: a superset of the revised set).
drop function if exists stark.focus_revise(int, stark.focus_domain, bigint, stark.focus_domain, bigint[], bigint, bigint,
                                           text, text, double precision);
create or replace function stark.focus_revise(skb int, y stark.focus_domain, y_size bigint,
                                              x stark.focus_domain, x_ids bigint[], x_size bigint,
                                              nodes bigint, relation text, y_end text,
                                              degree double precision, max_cost double precision default null)
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
    if max_cost is not null and least(probe, gather) > max_cost then
        return null;                                 -- over the budget: not revised
    end if;
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
        -- each edge's far end looked up in the node table for its type costs about 16 times what one
        -- entry of the summary's list of that type costs to read and hash: worth the list once there
        -- are more than a sixteenth as many edges as nodes in y's type
        if y.top and not x.top and 16 * x_size * x_degree > y_size then
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
comment on function stark.focus_revise(int, stark.focus_domain, bigint, stark.focus_domain, bigint[], bigint, bigint, text, text, double precision, double precision) is
    'Internal (4StepFocus): the members of one candidate set with an edge to a member of another, probed or gathered, whichever reads less (NULL: over max_cost, not revised).';

drop function if exists stark.focus_substitute(text, jsonb, boolean, boolean, int);
create or replace function stark.focus_substitute(skb_name text, problem jsonb,
                                                  respect_relations boolean default false,
                                                  directed boolean default false, max_rounds int default 1000,
                                                  max_cost double precision default 50000)
returns table (variable text, node_type text, unconstrained boolean, size bigint, node_ids bigint[], rounds int,
               cut int)
language plpgsql stable as $$
declare
    n_cut int := 0;                        -- variable-variable revisions not made: over max_cost
    cut_now boolean := false;
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
    -- every edge also stored reversed (stark.edge_symmetry): an edge either way between a and b is an
    -- edge from a to b, so an undirected revision reads the revised set's outgoing edges alone
    both_ways boolean;
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
    both_ways := not directed and stark.edge_both_ways(skb);
    if both_ways then
        ends := 1;
    end if;
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
                                      n_nodes, rel, case when directed then var_end when both_ways then 'src' end, degree);
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
                    a_end := case when both_ways then 'src' when not directed then null
                                  when side = 1 then 'src' else 'dst' end;
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
                                                      b_size, n_nodes, arc_rel[i], a_end, degree, max_cost);
                        if new_ids is null then
                            n_cut := n_cut + 1;              -- over the budget: a keeps its members
                            cut_now := true;
                        elsif cardinality(new_ids) >= a_size then
                            new_ids := null;
                        end if;
                    end if;
                    seen_ver[k] := ver[b];
                    -- after a cut, a was never revised against b: no incremental revision may build on it
                    seen_dom[k] := case when cut_now then null else doms[b] end;
                    cut_now := false;
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
        cut := n_cut;
        return next;
    end loop;
end
$$;
comment on function stark.focus_substitute(text, jsonb, boolean, boolean, int, double precision) is
    '4StepFocus substitution: each variable''s candidates after applying the triplets until no set changes.';
