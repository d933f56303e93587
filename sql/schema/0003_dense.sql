-- Dense retrieval: the registry of embedding models and what has been embedded with them.
--
-- Vectors live in one pair of tables per model, because a pgvector column has one fixed dimension:
--   stark.emb_doc_<model_id>    one vector per node (its whole rendered document)       -> stark.vss
--   stark.emb_chunk_<model_id>  several vectors per node (field pieces, name, relations) -> stark.multivss
-- They are created on demand by `stark-pg index` (sql/templates/dense.sql) when a model is first
-- used, so a database holds tables only for the models someone embedded with. Each SKB gets its own
-- partial HNSW index on them (`... where skb_id = <id>`, named `<table>_hnsw__skb<id>`): searching one
-- SKB never wades through another's vectors, and `stark.delete_skb_rows` drops the index with the SKB.

create table stark.embedding_model (
    model_id     serial primary key,
    name         text not null unique,     -- sentence-transformers name or path, e.g. all-MiniLM-L6-v2
    dim          int  not null check (dim > 0),
    doc_table    text not null unique,     -- table in schema stark: one vector per node
    chunk_table  text not null unique,     -- table in schema stark: several vectors per node
    created_at   timestamptz not null default now()
);
comment on table stark.embedding_model is
    'Embedding models used in this database, with the dimension and the tables holding their vectors.';

create table stark.embedding_build (
    skb_id      int not null,
    model_id    int not null references stark.embedding_model (model_id),
    settings    jsonb not null,            -- with_relations, max_neighbors, chunk_chars, multi_vector
    documents   int not null,              -- document vectors stored for the SKB
    chunks      int not null,              -- chunk vectors stored for the SKB
    built_at    timestamptz not null default now(),
    primary key (skb_id, model_id)
);
comment on table stark.embedding_build is
    'Per SKB and model: the settings of the last completed `stark-pg index` and how many vectors it left.';
