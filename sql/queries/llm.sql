-- Named statements of the LLM layer (stark_pg/llm/cache.py) and of the evaluation's LLM totals.

-- name: llm_cache_get(provider, model, request_hash)^
select response, prompt_tokens, completion_tokens, cost_usd, seconds
from stark.llm_cache
where provider = :provider and model = :model and request_hash = :request_hash;

-- name: llm_cache_put(provider, model, request_hash, request, response, prompt_tokens, completion_tokens, cost_usd, seconds)!
-- Upsert: `refresh` overwrites, and two processes racing on one request leave the later answer.
insert into stark.llm_cache (provider, model, request_hash, request, response, prompt_tokens, completion_tokens,
                             cost_usd, seconds)
values (:provider, :model, :request_hash, cast(:request as jsonb), cast(:response as jsonb), :prompt_tokens,
        :completion_tokens, :cost_usd, :seconds)
on conflict (provider, model, request_hash) do update
set request = excluded.request, response = excluded.response, prompt_tokens = excluded.prompt_tokens,
    completion_tokens = excluded.completion_tokens, cost_usd = excluded.cost_usd, seconds = excluded.seconds,
    created_at = now();

-- name: llm_cache_count(provider, model)$
select count(*) from stark.llm_cache where provider = :provider and model = :model;

-- name: run_llm_usage(skb_id, run_id)^
-- LLM totals of an evaluation run, from the `llm` entry (a meter's as_dict()) of each query's trace.
-- Queries without one (no LLM step, or a failed query whose trace was lost) count in `queries` only.
select count(*)                                                                   as queries,
       count(*) filter (where trace ? 'llm')                                      as queries_with_llm,
       coalesce(sum((trace -> 'llm' ->> 'calls')::bigint), 0)::bigint             as calls,
       coalesce(sum((trace -> 'llm' ->> 'cache_hits')::bigint), 0)::bigint        as cache_hits,
       coalesce(sum((trace -> 'llm' ->> 'prompt_tokens')::bigint), 0)::bigint     as prompt_tokens,
       coalesce(sum((trace -> 'llm' ->> 'completion_tokens')::bigint), 0)::bigint as completion_tokens,
       coalesce(sum((trace -> 'llm' ->> 'seconds')::float8), 0)                   as seconds,
       sum((trace -> 'llm' ->> 'cost_usd')::float8)                               as cost_usd
from stark.eval_result
where skb_id = :skb_id and run_id = :run_id;

-- name: rerank_documents(skb, node_ids, with_relations)
-- The documents an LLM reranker reads, one per candidate node (in no particular order).
select n.node_id, stark.render_document(n.skb_id, n.node_id, :with_relations)
from stark.node n
where n.skb_id = stark.skb_id(:skb) and n.node_id = any(:node_ids);

-- name: llm_cache_get_many(provider, model, request_hashes)
-- Several cached responses at once (the embedding provider looks up a batch of texts in one query).
select request_hash, response, prompt_tokens, cost_usd
from stark.llm_cache
where provider = :provider and model = :model and request_hash = any(:request_hashes);

-- name: llm_cache_stats()
-- What the cache holds per provider and model: rows, the LLM time, tokens and cost they stand for, their age.
select provider, model, count(*) as rows, sum(seconds) as seconds, sum(prompt_tokens) as prompt_tokens,
       sum(completion_tokens) as completion_tokens, sum(cost_usd) as cost_usd, min(created_at) as oldest,
       max(created_at) as newest
from stark.llm_cache
group by provider, model
order by provider, model;

-- name: llm_cache_export(provider, model, since)
-- The lines of a cache file (stark_pg/llm/cache_io.py), rendered by PostgreSQL: request and response as
-- stored, created_at in UTC. Read through a server-side cursor; in key order, so that one cache gives one file.
select row_to_json(r)::text
from (select provider, model, request_hash, request, response, prompt_tokens, completion_tokens, cost_usd, seconds,
             to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as created_at
      from stark.llm_cache
      where (cast(:provider as text) is null or provider = :provider)
        and (cast(:model as text) is null or model = :model)
        and (cast(:since as timestamptz) is null or created_at >= :since)
      order by provider, model, request_hash) r;

-- name: llm_cache_import(rows, replace)^
-- Lines of a cache file (a JSON array of their objects, as written: numbers keep every digit) into the cache.
-- A key already here keeps its row, or with `replace` takes the file's. Counts: inserted, replaced.
with written as (
    insert into stark.llm_cache as c (provider, model, request_hash, request, response, prompt_tokens,
                                      completion_tokens, cost_usd, seconds, created_at)
    select r.provider, r.model, r.request_hash, r.request, r.response, r.prompt_tokens, r.completion_tokens,
           r.cost_usd, r.seconds, coalesce(r.created_at, now())
    from jsonb_to_recordset(cast(:rows as jsonb))
         as r(provider text, model text, request_hash text, request jsonb, response jsonb, prompt_tokens integer,
              completion_tokens integer, cost_usd double precision, seconds double precision, created_at timestamptz)
    on conflict (provider, model, request_hash) do update
    set request = excluded.request, response = excluded.response, prompt_tokens = excluded.prompt_tokens,
        completion_tokens = excluded.completion_tokens, cost_usd = excluded.cost_usd, seconds = excluded.seconds,
        created_at = excluded.created_at
    where cast(:replace as boolean)
    returning c.xmax = 0 as inserted
)
select count(*) filter (where inserted), count(*) filter (where not inserted)
from written;
