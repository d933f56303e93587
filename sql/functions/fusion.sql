-- Learned fusion (`stark-pg train fusion`, method `fusion`): every signal stark-pg computes about a
-- (query, candidate) pair, as one feature vector per candidate, computed here for training and for
-- search alike, so the two can never disagree. A trained model (gradient-boosted trees, LightGBM
-- lambdarank) is compiled to one SQL expression over the features (stark_pg/train/fusion_model.py) that
-- orders the candidates.
--
-- Candidates: the union of mFAR's shortlists (the `pool` best of every lexical field and every dense
-- field, stark.mfar_field_scores). `engine` is the BM25 engine of the lexical shortlists and of the
-- linked entities ('auto': a scope's pg_textsearch index where built, the SQL engine's pass otherwise);
-- both engines give the same top k (score, then node id) and every score is the SQL engine's, so the
-- features are the same whichever is used, and only their cost differs.
-- Features, in the order stark.fusion_feature_names lists them:
--   per (field, scorer) pair of stark.mfar_fields (stark.fusion_pairs; or `pair_fields` and `pair_scorers`
--     when given, a stored model's pairs in its features' order): its score (0 where the candidate has none), and for
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
--   knn_best, knn_first: the cosine of the nearest of those `knn` training queries that has the
--     candidate as an answer, and 1 over its rank among them (0 for a candidate none of them has).
--     knn_answer sums over the neighbours; these say how near the nearest one is, which sets apart the
--     answers of a question's closest twin (a sharper signal, measured on held-out draws of train:
--     docs/fusion.md). They come last, after trained_dense, so that a model trained before them keeps
--     its features' places and still ranks (stark_pg/train/fusion_model.py checks it).
--   ent_answer, ent_best: the training questions that name one of the entities this question names
--     (their best name matches, stark.query_link, against `linked`; each weighted by the largest
--     product of the two match weights over the entities they share): how much the candidate is an
--     answer of them (each adds its weight divided by the square root of its number of answers), and
--     the largest weight among those that have it. Questions of one template about entities with the
--     same neighbours share their answers, and MiniLM's nearest questions miss many such twins
--     (docs/fusion.md). Last, for the same reason as knn_best.
--   hop1_sum, hop1_second, hop1_count: over the distinct linked entities one hop from the candidate, the
--     sum of their `linked` weights, the second largest weight (0 with fewer than two) and how many they
--     are. hop1 keeps the best one only; a question that names two entities (a drug's target and its
--     disease) asks for a node next to both, and these say how many of the entities it names the
--     candidate reaches (measured on held-out draws of train: docs/fusion.md). Last, as knn_best.

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

create or replace function stark.link_queries(skb_name text, split_name text, depth int default 20)
returns int
language plpgsql as $$
-- Stores the `depth` best name matches of each question of the split that has none stored for its
-- present text (stark.query_link); how many rows it added. A question whose text changed is linked
-- again; one without any match stays without rows.
declare
    target int := stark.require_skb(skb_name);
    added int;
begin
    delete from stark.query_link l
    using stark.query q
    where l.skb_id = target and q.skb_id = target and q.query_id = l.query_id and q.split = split_name
      and l.body_md5 <> md5(q.body);
    insert into stark.query_link (skb_id, query_id, body_md5, rank, node_id, weight)
    select target, q.query_id, md5(q.body), m.rank, m.node_id, m.score / m.top
    from stark.query q
    cross join lateral (
        select b.node_id, b.score, row_number() over (order by b.score desc, b.node_id)::int as rank,
               max(b.score) over () as top
        from stark.bm25_scores(target, 'name', q.body) b
        order by b.score desc, b.node_id
        limit depth) m
    where q.skb_id = target and q.split = split_name and m.top > 0
      and not exists (select 1 from stark.query_link l where l.skb_id = target and l.query_id = q.query_id);
    get diagnostics added = row_count;
    return added;
end
$$;
comment on function stark.link_queries(text, text, int) is
    'Stores the best name matches of a split''s questions (stark.query_link) for learned fusion''s ent_* features.';

create or replace function stark.entity_twin_answers(skb int, nodes bigint[], weights double precision[],
                                                     link int, question text, splits text[] default '{train}')
