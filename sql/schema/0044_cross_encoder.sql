-- A third kind of trained retriever in stark.trained_model: the cross-encoder `stark-pg train
-- cross-encoder` fine-tunes from a sentence-transformers model on (question, candidate document) pairs,
-- which `-m fusion-ce` adds to fusion's score over fusion's top N (stark_pg/retrieve/fusion_ce.py).
alter table stark.trained_model drop constraint if exists trained_model_kind_check;
alter table stark.trained_model add constraint trained_model_kind_check
    check (kind in ('dense', 'qagnn', 'cross-encoder'));
comment on table stark.trained_model is
    'Trained retrievers (stark-pg train dense | qagnn | cross-encoder): settings, per-epoch history and held-out metrics; weights under STARK_PG_HOME/models/.';
