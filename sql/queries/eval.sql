-- Named statements of the evaluation harness.

-- name: split_queries(skb_id, split)
-- Queries of one split ('all' for every split), in a stable order.
select query_id, body, answer_ids from stark.query
where skb_id = :skb_id and (:split = 'all' or split = :split)
order by query_id;

-- name: count_nodes(skb_id)$
select count(*) from stark.node where skb_id = :skb_id;

-- name: unfinished_runs(skb_id, config_hash)
-- Runs of this configuration a new evaluation may continue, newest first. A run interrupted before the
-- SKB was last (re)loaded stays unfinished history: its results were computed on other data, so a new
-- run starts instead of resuming it.
select r.run_id from stark.eval_run r join stark.skb s on s.skb_id = r.skb_id
where r.skb_id = :skb_id and r.config_hash = :config_hash and r.finished_at is null
  and r.started_at >= s.loaded_at
order by r.run_id desc;

-- name: try_claim_run(run_id)$
-- The run's lock until released or the session ends, if no other evaluation holds it: true when taken.
-- Two identical evaluations at once would otherwise continue the same run and store the same query twice.
select pg_try_advisory_lock(hashtext('stark-pg eval run'), :run_id);

-- name: release_run(run_id)$
select pg_advisory_unlock(hashtext('stark-pg eval run'), :run_id);

-- name: create_run(skb_id, method, options, query_set, depth, stored_k, config_hash)$
insert into stark.eval_run (skb_id, method, options, query_set, depth, stored_k, config_hash)
values (:skb_id, :method, cast(:options as jsonb), :query_set, :depth, :stored_k, :config_hash)
returning run_id;

-- name: done_query_ids(skb_id, run_id)
select query_id from stark.eval_result where skb_id = :skb_id and run_id = :run_id;

-- name: insert_result(skb_id, run_id, query_id, ranked_ids, scores, answer_ids, answer_ranks, metrics, latency_ms, trace, error)!
insert into stark.eval_result (skb_id, run_id, query_id, ranked_ids, scores, answer_ids, answer_ranks, metrics,
                               latency_ms, trace, error)
values (:skb_id, :run_id, :query_id, :ranked_ids, :scores, :answer_ids, :answer_ranks, cast(:metrics as jsonb),
        :latency_ms, cast(:trace as jsonb), :error);

-- name: run_results(skb_id, run_id)
select query_id, ranked_ids, scores, answer_ids, answer_ranks, metrics, latency_ms, error
from stark.eval_result where skb_id = :skb_id and run_id = :run_id order by query_id;

-- name: finish_run(run_id, summary)!
update stark.eval_run set finished_at = now(), summary = cast(:summary as jsonb) where run_id = :run_id;

-- name: run_info(run_id)^
-- One evaluation run and its SKB's name, for `stark-pg compare` (None: no such run).
select r.run_id, r.skb_id, s.name as skb, r.method, r.query_set, r.options, r.finished_at is not null as finished
from stark.eval_run r join stark.skb s on s.skb_id = r.skb_id
where r.run_id = :run_id;

-- name: run_query_metrics(skb_id, run_id)
-- Each query's answers and stored metric values: what significance tests pair up across runs.
select query_id, answer_ids, metrics from stark.eval_result
where skb_id = :skb_id and run_id = :run_id order by query_id;

-- name: run_query_details(skb_id, run_id, top)
-- Each query's top ranked nodes, answer ranks, metrics, latency, trace and error: the HTML report's per-query view.
select query_id, ranked_ids[1:(:top)] as top_ids, answer_ids, answer_ranks, metrics, latency_ms, trace, error
from stark.eval_result where skb_id = :skb_id and run_id = :run_id order by query_id;