returns table (node_id bigint, w double precision, best double precision)
language plpgsql stable as $$
-- ent_answer and ent_best of every node they are not 0 for: the training questions (not of the
-- question's own text) among whose `link` best name matches (stark.query_link) is one of `nodes`, the
-- question's own (with their `weights`); each weighs the largest product of the two weights over the
-- entities they share, and gives its answers that weight over the square root of their number (w,
-- summed) and that weight (best, the largest). PL/pgSQL, not SQL, because its body is checked when it
-- first runs rather than when it is created: the migrations before stark.query_link existed (0036)
-- create this file's functions too.
#variable_conflict use_column
begin
    return query
    with near as (
        select q.answer_ids, max(l.w * ql.weight) as w
        from unnest(nodes, weights) as l(node_id, w)
        join stark.query_link ql on ql.skb_id = skb and ql.node_id = l.node_id and ql.rank <= link
        join stark.query q on q.skb_id = ql.skb_id and q.query_id = ql.query_id and ql.body_md5 = md5(q.body)
        where q.split = any(splits) and q.body <> question
        group by q.query_id, q.answer_ids)
    select a.node_id, sum(n.w / sqrt(cardinality(n.answer_ids))), max(n.w)
    from near n cross join lateral unnest(n.answer_ids) as a(node_id)
    group by a.node_id;
end
$$;
comment on function stark.entity_twin_answers(int, bigint[], double precision[], int, text, text[]) is
    'Learned fusion''s ent_answer and ent_best: answers of the training questions naming the same entities.';

create or replace function stark.fusion_pairs(skb_name text, model text default 'all-MiniLM-L6-v2')
returns table (ord int, field text, scorer text)
language sql stable as $$
    -- stark.mfar_fields read once (it scans the SKB's fields, relations and chunk kinds, which every
    -- fusion search pays for)
    with fields as materialized (select f.field, f.lexical, f.dense, row_number() over () as n
                                 from stark.mfar_fields(skb_name, model) f)
    select (row_number() over (order by p.scorer desc, p.n))::int, p.field, p.scorer
    from (select f.field, 'lexical'::text as scorer, f.n from fields f where f.lexical
          union all
          select f.field, 'dense', f.n from fields f where f.dense) p
$$;
comment on function stark.fusion_pairs(text, text) is
    'Learned fusion: the (field, scorer) pairs whose scores are features, in feature order.';

drop function if exists stark.fusion_feature_names(text, text);
create or replace function stark.fusion_feature_names(skb_name text, model text default 'all-MiniLM-L6-v2',
                                                      trained_dense boolean default false)
returns text[]
language sql stable as $$
    with pairs as materialized (select * from stark.fusion_pairs(skb_name, model))
    select array(select n from (
        select p.ord * 2 as o, p.field || '|' || p.scorer as n from pairs p
        union all
        select p.ord * 2 + 1, p.field || '|' || p.scorer || '|norm' from pairs p
        where p.scorer = 'lexical'
        union all
        select 100000 + x.o, x.n
        from (values (1, 'type_share'), (2, 'knn_answer'), (3, 'linked'), (4, 'hop1'), (5, 'hop2'),
                     (6, case when trained_dense then 'trained_dense' end), (7, 'knn_best'),
                     (8, 'knn_first'), (9, 'ent_answer'), (10, 'ent_best'), (11, 'hop1_sum'),
                     (12, 'hop1_second'), (13, 'hop1_count')) as x(o, n)
        where x.n is not null) f
        order by f.o)
$$;
comment on function stark.fusion_feature_names(text, text, boolean) is
    'Learned fusion: the names of the features stark.fusion_features computes, in order.';

drop function if exists stark.fusion_features(text, text, vector, text, int, int, int, bigint[]);
drop function if exists stark.fusion_features(text, text, vector, text, int, int, int, bigint[], text[], vector[]);
drop function if exists stark.fusion_features(text, text, vector, text, int, int, int, bigint[], text[], vector[],
                                              text[], text[]);
drop function if exists stark.fusion_features(text, text, vector, text, int, int, int, bigint[], text[], vector[],
                                              text[], text[], text[]);
create or replace function stark.fusion_features(
    skb_name text, query text, qvec vector, model text default 'all-MiniLM-L6-v2',
    pool int default 100, knn int default 10, link int default 5, include bigint[] default null,
    dense_models text[] default null, dense_qvecs vector[] default null,
    pair_fields text[] default null, pair_scorers text[] default null, pool_splits text[] default '{train}',
    engine text default 'auto')
returns table (node_id bigint, f double precision[])
language sql stable as $$
    with skb as (select stark.require_skb(skb_name) as id),
    -- the SKB's pairs (stark.fusion_pairs), or the ones given: a stored model's, which search passes
    -- (stark.fusion_pairs scans the SKB's chunks and edges, a cost that grows with the SKB; the model
    -- was checked against it when it was read)
    pairs as materialized (
        select * from stark.fusion_pairs(skb_name, model) where pair_fields is null
        union all
        select p.ord::int, p.field, p.scorer
        from unnest(pair_fields, pair_scorers) with ordinality as p(field, scorer, ord)
        where pair_fields is not null),
    scores as materialized (
        select s.* from stark.mfar_field_scores(
            skb_name, query, qvec, model,
            array(select p.field from pairs p where p.scorer = 'lexical'),
            array(select p.field from pairs p where p.scorer = 'dense'), pool, include,
            engine => fusion_features.engine) s),
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
        from stark.answer_type_votes(skb_name, qvec, pool_splits, knn, model, query) v),
    near as materialized (
        select q.answer_ids, 1 - (v.vec <=> qvec) as sim,
               row_number() over (order by v.vec <=> qvec, q.query_id) as rank
        from stark.query q
        join stark.query_vector v on v.skb_id = q.skb_id and v.query_id = q.query_id and v.model = fusion_features.model
                                   and v.body_md5 = md5(q.body)
        where q.skb_id = (select id from skb) and q.split = any(pool_splits) and q.body <> query
        order by v.vec <=> qvec, q.query_id
        limit knn),
    knn_answers as materialized (
        select a.node_id, sum(n.sim / sqrt(cardinality(n.answer_ids))) as w, max(n.sim) as best,
               min(n.rank) as first
        from near n cross join lateral unnest(n.answer_ids) as a(node_id)
        group by a.node_id),
    linked as materialized (
        select l.node_id, l.score / max(l.score) over () as w
        from stark.bm25_top((select id from skb), 'name', query, link, engine => fusion_features.engine) l),
    ent_answers as materialized (
        select e.node_id, e.w, e.best
        from stark.entity_twin_answers((select id from skb), array(select l.node_id from linked l order by l.node_id),
                                       array(select l.w from linked l order by l.node_id), link, query,
                                       pool_splits) e),
    -- each (candidate, linked entity) pair once, whatever the number of edges between them
    hop1 as materialized (
        select p.node_id, max(p.w) as w, sum(p.w) as total, (array_agg(p.w order by p.w desc))[2] as second,
               count(*) as n
        from (select distinct e.dst as node_id, l.node_id as entity, l.w
              from linked l join stark.edge e on e.skb_id = (select id from skb) and e.src = l.node_id) p
        group by p.node_id),
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
           || array[coalesce(ka.best, 0), coalesce(1.0 / ka.first, 0), coalesce(ea.w, 0),
                    coalesce(ea.best, 0), coalesce(h1.total, 0), coalesce(h1.second, 0),
                    coalesce(h1.n, 0)]::double precision[]
    from per_node pn
    join stark.node n on n.skb_id = (select id from skb) and n.node_id = pn.node_id
    left join votes vt on vt.node_type = n.type
    left join knn_answers ka on ka.node_id = pn.node_id
    left join linked li on li.node_id = pn.node_id
    left join hop1 h1 on h1.node_id = pn.node_id
    left join hop2 h2 on h2.node_id = pn.node_id
    left join trained td on td.node_id = pn.node_id
    left join ent_answers ea on ea.node_id = pn.node_id
$$;
comment on function stark.fusion_features(text, text, vector, text, int, int, int, bigint[], text[], vector[], text[], text[], text[], text) is
    'Learned fusion: the feature vector of every candidate of a query (names: stark.fusion_feature_names).';
