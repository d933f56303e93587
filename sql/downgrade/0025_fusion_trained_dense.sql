-- Migration 0025's downgrade (migrations/versions/0025_fusion_trained_dense.py), run by it as one script:
-- The new signatures and stark.mean_cosine go, and 0024's functions come back.
-- What it restores:
--   sql/functions/fusion.sql as of migration 0024, verbatim

drop function if exists
    stark.fusion_features(text, text, vector, text, int, int, int, bigint[], text[], vector[]),
    stark.fusion_feature_names(text, text, boolean),
    stark.mean_cosine(text, bigint[], text[], vector[]);

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
--   hop1, hop2: the largest `linked` weight among the linked entities one (two) hops away.

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

create or replace function stark.fusion_feature_names(skb_name text, model text default 'all-MiniLM-L6-v2')
returns text[]
language sql stable as $$
    select array(select n from (
        select p.ord * 2 as o, p.field || '|' || p.scorer as n from stark.fusion_pairs(skb_name, model) p
        union all
        select p.ord * 2 + 1, p.field || '|' || p.scorer || '|norm' from stark.fusion_pairs(skb_name, model) p
        where p.scorer = 'lexical'
        union all
        select 100000 + x.o, x.n
        from (values (1, 'type_share'), (2, 'knn_answer'), (3, 'linked'), (4, 'hop1'), (5, 'hop2')) as x(o, n)) f
        order by f.o)
$$;
comment on function stark.fusion_feature_names(text, text) is
    'Learned fusion: the names of the features stark.fusion_features computes, in order.';

create or replace function stark.fusion_features(
    skb_name text, query text, qvec vector, model text default 'all-MiniLM-L6-v2',
    pool int default 100, knn int default 10, link int default 5, include bigint[] default null)
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
    cand as (select distinct s.node_id from scores s),
    votes as (select v.node_type, v.share
              from stark.answer_type_votes(skb_name, qvec, 'train', knn, model, query) v),
    near as (
        select q.answer_ids, 1 - (v.vec <=> qvec) as sim
        from stark.query q
        join stark.query_vector v on v.skb_id = q.skb_id and v.query_id = q.query_id and v.model = fusion_features.model
                                   and v.body_md5 = md5(q.body)
        where q.skb_id = (select id from skb) and q.split = 'train' and q.body <> query
        order by v.vec <=> qvec, q.query_id
        limit knn),
    knn_answers as (
        select a.node_id, sum(n.sim / sqrt(cardinality(n.answer_ids))) as w
        from near n cross join lateral unnest(n.answer_ids) as a(node_id)
        group by a.node_id),
    linked as (
        select l.node_id, l.score / max(l.score) over () as w
        from (select b.node_id, b.score from stark.bm25_scores((select id from skb), 'name', query) b
              order by b.score desc, b.node_id limit link) l),
    hop1 as (
        select e.dst as node_id, max(l.w) as w
        from linked l join stark.edge e on e.skb_id = (select id from skb) and e.src = l.node_id
        group by e.dst),
    hop2 as (
        select e2.dst as node_id, max(h.w) as w
        from hop1 h join stark.edge e2 on e2.skb_id = (select id from skb) and e2.src = h.node_id
        group by e2.dst),
    pair_features as (
        select c.node_id,
               array_agg(coalesce(s.score, 0) order by p.ord) as raw,
               array_agg(case when s.score is null or b.top is null or b.top <= 0 then 0 else s.score / b.top end
                         order by p.ord) filter (where p.scorer = 'lexical') as normed
        from cand c cross join pairs p
        left join scores s on s.node_id = c.node_id and s.field = p.field and s.scorer = p.scorer
        left join best b on b.field = p.field and b.scorer = p.scorer
        group by c.node_id)
    select pf.node_id,
           array(select x.v from (
                     select r.i * 2 as o, r.v from unnest(pf.raw) with ordinality as r(v, i)
                     union all
                     select r.i * 2 + 1, r.v from unnest(pf.normed) with ordinality as r(v, i)) x
                 order by x.o)
           || array[coalesce((select v.share from votes v where v.node_type = n.type), 0),
                    coalesce((select k.w from knn_answers k where k.node_id = pf.node_id), 0),
                    coalesce((select l.w from linked l where l.node_id = pf.node_id), 0),
                    coalesce((select h.w from hop1 h where h.node_id = pf.node_id), 0),
                    coalesce((select h.w from hop2 h where h.node_id = pf.node_id), 0)]::double precision[]
    from pair_features pf
    join stark.node n on n.skb_id = (select id from skb) and n.node_id = pf.node_id
$$;
comment on function stark.fusion_features(text, text, vector, text, int, int, int, bigint[]) is
    'Learned fusion: the feature vector of every candidate of a query (names: stark.fusion_feature_names).';
