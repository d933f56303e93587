-- Trained retrievers other than mFAR and fusion (which keep their own tables): STaRK's supervised
-- baselines, the fine-tuned dense retriever (`stark-pg train dense`) and QA-GNN (`stark-pg train qagnn`).
-- The weights are files under STARK_PG_HOME/models/<kind>/ (torch and sentence-transformers save
-- directories, not rows); this table says what was trained, on which SKB, how, and how it went,
-- so that a model can be listed, explained and compared from SQL.

create table stark.trained_model (
    skb_id      int    not null,
    kind        text   not null check (kind in ('dense', 'qagnn')),
    name        text   not null,
    base_model  text   not null,             -- the embedding model it starts from or reads vectors of
    path        text   not null,             -- the directory holding its files
    settings    jsonb  not null,             -- epochs, learning rate, negatives, holdout, seed, ...
    history     jsonb  not null,             -- one object per epoch: loss, held-out metrics, seconds
    metrics     jsonb  not null,             -- the kept epoch's held-out metrics, training seconds
    trained_at  timestamptz not null default now(),
    primary key (skb_id, kind, name)
);
comment on table stark.trained_model is
    'Trained retrievers (stark-pg train dense | qagnn): settings, per-epoch history and held-out metrics; weights under STARK_PG_HOME/models/.';
