"""Connections, the embedded PostgreSQL server and schema migrations."""

from stark_pg.db.connection import connect, resolve_dsn

__all__ = ["connect", "resolve_dsn"]
