-- Settings `stark-pg tune` chose for a method of an SKB on its train split: the method's defaults there
-- (stark_pg/retrieve/hybrid.py for hybrid; stark.search_ranking in SQL). A search or evaluation that sets
-- none of the tuned keys takes them; one that sets any takes the built-in defaults for the rest. Only a
-- tuning over the train split is stored, so val and test never shape a default they are reported with.
create table stark.tuned_setting (
    skb_id      int    not null,
    method      text   not null,
    options     jsonb  not null,                   -- the chosen settings, {"fusion": "weighted", "weight": 0.6}
    query_set   text   not null,                   -- where they were chosen (split:train, split:train[:200])
    queries     int    not null,
    metric      text   not null,                   -- the metric the choice maximised, and its value there
    value       double precision not null,
    run_id      int,                               -- the evaluation run of the chosen point (stark.eval_run)
    grid        jsonb  not null,                   -- every point tried: [{"settings": {...}, "value": v, "run_id": n}]
    chosen_at   timestamptz not null default now(),
    primary key (skb_id, method)
);
comment on table stark.tuned_setting is
    'A method''s defaults for one SKB, chosen on its train split by `stark-pg tune` (hybrid''s fusion settings).';
