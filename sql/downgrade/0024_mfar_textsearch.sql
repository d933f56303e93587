-- Migration 0024's downgrade (migrations/versions/0024_mfar_textsearch.py), run by it as one script:
-- The new signatures and stark.bm25_rows go, and 0023's functions (no `engine`: every field by
-- stark.bm25_scores) come back.
-- What it restores:
--   sql/functions/mfar.sql's two functions as of migration 0023, verbatim

drop function if exists
    stark.mfar(text, text, vector, text, text[], text[], double precision[], double precision[],
               double precision[], int, int, double precision, double precision, text),
    stark.mfar_field_scores(text, text, vector, text, text[], text[], int, bigint[], double precision,
                            double precision, text),
    stark.bm25_rows(int, text, text, bigint[], double precision, double precision);

create or replace function stark.mfar_field_scores(
    skb_name text, query text, qvec vector, model text, lexical_fields text[], dense_fields text[],
    pool int default 100, include bigint[] default null,
    k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, field text, scorer text, score double precision)
language plpgsql stable as $$
declare
    skb int := stark.skb_id(skb_name);
    lex text[] := coalesce(lexical_fields, '{}');
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
    select array_agg(stark.mfar_dense_kind(x)) filter (where x <> 'document') into kinds from unnest(dense) x;
    if 'type' = any(dense) then
        raise exception 'field type has no dense scorer (its text is one of a few type names)';
    end if;

    if cardinality(lex) > 0 then
        parts := parts || format(
            'lex as materialized (select f.field, s.node_id, s.score from unnest($1::text[]) as f(field) '
            'cross join lateral stark.bm25_scores(%s, stark.mfar_lexical_scope(f.field), $2, $7, $8) s)', skb);
        cands := cands || 'select x.node_id from (select l.node_id, row_number() over (partition by l.field '
                          'order by l.score desc, l.node_id) as r from lex l) x where x.r <= $5'::text;
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
    if cardinality(lex) > 0 then
        cands := cands || 'select l.node_id, l.field, ''lexical''::text, l.score from lex l '
                          'join cand c on c.node_id = l.node_id'::text;
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
        using lex, query, qvec, kinds, greatest(pool, 0), include, k1, b;
    perform set_config('hnsw.ef_search', coalesce(saved, '40'), true);
end
$$;
comment on function stark.mfar_field_scores(text, text, vector, text, text[], text[], int, bigint[], double precision, double precision) is
    'mFAR''s per-(field, scorer) scores of a query''s candidates (the union of every pair''s shortlist, plus `include`).';

-- mFAR's ranking: sum over pairs of weight * (score - mean) / scale, the weights computed from the query
-- by the caller (stark_pg/retrieve/mfar.py) and bound here as arrays aligned with fields/scorers.
-- A pair with weight 0 (masked) is left out altogether: no shortlist, no score.
create or replace function stark.mfar(
    skb_name text, query text, qvec vector, model text, fields text[], scorers text[],
    weights double precision[], means double precision[], scales double precision[],
    k int default 10, pool int default 100,
    k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language sql stable as $$
    with w as (select * from unnest(fields, scorers, weights, means, scales) as w(field, scorer, weight, mean, scale)
               where w.weight <> 0),
    s as (select * from stark.mfar_field_scores(
              skb_name, query, qvec, model,
              array(select w.field from w where w.scorer = 'lexical'),
              array(select w.field from w where w.scorer = 'dense'), pool, null, k1, b))
    select s.node_id, (select coalesce(sum(-w.weight * w.mean / w.scale), 0) from w)
                      + sum(w.weight * s.score / w.scale) as score
    from s join w on w.field = s.field and w.scorer = s.scorer
    group by s.node_id
    order by score desc, s.node_id
    limit k
$$;
comment on function stark.mfar(text, text, vector, text, text[], text[], double precision[], double precision[], double precision[], int, int, double precision, double precision) is
    'Top-k nodes of the named SKB by an mFAR score: query-conditioned weights over (field, scorer) pairs.';
