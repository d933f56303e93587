-- Query embeddings, for methods that learn from the training queries by similarity: 4StepFocus
-- checks the LLM's answer type against the types of the answers of the nearest training queries
-- (sql/functions/answer_type.sql). Filled lazily by the method that needs them; `body_md5` ties a
-- vector to the text it was computed from, so queries reloaded with new text are re-embedded
-- instead of matched with stale vectors. The vector has no fixed dimension: models differ.

create table stark.query_vector (
    skb_id    int    not null,
    query_id  bigint not null,
    model     text   not null,
    body_md5  text   not null,
    vec       vector not null,
    primary key (skb_id, query_id, model)
);

comment on table stark.query_vector is
    'Embeddings of an SKB''s queries per model, filled on demand (e.g. by 4StepFocus''s answer-type vote).';
