"""A server setting changed for one block of statements (SET LOCAL), then set back.

Why: search methods change planner and index settings for their own statements only
(`plan_cache_mode` for fusion's compiled trees, `stark.ef_search` for the HNSW searches), and the
caller's transaction, or the rest of an application's connection, must not see the change. SET LOCAL
alone ends with the transaction; but inside a caller's transaction psycopg's nested transaction is a
savepoint, whose release keeps SET LOCAL. So the value found on entry is set back before leaving (an
error rolls the savepoint back, which undoes the change by itself).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from stark_pg.resources import queries as sql


@contextmanager
def local_setting(conn: psycopg.Connection, name: str, value: str) -> Iterator[None]:
    """A transaction (a savepoint inside the caller's) in which `name` is `value`."""
    with conn.transaction():
        before = sql().setting_value(conn, name=name)
        sql().set_local_setting(conn, name=name, value=value)
        yield
        sql().set_local_setting(conn, name=name, value=before)
