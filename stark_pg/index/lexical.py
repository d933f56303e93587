"""The lexical index of an SKB: BM25 postings for the whole document, the name and every text field.

On request (mFAR's fields) also the type and one scope per relation listing the neighbours' names;
once built, those scopes are kept up to date by every later build.

Each scope is refreshed by `stark.lex_refresh` in its own transaction, so an interrupted build
keeps the scopes already done and a re-run only re-tokenises new or changed documents.

Where the server has pg_textsearch, each scope also gets a BM25 index of that extension (the engine
`bm25` searches by default: block-max WAND top-k instead of scanning every posting); the postings stay
as the exact SQL engine (`-o engine=sql`), which mFAR's and fusion's per-candidate scores read.
"""

from __future__ import annotations

import time

import psycopg

from stark_pg.db.extensions import extensions
from stark_pg.options import OptionError
from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb
from stark_pg.skb.locks import skb_name_locked


class TextsearchUnavailable(OptionError):
    """pg_textsearch was asked for (`--textsearch`) on a server that does not have it."""


def build_lexical(conn: psycopg.Connection, skb_name: str, progress: Reporter | None = None,
                  extra_scopes: list[str] | None = None, textsearch: bool | None = None) -> dict:
    """Refresh every scope; returns {scope: documents re-indexed}, the BM25 engine and the seconds taken.

    `extra_scopes` adds scopes beyond the default ones: 'type' and 'relation:<relation>'
    (see `relation_scopes`). `textsearch`: True builds pg_textsearch indexes (an error where the
    server lacks the extension), False drops them, None (the default) builds them where the server
    has the extension and keeps existing ones up to date. Holds the SKB name's lock throughout:
    builds and loads of one name queue.
    """
    with skb_name_locked(conn, skb_name):
        return _build_lexical(conn, skb_name, progress, extra_scopes, textsearch)


def textsearch_engine(conn: psycopg.Connection, wanted: bool | None) -> tuple[bool, str | None]:
    """Whether to build pg_textsearch indexes, creating the extension in this database if needed,
    and the one-line notice when the SQL engine is what the user gets instead."""
    if wanted is False:
        return False, None
    (extension,) = extensions(conn, ("pg_textsearch",))
    if extension.installed:
        return True, None
    if not extension.usable:
        reason = ("pg_textsearch is not on this server" if extension.available is None
                  else "pg_textsearch is not in the server's shared_preload_libraries")
        if wanted:
            raise TextsearchUnavailable(f"--textsearch: {reason}; index without it (BM25 then runs as exact SQL)")
        return False, f"{reason}: BM25 uses the exact SQL engine"
    try:
        with conn.transaction():
            conn.execute("create extension if not exists pg_textsearch")
    except psycopg.errors.InsufficientPrivilege as exc:
        if wanted:
            raise TextsearchUnavailable(f"--textsearch: cannot create the pg_textsearch extension: {exc}") from exc
        return False, "pg_textsearch cannot be created by this role: BM25 uses the exact SQL engine"
    return True, None


def _build_lexical(conn: psycopg.Connection, skb_name: str, progress: Reporter | None,
                   extra_scopes: list[str] | None, textsearch: bool | None) -> dict:
    progress = progress or NullReporter()
    started = time.perf_counter()
    skb_id = require_skb(conn, skb_name)
    use_textsearch, notice = textsearch_engine(conn, textsearch)
    scopes = [row[0] for row in sql().lexical_scopes(conn, skb_id=skb_id,
                                                                  extra=list(extra_scopes or []))]
    refreshed: dict[str, int] = {}
    with progress.stage("lexical scopes", total=len(scopes)) as stage:
        for scope in scopes:
            with conn.transaction():
                refreshed[scope] = sql().refresh_scope(conn, skb_id=skb_id, scope=scope,
                                                       textsearch=use_textsearch)
            stage.advance()
    with conn.transaction():
        for statement in (sql().drop_other_scopes, sql().drop_other_scope_docs, sql().drop_other_scope_terms,
                          sql().drop_other_scope_stats):
            statement(conn, skb_id=skb_id, scopes=scopes)
        sql().drop_bm25_tables(conn, skb_id=skb_id, keep=scopes if use_textsearch else [])
    if any(refreshed.values()):
        # vacuum sets the visibility map, without which the postings' index-only scans visit the heap;
        # it cannot run inside a transaction, so a caller's non-autocommit connection only analyzes
        command = "vacuum (analyze)" if conn.autocommit and conn.info.transaction_status == 0 else "analyze"
        for table in ("lex_posting", "lex_doc", "lex_term", "lex_stats"):
            conn.execute(f"{command} stark.{table}")
    report = {"reindexed": refreshed, "engine": "textsearch" if use_textsearch else "sql",
              "seconds": round(time.perf_counter() - started, 3)}
    return report | ({"notice": notice} if notice else {})


def relation_scopes(conn: psycopg.Connection, skb_name: str) -> list[str]:
    """The type scope and one 'relation:<relation>' scope per relation of the SKB (mFAR's extra fields)."""
    skb_id = require_skb(conn, skb_name)
    return ["type"] + [f"relation:{row[0]}" for row in sql().skb_relations(conn, skb_id=skb_id)]
