"""BM25 (Okapi, Lucene's idf) computed by PostgreSQL over the lexical index.

Tokens are PostgreSQL's `english` text-search lexemes for documents and queries alike, so the
query never leaves the database; see sql/functions/lexical.sql for the formula. Two engines give the
same ranking: pg_textsearch's BM25 index (block-max WAND: the top k without reading every posting),
the default where `stark-pg index` built one, and the exact SQL over the postings (`engine=sql`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg

from stark_pg.resources import queries as sql
from stark_pg.options import MethodOptions, OptionError
from stark_pg.retrieve import Hit, MissingIndex, Ranking
from stark_pg.skb.catalog import require_skb


NEEDS = ()  # nothing beyond the SKB and its indexes


@dataclass
class Options(MethodOptions):
    k1: float = 1.2
    b: float = 0.75
    field: str | None = None     # None: the whole document; 'name' or a text field's name otherwise
    engine: str = "auto"         # auto (pg_textsearch where indexed with this k1 and b) | textsearch | sql
    LIMITS = {"k1": (0.0, 1000.0), "b": (0.0, 1.0)}    # beyond them BM25's arithmetic overflows to NaN
    CHOICES = {"engine": ("auto", "textsearch", "sql")}


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    started = time.perf_counter()
    scope = options.field or "*"
    skb_id = require_skb(conn, skb)
    check_scope(conn, skb, skb_id, scope)
    try:
        engine = sql().bm25_engine(conn, skb_id=skb_id, scope=scope, engine=options.engine, k1=options.k1,
                                   b=options.b)
    except psycopg.errors.InvalidParameterValue as exc:
        raise MissingIndex(f"--option engine={options.engine}: {exc.diag.message_primary}"
                           f" ({exc.diag.message_hint})") from exc
    rows = sql().bm25_top(conn, skb_id=skb_id, scope=scope, query=query, k1=options.k1,
                          b=options.b, k=k, engine=engine)
    hits = [Hit(int(node_id), float(score)) for node_id, score in rows]
    return Ranking(hits, {"method": "bm25", "engine": engine,
                          "sql": "stark.bm25_top(skb_id, scope, query, k, k1, b, engine)",
                          "scope": scope, "k1": options.k1, "b": options.b,
                          "sql_ms": round((time.perf_counter() - started) * 1000, 3)})


def check_scope(conn: psycopg.Connection, skb: str, skb_id: int, scope: str) -> None:
    """An unknown field or a missing index is an error, not an empty ranking that looks like "no match"."""
    scopes = [row[0] for row in sql().indexed_scopes(conn, skb_id=skb_id)]
    if not scopes:
        raise MissingIndex(f"SKB {skb!r} has no lexical index: run stark-pg index {skb}")
    if scope not in scopes:
        fields = ", ".join(s for s in scopes if s != "*")
        raise OptionError(f"--option field={scope}: SKB {skb!r} has no indexed field {scope!r} (fields: {fields})")
