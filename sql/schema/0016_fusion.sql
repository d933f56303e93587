-- Learned fusion: trained rankers over the features of stark.fusion_features (sql/functions/fusion.sql).
-- The model is kept twice: as LightGBM's own text (to reload it, explain a ranking, or check that the
-- SQL agrees with it) and compiled to one SQL expression over the feature array `f` that the method
-- `fusion` evaluates inside PostgreSQL.

create table stark.fusion_model (
    skb_id        int    not null,
    name          text   not null,
    embed_model   text   not null,             -- the query and document embeddings the features use
    features      text[] not null,             -- names, in the order of stark.fusion_features' array
    booster       text   not null,             -- LightGBM's model text (Booster.model_to_string)
    score_sql     text   not null,             -- the same model as an SQL expression over f[1..n]
    settings      jsonb  not null,             -- rounds, leaves, learning rate, pool, knn, link, seed, ...
    metrics       jsonb  not null,             -- cross-validation on train: per candidate rounds, Hit@1 and MRR
    importance    jsonb  not null,             -- total gain per feature
    trained_at    timestamptz not null default now(),
    primary key (skb_id, name)
);
comment on table stark.fusion_model is
    'Learned fusion models (stark-pg train fusion): LightGBM lambdarank over stark.fusion_features, compiled to SQL.';
