"""One writer per SKB name: loads, drops, index builds and the linking of training questions of one
name queue behind each other.

Two loads of one name at once would both find it absent and both insert it (a raw UniqueViolation),
two index builds would insert the same postings (`lex_doc_pkey`), two `train fusion` runs the same
name matches of a new training question (`query_link_pkey`). A PostgreSQL advisory lock keyed on
the name (sql/queries/skb.sql) makes the second wait for the first; it says so on stderr first, so a
command that seems stuck explains itself. Loads and drops hold the lock for their one transaction;
index builds commit as they go, so they hold the same lock at session level until they end.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import psycopg

from stark_pg.resources import queries as sql


def _say_waiting(name: str) -> None:
    print(f"waiting for another process loading, indexing, dropping or linking {name!r} to finish...",
          file=sys.stderr, flush=True)


def lock_skb_name(conn: psycopg.Connection, name: str) -> None:
    """Take the name's lock for the rest of the current transaction, waiting (with a notice) while it is held."""
    if not sql().try_lock_skb_name(conn, name=name):
        _say_waiting(name)
        sql().lock_skb_name(conn, name=name)


@contextmanager
def skb_name_locked(conn: psycopg.Connection, name: str) -> Iterator[None]:
    """Hold the name's lock across the transactions of the block (waiting, with a notice, while it is held).

    Taken in a transaction of its own, so that on a connection without autocommit the lock statement
    does not leave a transaction open around the caller's work; released when the block ends (or, if the
    connection fails meanwhile, when it closes).
    """
    with conn.transaction():
        if not sql().try_lock_skb_name_session(conn, name=name):
            _say_waiting(name)
            sql().lock_skb_name_session(conn, name=name)
    try:
        yield
    finally:
        try:
            with conn.transaction():
                sql().unlock_skb_name_session(conn, name=name)
        except psycopg.Error:  # a broken connection: the server releases the lock when it closes
            pass
