-- Evaluation runs and their per-query results, so analysts can compare methods in SQL
-- (e.g. which queries one method gets right and another misses).

create table stark.eval_run (
    run_id        serial primary key,
    skb_id        int    not null,
    method        text   not null,
    options       jsonb  not null default '{}'::jsonb,  -- the method's settings
    query_set     text   not null,                      -- 'split:val', 'split:all', or 'file:/path/queries.csv'
    depth         int    not null,                      -- ranking depth asked of the method (answer ranks within it)
    stored_k      int    not null,                      -- ranked ids kept per query
    config_hash   text   not null,                      -- identifies runs that can be resumed by one another
    started_at    timestamptz not null default now(),
    finished_at   timestamptz,
    summary       jsonb                                  -- mean metrics, query count, latency p50/p95
);
create index eval_run_config_idx on stark.eval_run (skb_id, config_hash);
comment on table stark.eval_run is 'One evaluation of one method on one query set of an SKB.';

create table stark.eval_result (
    skb_id        int    not null,
    run_id        int    not null,
    query_id      bigint not null,
    ranked_ids    bigint[] not null,                    -- top stored_k, best first
    scores        double precision[] not null,
    answer_ids    bigint[] not null,
    answer_ranks  int[] not null,                       -- 1-based rank of each answer within depth, 0 if not ranked
    metrics       jsonb  not null,
    latency_ms    double precision not null,
    trace         jsonb  not null default '{}'::jsonb,   -- SQL used, candidate counts, LLM calls, ...
    error         text,                                  -- why the query failed, if it did
    primary key (skb_id, run_id, query_id)
);
comment on table stark.eval_result is 'Per query of an evaluation run: ranking, answer ranks, metrics, latency, trace.';

create view stark.eval_summary as
select r.run_id, s.name as skb, r.method, r.query_set, r.options, r.started_at, r.finished_at,
       (select count(*) from stark.eval_result e where e.skb_id = r.skb_id and e.run_id = r.run_id) as queries,
       r.summary
from stark.eval_run r join stark.skb s on s.skb_id = r.skb_id;
comment on view stark.eval_summary is 'Evaluation runs with their SKB name, query count and mean metrics.';
