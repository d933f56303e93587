"""LLM cache keys include who answered: rows cached from a server (a stored `base_url`) are re-keyed
with that address as their endpoint (stark_pg/llm/settings.endpoint_identity), so that a local
model's answers are no longer replayed as the real provider's. Rows of the providers' own APIs keep
their keys.

Revision ID: 0013
Revises: 0012
"""

import json

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _rekey(with_endpoint: bool) -> None:
    from alembic import op

    from stark_pg.llm.cache import canonical_json, request_hash

    conn = op.get_bind().connection.driver_connection
    rows = conn.execute("select provider, model, request_hash, request from stark.llm_cache "
                        "where coalesce(request ->> 'base_url', '') <> ''").fetchall()
    for provider, model, old_key, request in rows:
        body = {k: v for k, v in request.items() if k not in ("base_url", "endpoint")}
        endpoint = request["base_url"].strip().rstrip("/")
        new_key = request_hash(body, endpoint if with_endpoint else "")
        stored = body | {"base_url": request["base_url"]} | ({"endpoint": endpoint} if with_endpoint else {})
        if new_key == old_key:
            continue
        # going down, two servers' answers to one request collapse into one key: keep the first
        conn.execute("delete from stark.llm_cache where provider = %s and model = %s and request_hash = %s "
                     "and %s", (provider, model, new_key, not with_endpoint))
        conn.execute("update stark.llm_cache set request_hash = %s, request = %s::jsonb "
                     "where provider = %s and model = %s and request_hash = %s",
                     (new_key, canonical_json(stored), provider, model, old_key))
    conn.execute("comment on table stark.llm_cache is %s" % ("'Every LLM request and its response, keyed by "
                 "(provider, model, sha256 of the canonical request JSON"
                 + (" with the endpoint that answered" if with_endpoint else "") + ").'"))


def upgrade() -> None:
    _rekey(True)


def downgrade() -> None:
    _rekey(False)
