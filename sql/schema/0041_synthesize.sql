-- Questions made by `stark-pg synthesize` (stark_pg/synthesize/): each is a row of stark.query (its
-- split, `synthetic` by default) and, here, how it was made: the relation template and its anchors,
-- the answers the template admits and those kept, and, for questions with textual requirements, the
-- gold answer they were read from, the requirements, every candidate's verdicts, the model and prompt
-- version, the calls and seconds spent.
create table stark.synth_run (
    skb_id      int    not null,
    split       text   not null,
    settings    jsonb  not null,                   -- templates, seed, bounds, mode: what the plan depends on
    created_at  timestamptz not null default now(),
    primary key (skb_id, split)
);
comment on table stark.synth_run is 'A synthesized split: the settings its questions were planned with (a re-run continues it).';

create table stark.synth_question (
    skb_id        int      not null,
    split         text     not null,
    seq           int      not null,               -- the question's place in the plan
    query_id      bigint,                          -- its row of stark.query (NULL: not kept, see outcome)
    template      text     not null,
    hops          int      not null,               -- the template's longest path: 1 one-hop, more multi-hop
    anchors       bigint[] not null,
    anchor_names  text[]   not null,
    candidates    bigint[] not null,               -- every node the template admits for these anchors
    answers       bigint[] not null,               -- the ground truth kept
    mode          text     not null,               -- relational (no LLM) or llm
    outcome       text     not null default 'kept', -- kept, or why the LLM steps dropped it
    gold          bigint,                          -- llm: the candidate the requirements were read from
    requirements  jsonb,
    verdicts      jsonb,                           -- llm: per candidate, each verifier's answer
    model         text,
    prompt_version text,
    calls         int      not null default 0,     -- LLM requests asked (cache hits included)
    seconds       double precision not null default 0,
    created_at    timestamptz not null default now(),
    primary key (skb_id, split, seq)
);
comment on table stark.synth_question is 'How each synthesized question was made: template, anchors, candidates, answers kept, LLM provenance.';
