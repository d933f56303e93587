-- Named statements of `stark-pg serve` (stark_pg/serve/): what its pages and JSON API read. Every one
-- is a read (the server's connections are read-only) and returns each row as one jsonb object, so that
-- the pages and the JSON replies name their fields the same way.

-- name: serve_skbs()
-- Every loaded SKB with its size and how many evaluation runs it has.
select to_jsonb(r) from (
    select s.name, s.format, s.source, s.loaded_at,
           (select count(*) from stark.node n where n.skb_id = s.skb_id) as nodes,
           (select count(*) from stark.edge e where e.skb_id = s.skb_id) as edges,
           (select coalesce(jsonb_object_agg(split, n), '{}'::jsonb)
              from (select split, count(*) as n from stark.query q where q.skb_id = s.skb_id group by split) x)
             as queries,
           (select count(*) from stark.eval_run r where r.skb_id = s.skb_id) as runs
    from stark.skb s order by s.name
) r;

-- name: serve_node(skb_id, node_id)$
-- One node: id, type, name, attributes and its text fields ({field: body}); null when there is no such node.
select to_jsonb(r) from (
    select n.node_id, n.type, n.name, n.attrs,
           (select coalesce(jsonb_object_agg(f.field, f.body order by f.field), '{}'::jsonb)
              from stark.node_field f where f.skb_id = n.skb_id and f.node_id = n.node_id) as fields
    from stark.node n where n.skb_id = :skb_id and n.node_id = :node_id
) r;

-- name: serve_neighbours(skb_id, node_id, per_relation)
-- A node's neighbours by direction and relation: the first `per_relation` of each group (by type, name,
-- id) with the group's size, so that a hub with thousands of edges stays one page.
select to_jsonb(r) from (
    select direction, relation, total, node_id, type, name from (
        select g.direction, g.relation, g.other as node_id, n.type, n.name,
               count(*) over w as total,
               row_number() over (w order by n.type, n.name, g.other) as position
        from (select 'out' as direction, e.relation, e.dst as other from stark.edge e
                where e.skb_id = :skb_id and e.src = :node_id
              union all
              select 'in', e.relation, e.src from stark.edge e
                where e.skb_id = :skb_id and e.dst = :node_id) g
        join stark.node n on n.skb_id = :skb_id and n.node_id = g.other
        window w as (partition by g.direction, g.relation)
    ) ranked
    where position <= :per_relation
    order by direction desc, relation, position
) r;

-- name: serve_runs(skb)
-- Stored evaluation runs (of one SKB, or of all when skb is null), newest first, with their settings,
-- query count and summary (mean metrics, latency).
select to_jsonb(r) from (
    select r.run_id, s.name as skb, r.method, r.options, r.query_set, r.depth, r.stored_k,
           r.started_at, r.finished_at, r.finished_at is not null as finished,
           (select count(*) from stark.eval_result e where e.skb_id = r.skb_id and e.run_id = r.run_id) as queries,
           r.summary
    from stark.eval_run r join stark.skb s on s.skb_id = r.skb_id
    where cast(:skb as text) is null or s.name = :skb
    order by r.run_id desc
) r;

-- name: serve_run(run_id)$
-- One run as serve_runs lists it, with its SKB's id; null when there is no such run.
select to_jsonb(r) from (
    select r.run_id, r.skb_id, s.name as skb, r.method, r.options, r.query_set, r.depth, r.stored_k,
           r.started_at, r.finished_at, r.finished_at is not null as finished,
           (select count(*) from stark.eval_result e where e.skb_id = r.skb_id and e.run_id = r.run_id) as queries,
           r.summary
    from stark.eval_run r join stark.skb s on s.skb_id = r.skb_id
    where r.run_id = :run_id
) r;

-- name: serve_run_diff(skb_id, run_a, run_b)
-- Per query of two runs of one SKB: the rank of its first (best-ranked) answer in each (null: no answer
-- within the run's depth), both runs' metrics, the question and its answer count. Queries one run has and
-- the other lacks are listed with a null rank on the missing side and `in_a` / `in_b` false.
select to_jsonb(r) from (
    select coalesce(a.query_id, b.query_id) as query_id, q.body as query,
           cardinality(coalesce(a.answer_ids, b.answer_ids)) as answers,
           a.query_id is not null as in_a, b.query_id is not null as in_b,
           (select min(x) from unnest(a.answer_ranks) x where x > 0) as rank_a,
           (select min(x) from unnest(b.answer_ranks) x where x > 0) as rank_b,
           a.metrics as metrics_a, b.metrics as metrics_b,
           a.error as error_a, b.error as error_b
    from (select * from stark.eval_result where skb_id = :skb_id and run_id = :run_a) a
    full join (select * from stark.eval_result where skb_id = :skb_id and run_id = :run_b) b
      on b.query_id = a.query_id
    left join stark.query q on q.skb_id = :skb_id and q.query_id = coalesce(a.query_id, b.query_id)
    order by 1
) r;

-- name: serve_run_query(skb_id, run_id, query_id, top)$
-- One query of a run: its top `top` ranked nodes (id, type, name, score, whether an answer), its
-- answers with their ranks (0: not within depth), metrics, latency, trace and error; null when the run
-- has no such query.
select to_jsonb(r) from (
    select e.query_id, q.body as query, e.answer_ids, e.answer_ranks, e.metrics, e.latency_ms, e.trace, e.error,
           (select min(x) from unnest(e.answer_ranks) x where x > 0) as first_answer_rank,
           (select coalesce(jsonb_agg(jsonb_build_object(
                       'rank', t.rank, 'node_id', t.node_id, 'type', n.type, 'name', n.name, 'score', e.scores[t.rank],
                       'answer', t.node_id = any(e.answer_ids)) order by t.rank), '[]'::jsonb)
              from unnest(e.ranked_ids[1:(:top)]) with ordinality t(node_id, rank)
              left join stark.node n on n.skb_id = e.skb_id and n.node_id = t.node_id) as ranking,
           (select coalesce(jsonb_agg(jsonb_build_object(
                       'node_id', a.node_id, 'type', n.type, 'name', n.name, 'rank', nullif(e.answer_ranks[a.i], 0))
                       order by nullif(e.answer_ranks[a.i], 0) nulls last, a.node_id), '[]'::jsonb)
              from unnest(e.answer_ids) with ordinality a(node_id, i)
              left join stark.node n on n.skb_id = e.skb_id and n.node_id = a.node_id) as answer_nodes
    from stark.eval_result e
    left join stark.query q on q.skb_id = e.skb_id and q.query_id = e.query_id
    where e.skb_id = :skb_id and e.run_id = :run_id and e.query_id = :query_id
) r;

-- name: served_embedding_models()
-- The embedding models POST /v1/embeddings answers for (stark_pg/serve/embeddings.py): those the database
-- has vectors of (but imported ones: no local model computes them; their query model instead), and the
-- query encoders of its stored mFAR and fusion models.
select m.name from stark.embedding_model m
where not exists (select 1 from stark.embedding_build b where b.model_id = m.model_id and b.settings ? 'imported')
union
select b.settings -> 'imported' ->> 'query_model' from stark.embedding_build b where b.settings ? 'imported'
union
select coalesce(f.settings ->> 'query_encoder', f.embed_model) from stark.mfar_model f
union
select f.embed_model from stark.fusion_model f;

-- name: model_encoders()
-- Per embedding model, the encoder (backend, quantize) its most recent build recorded (NULL: torch).
select distinct on (m.name) m.name, b.settings -> 'encoder'
from stark.embedding_build b join stark.embedding_model m on m.model_id = b.model_id
order by m.name, b.built_at desc;
