-- mFAR (multi-field adaptive retrieval): trained models.
--
-- A model scores a node for a query as  sum over (field, scorer) pairs p of
--     G_p(q) * gamma_p * (s_p(q, d) - mean_p) / scale_p,    G(q) = softmax(gate_weight q + gate_bias)
-- where s_p is BM25 over one field (scorer 'lexical') or the cosine similarity of the query embedding
-- to the field's embedding (scorer 'dense'), q the query embedding of `embed_model`, mean/scale the
-- pair's score statistics on the training candidates, and gamma a learned scale (1 unless trained
-- with batch normalisation). Python computes the weights G * gamma from the query; PostgreSQL does
-- the rest (stark.mfar, sql/functions/mfar.sql).

create table stark.mfar_model (
    skb_id       int    not null,
    name         text   not null,            -- e.g. the variant: all, lexical, dense, 2, 1+n
    variant      text   not null,
    embed_model  text   not null,            -- sentence-transformers model of q and of the dense fields
    fields       text[] not null,            -- one entry per (field, scorer) pair, in pair order
    scorers      text[] not null,            -- 'lexical' | 'dense'
    gate_weight  double precision[] not null, -- pairs x embedding dimension (a 2-d array)
    gate_bias    double precision[] not null,
    means        double precision[] not null,
    scales       double precision[] not null,
    gammas       double precision[] not null,
    settings     jsonb  not null,            -- epochs, batch size, temperature, pool, negatives, seed, ...
    history      jsonb  not null,            -- per epoch: training loss and the early-stopping metric
    metrics      jsonb  not null,            -- the chosen epoch's metrics on the early-stopping split
    trained_at   timestamptz not null default now(),
    primary key (skb_id, name),
    check (cardinality(fields) = cardinality(scorers) and cardinality(scorers) = cardinality(gate_bias)
           and cardinality(gate_bias) = cardinality(means) and cardinality(means) = cardinality(scales)
           and cardinality(scales) = cardinality(gammas)),
    check (scorers <@ array['lexical', 'dense'])
);
comment on table stark.mfar_model is
    'Trained mFAR models per SKB: query-conditioned weights over (field, scorer) pairs (stark-pg train mfar).';
