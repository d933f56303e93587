-- Migration 0040's downgrade (migrations/versions/0040_bm25_one_pass.py), run by it as one script:
-- 0039's stark.bm25_scores, stark.bm25_rows and stark.mfar_field_scores come back (one scope a call, terms
-- summed in the plan's order); stark.bm25_scores_scopes goes.
-- What it restores:
--   stark.bm25_scores and stark.bm25_rows (sql/functions/lexical.sql) as of 0039, verbatim
--   stark.mfar_field_scores (sql/functions/mfar.sql) as of 0039, verbatim

-- Okapi BM25 as Lucene (since 8.0) and bm25s compute it: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
-- tf part = tf / (tf + k1 (1 - b + b len / avgdl)) without Okapi's constant (k1 + 1), which changes no
-- ranking. Scores every document of a scope that holds at least one query term; callers order and limit.
create or replace function stark.bm25_scores(skb int, target_scope text, query text,
                                             k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language sql stable parallel safe as $$
    with st as (select n_docs::double precision as n, total_len::double precision / greatest(n_docs, 1) as avgdl
                from stark.lex_stats where skb_id = skb and scope = target_scope),
    t as (select q.term, q.qtf * ln(1 + (st.n - lt.df + 0.5) / (lt.df + 0.5)) as weight
          from stark.query_terms(query) q
          join stark.lex_term lt on lt.skb_id = skb and lt.scope = target_scope and lt.term = q.term
          cross join st)
    select p.node_id, sum(t.weight * p.tf / (p.tf + k1 * (1 - b + b * p.len / st.avgdl)))
    from t
    join stark.lex_posting p on p.skb_id = skb and p.scope = target_scope and p.term = t.term
    cross join st
    group by p.node_id
$$;
comment on function stark.bm25_scores(int, text, text, double precision, double precision) is
    'BM25 of every matching document of one scope (by skb_id); see stark.bm25 for the ranked API.';

-- BM25 of the given documents only, as stark.bm25_scores computes it (same statistics, same formula):
-- each query term's postings are probed for those nodes through the postings' primary key rather
-- than read whole. For scoring a known candidate set (mFAR's union of shortlists) when the shortlist
-- came from elsewhere (the pg_textsearch index): pg_textsearch can score a given row
-- (`body <@> to_bm25query(query, index)`), but it tokenises that row's text on every call, about
-- 30 times slower than these probes on whole documents (1,000 rows of the slice: 310 ms against 11 ms).
create or replace function stark.bm25_rows(skb int, target_scope text, query text, node_ids bigint[],
                                           k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language sql stable parallel safe as $$
    with st as (select n_docs::double precision as n, total_len::double precision / greatest(n_docs, 1) as avgdl
                from stark.lex_stats where skb_id = skb and scope = target_scope),
    t as (select q.term, q.qtf * ln(1 + (st.n - lt.df + 0.5) / (lt.df + 0.5)) as weight
          from stark.query_terms(query) q
          join stark.lex_term lt on lt.skb_id = skb and lt.scope = target_scope and lt.term = q.term
          cross join st)
    select p.node_id, sum(t.weight * p.tf / (p.tf + k1 * (1 - b + b * p.len / st.avgdl)))
    from t
    join stark.lex_posting p on p.skb_id = skb and p.scope = target_scope and p.term = t.term
                            and p.node_id = any(node_ids)
    cross join st
    group by p.node_id
$$;
comment on function stark.bm25_rows(int, text, text, bigint[], double precision, double precision) is
    'BM25 (as stark.bm25_scores) of the given documents of one scope (by skb_id) that hold a query term.';

create or replace function stark.mfar_field_scores(
    skb_name text, query text, qvec vector, model text, lexical_fields text[], dense_fields text[],
    pool int default 100, include bigint[] default null,
    k1 double precision default 1.2, b double precision default 0.75, engine text default 'sql')
returns table (node_id bigint, field text, scorer text, score double precision)
language plpgsql stable as $$
declare
    skb int := stark.skb_id(skb_name);
    lex text[] := coalesce(lexical_fields, '{}');
    exact text[];                  -- lexical fields scored by stark.bm25_scores
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
    select array_agg(stark.mfar_dense_kind(x)) filter (where x <> 'document') into kinds from unnest(dense) x;
    if 'type' = any(dense) then
        raise exception 'field type has no dense scorer (its text is one of a few type names)';
    end if;

    if cardinality(exact) > 0 then
        parts := parts || format(
            'lex as materialized (select f.field, s.node_id, s.score from unnest($1::text[]) as f(field) '
            'cross join lateral stark.bm25_scores(%s, stark.mfar_lexical_scope(f.field), $2, $7, $8) s)', skb);
        cands := cands || 'select x.node_id from (select l.node_id, row_number() over (partition by l.field '
                          'order by l.score desc, l.node_id) as r from lex l) x where x.r <= $5'::text;
    end if;
    -- the indexed fields' shortlists straight from their index scans (stark.bm25_index_scan: the scan's
    -- own scores, not the ORDER BY expression computed again per row, which tokenises its text:
    -- measured on the slice's documents, 35 ms against 0.3 ms for 100)
    if cardinality(indexed) > 0 then
        select coalesce(array_agg(distinct s.node_id), '{}') into shortlisted
        from unnest(indexed) as f(field)
        cross join lateral stark.bm25_index_scan(skb, stark.mfar_lexical_scope(f.field), query, pool) s
        where s.index_score < 0;
        -- added to `include` (one unnest): a separate `unnest($10)` branch raised the planner's estimate
        -- of the candidates enough to hash-join whole chunk tables instead of looking candidates up
        -- (the slice, 21 pairs: 101 ms against 67 ms for the SQL engine before, measured)
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

drop function if exists stark.bm25_scores_scopes(int, text[], text, double precision, double precision);
