-- Text in, ranking out, in SQL (stark.embed, stark.search: sql/functions/embed.sql). A query vector comes
-- from an embedding endpoint (OpenAI's protocol: `stark-pg serve` offers one, /v1/embeddings) through the
-- `http` extension, which only stark.embed may call. Its two tables live in their own schema,
-- stark_embed, that no one but the database owner may use: a grant on the tables of schema stark (to let
-- analysts read them) never reaches the endpoint's API key, nor lets anyone write a vector into the cache.
-- stark.embed runs with its owner's rights.
-- - stark_embed.endpoint: where stark.embed posts (one row, set by `stark-pg db embedding-endpoint`): no
--   caller chooses a URL, so a role that may search cannot make the server fetch anything else;
-- - stark_embed.cache: every vector it was given, by model and text, so a question asked again costs no
--   request.

create schema stark_embed;
revoke all on schema stark_embed from public;
comment on schema stark_embed is
    'stark.embed''s endpoint setting and vector cache: the database owner''s only (sql/functions/embed.sql).';

create table stark_embed.endpoint (
    singleton   boolean primary key default true check (singleton),   -- one row: the endpoint
    url         text    not null check (url ~ '^https?://[^\s/?#]+'),  -- the base; stark.embed posts to url/v1/embeddings
    api_key     text,                                                  -- sent as Authorization: Bearer (NULL: none)
    timeout_ms  int     not null default 10000 check (timeout_ms between 1 and 600000),
    set_at      timestamptz not null default now()
);
comment on table stark_embed.endpoint is
    'Where stark.embed asks for query vectors (OpenAI embeddings protocol): set by the database owner only (stark-pg db embedding-endpoint).';

create table stark_embed.cache (
    model       text   not null,
    body_md5    text   not null,                  -- md5 of the text: the key (a text can be long)
    body        text   not null,
    vec         vector not null,
    created_at  timestamptz not null default now(),
    primary key (model, body_md5)
);
comment on table stark_embed.cache is
    'Query vectors stark.embed received, by model and text: asked again, the text costs no request.';

revoke all on stark_embed.endpoint, stark_embed.cache from public;
