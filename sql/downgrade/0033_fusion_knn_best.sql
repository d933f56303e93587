-- Migration 0033's downgrade (migrations/versions/0033_fusion_knn_best.py), run by it as one script:
-- 0032's functions come back (same signatures, without the two features).
-- What it restores:
--   sql/functions/fusion.sql as of migration 0032, verbatim

-- Learned fusion (`stark-pg train fusion`, method `fusion`): every signal stark-pg computes about a
-- (query, candidate) pair, as one feature vector per candidate, computed here for training and for
-- search alike, so the two can never disagree. A trained model (gradient-boosted trees, LightGBM
-- lambdarank) is compiled to one SQL expression over `f[i]` (stark_pg/train/fusion_model.py) that
-- orders the candidates.
--
-- Candidates: the union of mFAR's shortlists (the `pool` best of every lexical field and every dense
-- field, stark.mfar_field_scores). Features, in the order stark.fusion_feature_names lists them:
--   per (field, scorer) pair of stark.mfar_fields: its score (0 where the candidate has none), and for
--     lexical pairs also that score divided by the best score of the pair for this query (BM25 scales
--     differ from query to query);
--   type_share: the share of the nearest training queries' answers (stark.answer_type_votes, which
--     leaves the question itself out) that have the candidate's type;
--   knn_answer: how much the candidate is an answer of the `knn` nearest training queries (each adds
--     its cosine similarity divided by the square root of its number of answers; queries with the same
--     text as the question are left out: no query sees its own answers);
--   linked: the candidate's BM25 over names against the query, divided by the best (the `link` best
--     name matches only: entities the question names);
--   hop1, hop2: the largest `linked` weight among the linked entities one (two) hops away;
--   trained_dense (only when `dense_models` is given): the candidate's cosine to the query under
--     fine-tuned dense models (stark.mean_cosine: the mean over the models given). Training passes, for
--     each training question, only the model trained without its fold (cross-fitting: a question never
--     gets a score from a model that was trained on it); search passes every fold's model.

create or replace function stark.mean_cosine(skb_name text, node_ids bigint[], models text[], qvecs vector[])
returns table (node_id bigint, score double precision)
language plpgsql stable as $$
-- The mean over `models` of the cosine of each node's document vector to that model's query vector
-- (qvecs[i] is the query under models[i]); a node without a vector of some model counts 0 there.
declare
    t record;
    parts text[] := '{}';
begin
    if cardinality(models) is distinct from cardinality(qvecs) then
        raise exception 'stark.mean_cosine: % models but % query vectors', cardinality(models), cardinality(qvecs);
    end if;
    for i in 1 .. coalesce(cardinality(models), 0) loop
        t := stark.dense_target(skb_name, models[i], qvecs[i], false);
        parts := parts || format('select d.node_id, 1 - (d.vec <=> $2[%s]) as cosine from stark.%I d '
                                 'where d.skb_id = %s and d.node_id = any($1)', i, t.tbl, t.skb);
    end loop;
    if cardinality(parts) = 0 then
        return;
    end if;
    return query execute format('select u.node_id, sum(u.cosine) / %s from (%s) u group by u.node_id',
                                cardinality(parts), array_to_string(parts, ' union all '))
        using node_ids, qvecs;
end
$$;
comment on function stark.mean_cosine(text, bigint[], text[], vector[]) is
    'The mean over several embedding models of each node''s cosine to the query (learned fusion''s trained_dense).';

create or replace function stark.fusion_pairs(skb_name text, model text default 'all-MiniLM-L6-v2')
returns table (ord int, field text, scorer text)
language sql stable as $$
    select (row_number() over (order by p.scorer desc, p.n))::int, p.field, p.scorer
    from (select f.field, 'lexical'::text as scorer, row_number() over () as n
          from stark.mfar_fields(skb_name, model) f where f.lexical
          union all
          select f.field, 'dense', row_number() over ()
          from stark.mfar_fields(skb_name, model) f where f.dense) p
$$;
comment on function stark.fusion_pairs(text, text) is
    'Learned fusion: the (field, scorer) pairs whose scores are features, in feature order.';

drop function if exists stark.fusion_feature_names(text, text);
create or replace function stark.fusion_feature_names(skb_name text, model text default 'all-MiniLM-L6-v2',
                                                      trained_dense boolean default false)
returns text[]
language sql stable as $$
    select array(select n from (
        select p.ord * 2 as o, p.field || '|' || p.scorer as n from stark.fusion_pairs(skb_name, model) p
        union all
        select p.ord * 2 + 1, p.field || '|' || p.scorer || '|norm' from stark.fusion_pairs(skb_name, model) p
        where p.scorer = 'lexical'
        union all
        select 100000 + x.o, x.n
        from (values (1, 'type_share'), (2, 'knn_answer'), (3, 'linked'), (4, 'hop1'), (5, 'hop2'),
                     (6, case when trained_dense then 'trained_dense' end)) as x(o, n)
        where x.n is not null) f
        order by f.o)
