-- The agent retriever's training history: every program the LLM wrote, how it did, which one each
-- query category keeps. Read by analysts (`select ... from stark.agent_program`), never by the agent
-- role (it has no access to schema stark at all).

create table stark.agent_run (
    run_id       serial primary key,
    skb_id       int not null,
    started_at   timestamptz not null default now(),
    finished_at  timestamptz,                       -- null while running (or if it was interrupted)
    settings     jsonb not null,                    -- iterations, batch, holdout, llm, categories, ...
    categories   jsonb not null default '{}',       -- category -> {"train": n, "holdout": n, "type": ...}
    llm          jsonb,                             -- calls, cache hits, tokens, LLM seconds of the whole run
    seconds      double precision                   -- wall time of the run
);
create index agent_run_skb_idx on stark.agent_run (skb_id, run_id);
comment on table stark.agent_run is 'One row per `stark-pg train agent` run: settings, categories, LLM cost.';

create table stark.agent_program (
    program_id       bigserial primary key,
    run_id           int not null references stark.agent_run on delete cascade,
    category         text not null,
    iteration        int not null,                  -- 0: the seed program; 1..n: written by the LLM
    author           text not null,                 -- seed | llm
    sql              text not null,                 -- as written (with :slot placeholders)
    status           text not null check (status in ('ok', 'rejected', 'failed')),
    error            text,                          -- why it was rejected or failed
    batch_metrics    jsonb,                         -- on the category's training batch
    holdout_metrics  jsonb,                         -- on the category's held-out training queries
    chosen           boolean not null default false, -- the program the category keeps for test time
    feedback         text,                          -- what the LLM was told about this program
    created_at       timestamptz not null default now()
);
create index agent_program_run_idx on stark.agent_program (run_id, category, iteration);
comment on table stark.agent_program is
    'Every retrieval program the agent wrote, per category and iteration, with its scores; `chosen` marks the kept ones.';

-- The role agent programs run as. It logs in (a session whose own user is this role cannot SET ROLE
-- to anyone else, which a superuser session switched with SET ROLE could), can read only the views
-- and call only the functions of schema `agent`, and every transaction it opens is read-only.
do $$
begin
    if not exists (select 1 from pg_roles where rolname = 'stark_agent') then
        create role stark_agent login nosuperuser nocreatedb nocreaterole noinherit noreplication nobypassrls
            connection limit 16;
    end if;
end
$$;
alter role stark_agent set default_transaction_read_only = on;
alter role stark_agent set statement_timeout = '10s';
