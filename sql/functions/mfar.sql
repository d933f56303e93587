-- mFAR in SQL: an SKB's fields, each (field, scorer) pair's scores for a query, and the weighted sum.
--
-- A field is one view of a node, scored lexically (BM25 over the field's own postings) and densely
-- (cosine similarity of the query embedding to the field's embeddings):
--   field          lexical scope (stark.lex_*)   dense vectors (stark.emb_* of the model)
--   document       '*'                           the document table (one vector per node)
--   name           'name'                        chunk kind 'name' (name and type)
--   type           'type'                        none
--   <text field>   '<text field>'                chunk kind 'field:<text field>' (best piece)
--   relation:<r>   'relation:<r>'                chunk kind 'relation:<r>'
-- The 'type' and 'relation:<r>' scopes are built on request (`stark-pg index --relation-fields`,
-- or by `stark-pg train mfar`).

create or replace function stark.mfar_lexical_scope(field text)
returns text
language sql immutable parallel safe as $$
    select case when field = 'document' then '*' else field end
$$;

create or replace function stark.mfar_dense_kind(field text)
returns text
language sql immutable parallel safe as $$
    select case when field = 'document' then null
                when field = 'type' then null
                when field = 'name' or field like 'relation:%' then field
                else 'field:' || field end
$$;

create or replace function stark.mfar_field_of_kind(kind text)
returns text
language sql immutable parallel safe as $$
    select case when kind like 'field:%' then substr(kind, 7) else kind end
$$;

-- The fields of an SKB, derived from its data: the whole document, name, type, every text field and
-- every relation, each with whether its lexical scope and dense vectors (of `model`) are built.
create or replace function stark.mfar_fields(skb_name text, model text default 'all-MiniLM-L6-v2')
returns table (field text, lexical boolean, dense boolean)
language plpgsql stable as $$
declare
    skb int := stark.skb_id(skb_name);
    m stark.embedding_model;
    kinds text[] := '{}';
    has_docs boolean := false;
begin
    if skb is null then
        raise exception 'no SKB named %', coalesce(quote_literal(skb_name), 'NULL');
    end if;
    select * into m from stark.embedding_model e where e.name = model;
    if found then
        execute format('select exists (select 1 from stark.%I where skb_id = %s)', m.doc_table, skb) into has_docs;
        execute format('select coalesce(array_agg(distinct kind), ''{}'') from stark.%I where skb_id = %s',
                       m.chunk_table, skb) into kinds;
    end if;
    return query
        with f(field, ord) as (
            select 'document', 0 union all select 'name', 1 union all select 'type', 2
            union all select x.field, 3 from (select distinct nf.field from stark.node_field nf where nf.skb_id = skb) x
            union all select 'relation:' || x.relation, 4
                      from (select distinct e.relation from stark.edge e where e.skb_id = skb) x)
        select f.field,
               exists (select 1 from stark.lex_stats s where s.skb_id = skb and s.scope = stark.mfar_lexical_scope(f.field)),
               case when f.field = 'document' then has_docs else stark.mfar_dense_kind(f.field) = any(kinds) end
        from f order by f.ord, f.field;
end
$$;
comment on function stark.mfar_fields(text, text) is
    'The mFAR fields of the named SKB and whether each has a lexical index and dense vectors of the model.';

-- The top k of the `type` scope by BM25 (score, then node id), as stark.bm25_top ranks it, without
-- reading the scope's postings or a tie through an index: every node of a type has the same text there,
-- so the same score. Each type is scored once (one node of it, stark.bm25_rows), and the k first node
-- ids of each matching type are ranked. (A query naming a type ties every node of it, tens of
-- thousands in a large SKB: the SQL engine reads their postings, the index path scans the tie.)
-- Sequential scans are off: a type's one node is an index probe, which the planner cannot see from a
-- type it does not know.
create or replace function stark.bm25_type_top(skb int, query text, k int,
                                               k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language plpgsql stable set enable_seqscan = off as $$
begin
    perform stark.check_count('bm25', 'k', k, 0, stark.k_max());
    perform stark.check_number('bm25', 'k1', k1, 0, 1000);
    perform stark.check_number('bm25', 'b', b, 0, 1);
    return query
    with recursive t(type) as (                      -- the SKB's types, one index probe each
        select min(n.type) from stark.node n where n.skb_id = skb
        union all
        select (select min(n.type) from stark.node n where n.skb_id = skb and n.type > t.type)
        from t where t.type is not null),
    reps as materialized (
        select t.type, (select n.node_id from stark.node n where n.skb_id = skb and n.type = t.type limit 1) as rep
        from t where t.type is not null),
    scored as materialized (
        select r.type, s.score
        from reps r join stark.bm25_rows(skb, 'type', query, array(select r2.rep from reps r2), k1, b) s
                    on s.node_id = r.rep)
    select x.node_id, s.score
    from scored s
    cross join lateral (select n.node_id from stark.node n where n.skb_id = skb and n.type = s.type
                        order by n.node_id limit k) x
    order by s.score desc, x.node_id
    limit k;
end
$$;
comment on function stark.bm25_type_top(int, text, int, double precision, double precision) is
    'Top-k nodes of the type scope (by skb_id) by BM25, as stark.bm25_top ranks them, one score per type.';

-- Every (field, scorer) score of a query's candidates, one row per (node, field, scorer) that has one
-- (a node with no BM25 match in a field, or no vector for it, has no row: its score there is 0).
-- Candidates: the union of each pair's shortlist (the `pool` best nodes of every lexical field, the
-- `pool` best documents by vector, and per dense field the `pool` best nodes among the nearest
-- chunks an HNSW probe returns), plus `include` (training adds the answers and random negatives).
-- Every candidate is then scored exactly by every pair. pool 0 scores only `include`.
--
-- `engine` picks each lexical field's BM25 engine as stark.bm25_engine does for its scope:
--   'sql'         the field's shortlist is the top `pool` of stark.bm25_scores_scopes, which scores every
--                 document holding a query term (the reference: a pass over every posting of every
--                 query term, whose cost grows with the SKB);
--   'textsearch'  the shortlist is the same top `pool` (score, then node id) found through the scope's
--                 pg_textsearch index (stark.bm25_index_top: block-max WAND reads only postings that can
--                 still enter it, and the rows it fetches are scored exactly);
--   'auto'        'textsearch' for a field whose scope has an index built with this k1 and b, 'sql'
--                 otherwise (the default of stark.mfar and of learned fusion's features).
-- Either way every candidate's lexical score is the SQL engine's (an indexed field scores the union
-- with stark.bm25_rows, probing the postings of the candidates only, equal to the bit), so the engines
-- give the same rows: trained means, scales and trees meet the scores they were fit on. A `pool` above
-- stark.k_max() takes the SQL engine's pass for every field.
drop function if exists stark.mfar_field_scores(text, text, vector, text, text[], text[], int, bigint[],
                                                double precision, double precision);
create or replace function stark.mfar_field_scores(
    skb_name text, query text, qvec vector, model text, lexical_fields text[], dense_fields text[],
    pool int default 100, include bigint[] default null,
    k1 double precision default 1.2, b double precision default 0.75, engine text default 'sql')
returns table (node_id bigint, field text, scorer text, score double precision)
language plpgsql stable as $$
declare
    skb int := stark.skb_id(skb_name);
    lex text[] := coalesce(lexical_fields, '{}');
    exact text[];                  -- lexical fields scored by stark.bm25_scores_scopes, in one pass
    indexed text[];                -- lexical fields shortlisted through their pg_textsearch index
    shortlisted bigint[];          -- the union of the indexed fields' shortlists
    dense text[] := coalesce(dense_fields, '{}');
    kinds text[];
    use_doc boolean := 'document' = any(coalesce(dense_fields, '{}'));
    doc_table text;
    chunk_table text;
    probe int;
    unknown text;
    saved text := current_setting('hnsw.ef_search', true);
    parts text[] := '{}';
    cands text[] := array['select unnest(coalesce($6, ''{}''::bigint[])) as node_id'];
begin
    if skb is null then
        raise exception 'no SKB named %', coalesce(quote_literal(skb_name), 'NULL');
    end if;
    -- Checks stay cheap (no scan of the SKB's chunks or edges: stark.mfar_fields does that, once, for
    -- training): a lexical field must have its scope built; a dense field without vectors scores nothing.
    select string_agg(x, ', ') into unknown from unnest(lex) x
    where not exists (select 1 from stark.lex_stats s where s.skb_id = skb and s.scope = stark.mfar_lexical_scope(x));
    if unknown is not null then
        raise exception 'SKB % has no field(s) % in its lexical index', quote_literal(skb_name), unknown
            using hint = 'fields: stark.mfar_fields(skb_name); type and relation:<r> need `stark-pg index '
                         || skb_name || ' --relation-fields`';
    end if;
    if engine is null or engine not in ('auto', 'textsearch', 'sql') then
        raise exception 'unknown BM25 engine %', coalesce(quote_literal(engine), 'NULL')
            using errcode = 'invalid_parameter_value', hint = 'engines: auto, textsearch, sql';
    end if;
    select coalesce(array_agg(x order by x) filter (where e = 'sql'), '{}'),
           coalesce(array_agg(x order by x) filter (where e = 'textsearch'), '{}')
    into exact, indexed
    from (select x, stark.bm25_engine(skb, stark.mfar_lexical_scope(x), engine, k1, b) as e
          from (select distinct x from unnest(lex) x) d) y;
    -- a pool beyond what a ranked search returns is every matching node in practice: the SQL engine's pass
    if pool > stark.k_max() then
        exact := exact || indexed;
        indexed := '{}';
    end if;
    select array_agg(stark.mfar_dense_kind(x)) filter (where x <> 'document') into kinds from unnest(dense) x;
    if 'type' = any(dense) then
        raise exception 'field type has no dense scorer (its text is one of a few type names)';
    end if;

    if cardinality(exact) > 0 then
        parts := parts || format(
            'lex as materialized (select f.field, s.node_id, s.score from unnest($1::text[]) as f(field) '
            'join stark.bm25_scores_scopes(%s, array(select stark.mfar_lexical_scope(x) from unnest($1::text[]) x), '
            '$2, $7, $8) s on s.scope = stark.mfar_lexical_scope(f.field))', skb);
        cands := cands || 'select x.node_id from (select l.node_id, row_number() over (partition by l.field '
                          'order by l.score desc, l.node_id) as r from lex l) x where x.r <= $5'::text;
    end if;
    -- the indexed fields' shortlists through their indexes, exactly the SQL engine's top `pool` (score,
    -- then node id: stark.bm25_index_top; the type field's by stark.bm25_type_top, one score per type),
    -- so that both engines give the same candidates
    if cardinality(indexed) > 0 then
        select coalesce(array_agg(distinct s.node_id), '{}') into shortlisted
        from (select t.node_id from unnest(indexed) as f(field)
              cross join lateral stark.bm25_index_top(skb, stark.mfar_lexical_scope(f.field), query, pool, k1, b) t
              where f.field <> 'type' and pool > 0
              union all
              select t.node_id from stark.bm25_type_top(skb, query, pool, k1, b) t
              where 'type' = any(indexed) and pool > 0) s;
        -- added to `include` (one unnest): a separate `unnest($10)` branch raised the planner's estimate
        -- of the candidates enough to hash-join whole chunk tables instead of looking candidates up
        include := coalesce(include, '{}') || shortlisted;
    end if;
    if cardinality(dense) > 0 then
        select t.tbl into doc_table from stark.dense_target(skb_name, model, qvec, false) t;
        probe := least(greatest(pool * coalesce(cardinality(kinds), 0), pool, 1), 1000);
        perform set_config('hnsw.ef_search', greatest(probe, 100, coalesce(saved, '40')::int)::text, true);
        if use_doc then
            parts := parts || format(
                'doc_short as materialized (select d.node_id from stark.%I d where d.skb_id = %s '
                'order by d.vec <=> $3 limit $5)', doc_table, skb);
            cands := cands || 'select node_id from doc_short'::text;
        end if;
        if cardinality(kinds) > 0 then
            select t.tbl into chunk_table from stark.dense_target(skb_name, model, qvec, true) t;
            parts := parts || format(
                'chunk_short as materialized (select c.node_id, c.kind, c.vec <=> $3 as dist from stark.%I c '
                'where c.skb_id = %s order by c.vec <=> $3 limit %s)', chunk_table, skb, probe);
            cands := cands || ('select y.node_id from (select c.node_id, row_number() over (partition by c.kind '
                               'order by min(c.dist), c.node_id) as r from chunk_short c where c.kind = any($4) '
                               'group by c.node_id, c.kind) y where y.r <= $5')::text;
        end if;
    end if;
    parts := parts || ('cand as materialized (' || array_to_string(cands, ' union ') || ')');

    cands := '{}';
    if cardinality(exact) > 0 then
        cands := cands || 'select l.node_id, l.field, ''lexical''::text, l.score from lex l '
                          'join cand c on c.node_id = l.node_id'::text;
    end if;
    if cardinality(indexed) > 0 then
        cands := cands || format(
            'select s.node_id, f.field, ''lexical''::text, s.score from unnest($9::text[]) as f(field) '
            'cross join lateral stark.bm25_rows(%s, stark.mfar_lexical_scope(f.field), $2, '
            '(select array_agg(c.node_id) from cand c), $7, $8) s', skb);
    end if;
    if use_doc then
        cands := cands || format('select d.node_id, ''document''::text, ''dense''::text, 1 - (d.vec <=> $3) '
                                 'from cand c join stark.%I d on d.skb_id = %s and d.node_id = c.node_id',
                                 doc_table, skb);
    end if;
    if cardinality(kinds) > 0 then
        cands := cands || format('select x.node_id, stark.mfar_field_of_kind(x.kind), ''dense''::text, '
                                 'max(1 - (x.vec <=> $3)) from cand c join stark.%I x on x.skb_id = %s '
                                 'and x.node_id = c.node_id where x.kind = any($4) group by x.node_id, x.kind',
                                 chunk_table, skb);
    end if;
    if cardinality(cands) = 0 then
        return;
    end if;
    return query execute 'with ' || array_to_string(parts, ', ') || ' ' || array_to_string(cands, ' union all ')
        using exact, query, qvec, kinds, greatest(pool, 0), include, k1, b, indexed;
    perform set_config('hnsw.ef_search', coalesce(saved, '40'), true);
end
$$;
comment on function stark.mfar_field_scores(text, text, vector, text, text[], text[], int, bigint[], double precision, double precision, text) is
    'mFAR''s per-(field, scorer) scores of a query''s candidates (the union of every pair''s shortlist, plus `include`); lexical engine sql, textsearch or auto.';

-- mFAR's ranking: sum over pairs of weight * (score - mean) / scale, the weights computed from the query
-- by the caller (stark_pg/retrieve/mfar.py) and bound here as arrays aligned with fields/scorers.
-- A pair with weight 0 (masked) is left out altogether: no shortlist, no score. `engine` is the lexical
-- fields' BM25 engine (see stark.mfar_field_scores; 'auto' takes a field's pg_textsearch index when built).
drop function if exists stark.mfar(text, text, vector, text, text[], text[], double precision[], double precision[],
                                   double precision[], int, int, double precision, double precision);
create or replace function stark.mfar(
    skb_name text, query text, qvec vector, model text, fields text[], scorers text[],
    weights double precision[], means double precision[], scales double precision[],
    k int default 10, pool int default 100,
    k1 double precision default 1.2, b double precision default 0.75, engine text default 'auto')
returns table (node_id bigint, score double precision)
language sql stable as $$
    with w as (select * from unnest(fields, scorers, weights, means, scales) as w(field, scorer, weight, mean, scale)
               where w.weight <> 0),
    s as (select * from stark.mfar_field_scores(
              skb_name, query, qvec, model,
              array(select w.field from w where w.scorer = 'lexical'),
              array(select w.field from w where w.scorer = 'dense'), pool, null, k1, b, engine))
    select s.node_id, (select coalesce(sum(-w.weight * w.mean / w.scale), 0) from w)
                      + sum(w.weight * s.score / w.scale) as score
    from s join w on w.field = s.field and w.scorer = s.scorer
    group by s.node_id
    order by score desc, s.node_id
    limit stark.check_count('mfar', 'k', k, 0, stark.k_max())
$$;
comment on function stark.mfar(text, text, vector, text, text[], text[], double precision[], double precision[], double precision[], int, int, double precision, double precision, text) is
    'Top-k nodes of the named SKB by an mFAR score: query-conditioned weights over (field, scorer) pairs.';