$$;
comment on function stark.fusion_feature_names(text, text, boolean) is
    'Learned fusion: the names of the features stark.fusion_features computes, in order.';

drop function if exists stark.fusion_features(text, text, vector, text, int, int, int, bigint[]);
create or replace function stark.fusion_features(
    skb_name text, query text, qvec vector, model text default 'all-MiniLM-L6-v2',
    pool int default 100, knn int default 10, link int default 5, include bigint[] default null,
    dense_models text[] default null, dense_qvecs vector[] default null)
returns table (node_id bigint, f double precision[])
language sql stable as $$
    with skb as (select stark.require_skb(skb_name) as id),
    pairs as (select * from stark.fusion_pairs(skb_name, model)),
    scores as materialized (
        select s.* from stark.mfar_field_scores(
            skb_name, query, qvec, model,
            array(select p.field from pairs p where p.scorer = 'lexical'),
            array(select p.field from pairs p where p.scorer = 'dense'), pool, include) s),
    best as (select s.field, s.scorer, max(s.score) as top from scores s group by s.field, s.scorer),
    -- each candidate's scores keyed by their pair's place, then looked up by it: joining every
    -- (candidate, pair) to the scores let the planner match on the pair alone and filter 2.6M rows
    per_node as materialized (
        select s.node_id, array_agg(p.ord) as ords, array_agg(s.score) as raw,
               array_agg(case when b.top is null or b.top <= 0 then 0 else s.score / b.top end) as normed
        from scores s
        join pairs p on p.field = s.field and p.scorer = s.scorer
        left join best b on b.field = s.field and b.scorer = s.scorer
        group by s.node_id),
    -- Materialized, and joined rather than looked up per candidate: a CTE read once is inlined into
    -- the correlated lookup, which then ranked the 435 training questions again for every candidate.
    votes as materialized (
        select v.node_type, v.share
        from stark.answer_type_votes(skb_name, qvec, 'train', knn, model, query) v),
    near as materialized (
        select q.answer_ids, 1 - (v.vec <=> qvec) as sim
        from stark.query q
        join stark.query_vector v on v.skb_id = q.skb_id and v.query_id = q.query_id and v.model = fusion_features.model
                                   and v.body_md5 = md5(q.body)
        where q.skb_id = (select id from skb) and q.split = 'train' and q.body <> query
        order by v.vec <=> qvec, q.query_id
        limit knn),
    knn_answers as materialized (
        select a.node_id, sum(n.sim / sqrt(cardinality(n.answer_ids))) as w
        from near n cross join lateral unnest(n.answer_ids) as a(node_id)
        group by a.node_id),
    linked as materialized (
        select l.node_id, l.score / max(l.score) over () as w
        from (select b.node_id, b.score from stark.bm25_scores((select id from skb), 'name', query) b
              order by b.score desc, b.node_id limit link) l),
    hop1 as materialized (
        select e.dst as node_id, max(l.w) as w
        from linked l join stark.edge e on e.skb_id = (select id from skb) and e.src = l.node_id
        group by e.dst),
    hop2 as materialized (
        select e2.dst as node_id, max(h.w) as w
        from hop1 h join stark.edge e2 on e2.skb_id = (select id from skb) and e2.src = h.node_id
        group by e2.dst),
    trained as materialized (
        select t.node_id, t.score
        from stark.mean_cosine(skb_name, array(select c.node_id from per_node c), dense_models, dense_qvecs) t)
    select pn.node_id,
           array(select x.v from (
                     select p.ord * 2 as o, coalesce(pn.raw[array_position(pn.ords, p.ord)], 0) as v from pairs p
                     union all
                     select p.ord * 2 + 1, coalesce(pn.normed[array_position(pn.ords, p.ord)], 0) from pairs p
                     where p.scorer = 'lexical') x
                 order by x.o)
           || array[coalesce(vt.share, 0), coalesce(ka.w, 0), coalesce(li.w, 0), coalesce(h1.w, 0),
                    coalesce(h2.w, 0)]::double precision[]
           || case when cardinality(dense_models) > 0 then array[coalesce(td.score, 0)]
                   else '{}' end::double precision[]
    from per_node pn
    join stark.node n on n.skb_id = (select id from skb) and n.node_id = pn.node_id
    left join votes vt on vt.node_type = n.type
    left join knn_answers ka on ka.node_id = pn.node_id
    left join linked li on li.node_id = pn.node_id
    left join hop1 h1 on h1.node_id = pn.node_id
    left join hop2 h2 on h2.node_id = pn.node_id
    left join trained td on td.node_id = pn.node_id
$$;
comment on function stark.fusion_features(text, text, vector, text, int, int, int, bigint[], text[], vector[]) is
    'Learned fusion: the feature vector of every candidate of a query (names: stark.fusion_feature_names).';
