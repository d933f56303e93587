"""The lexical index of an SKB: BM25 postings for the whole document, the name and every text field.

On request (mFAR's fields) also the type and one scope per relation listing the neighbours' names;
once built, those scopes are kept up to date by every later build.

Each scope is refreshed by `stark.lex_refresh` in its own transaction, so an interrupted build
keeps the scopes already done and a re-run only re-tokenises new or changed documents.
"""

from __future__ import annotations

import time

import psycopg

from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb
from stark_pg.skb.locks import skb_name_locked


def build_lexical(conn: psycopg.Connection, skb_name: str, progress: Reporter | None = None,
                  extra_scopes: list[str] | None = None) -> dict:
    """Refresh every scope; returns {scope: documents re-indexed} and the seconds taken.

    `extra_scopes` adds scopes beyond the default ones: 'type' and 'relation:<relation>'
    (see `relation_scopes`). Holds the SKB name's lock throughout: builds and loads of one name queue.
    """
    with skb_name_locked(conn, skb_name):
        return _build_lexical(conn, skb_name, progress, extra_scopes)


def _build_lexical(conn: psycopg.Connection, skb_name: str, progress: Reporter | None,
                   extra_scopes: list[str] | None) -> dict:
    progress = progress or NullReporter()
    started = time.perf_counter()
    skb_id = require_skb(conn, skb_name)
    scopes = [row[0] for row in sql().lexical_scopes(conn, skb_id=skb_id,
                                                                  extra=list(extra_scopes or []))]
    refreshed: dict[str, int] = {}
    with progress.stage("lexical scopes", total=len(scopes)) as stage:
        for scope in scopes:
            with conn.transaction():
                refreshed[scope] = sql().refresh_scope(conn, skb_id=skb_id, scope=scope)
            stage.advance()
    with conn.transaction():
        for statement in (sql().drop_other_scopes, sql().drop_other_scope_docs, sql().drop_other_scope_terms,
                          sql().drop_other_scope_stats):
            statement(conn, skb_id=skb_id, scopes=scopes)
    if any(refreshed.values()):
        # vacuum sets the visibility map, without which the postings' index-only scans visit the heap;
        # it cannot run inside a transaction, so a caller's non-autocommit connection only analyzes
        command = "vacuum (analyze)" if conn.autocommit and conn.info.transaction_status == 0 else "analyze"
        for table in ("lex_posting", "lex_doc", "lex_term", "lex_stats"):
            conn.execute(f"{command} stark.{table}")
    return {"reindexed": refreshed, "seconds": round(time.perf_counter() - started, 3)}


def relation_scopes(conn: psycopg.Connection, skb_name: str) -> list[str]:
    """The type scope and one 'relation:<relation>' scope per relation of the SKB (mFAR's extra fields)."""
    skb_id = require_skb(conn, skb_name)
    return ["type"] + [f"relation:{row[0]}" for row in sql().skb_relations(conn, skb_id=skb_id)]
