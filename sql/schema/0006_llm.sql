-- LLM layer: every request sent to an LLM and its response, so a rerun replays without calls.
-- Keyed by provider, model and the sha256 of the canonical request JSON (messages, max_tokens,
-- temperature, ...), since migration 0013 together with the endpoint that answered
-- (stark_pg/llm/settings.endpoint_identity). Not namespaced by SKB: the same prompt gives the same answer whatever
-- asked it, and dropping an SKB leaves the cache (it is cheap to keep and costly to rebuild).

create table stark.llm_cache (
    provider          text not null,
    model             text not null,
    request_hash      text not null,
    request           jsonb not null,
    response          jsonb not null,           -- {"text": ..., "finish_reason": ..., "raw": the provider's reply}
    prompt_tokens     integer,
    completion_tokens integer,
    cost_usd          double precision,         -- null where the model's price is unknown
    seconds           double precision,         -- wall time of the call that filled the row (retries included)
    created_at        timestamptz not null default now(),
    primary key (provider, model, request_hash)
);

comment on table stark.llm_cache is
    'Every LLM request and its response, keyed by (provider, model, sha256 of the canonical request JSON).';
