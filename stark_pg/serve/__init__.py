"""`stark-pg serve`: a read-only web view of the database and a JSON API over it.

Pages (server-rendered Jinja2 templates, autoescaped) and JSON replies come from the same functions in
stark_pg/serve/app.py; searches run through the code `stark-pg search` runs; the SQL of everything else
is in sql/queries/serve.sql. Every connection the server opens is read-only
(`default_transaction_read_only`), so no request can change the database.
"""

from __future__ import annotations

__all__ = ["create_app"]


def create_app(dsn: str | None = None):
    """The ASGI application over the database `dsn` (None: STARK_PG_DSN, else the embedded server)."""
    from stark_pg.serve.app import create_app as create

    return create(dsn)
