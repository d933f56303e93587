-- Named statements of `stark-pg db embedding-endpoint` (stark_pg/cli/db.py): stark.embed's endpoint.

-- name: set_embed_endpoint(url, api_key, timeout_ms)$
-- Set the endpoint (the database owner only; creates the http extension where the server has it).
select stark.embed_endpoint_set(:url, :api_key, :timeout_ms);

-- name: embed_endpoint()^
-- The endpoint set, whether an API key goes with it (never the key), its timeout, and the http extension.
select e.url, e.api_key is not null as has_key, e.timeout_ms, e.set_at, stark.http_schema() as http_schema
from stark_embed.endpoint e;

-- name: embed_cache_size()$
select count(*) from stark_embed.cache;
