"""Bringing carried-over indexes up to date after an SKB is replaced.

A replacing load (stark_pg.skb.store) keeps the old version's postings and vectors: each carries the
hash of the text it was made from. Re-running the builds that existed, with the settings they last
ran with, re-does only the nodes whose text changed and rebuilds the per-SKB HNSW indexes, which a
replace does not carry. Until then a search reads the carried data: stale for changed nodes,
complete for the rest, and vector search runs without its HNSW index (exact, slower). Imported
vectors (stark_pg/index/imported.py) cannot be recomputed: only those of vanished nodes are dropped,
and their index rebuilt.
"""

from __future__ import annotations

import psycopg

from stark_pg.progress import Reporter
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb

LEXICAL_TABLES = ("lex_doc", "lex_posting", "lex_stats", "lex_term")


def carried_indexes(carried: dict[str, int]) -> list[str]:
    """Which index kinds a replace carried over ("lexical", "dense"), from its {table: rows moved}."""
    kinds = []
    if any(carried.get(t) for t in LEXICAL_TABLES):
        kinds.append("lexical")
    if carried.get("embedding_build"):
        kinds.append("dense")
    return kinds


def refresh_indexes(conn: psycopg.Connection, skb_name: str, kinds: list[str],
                    progress: Reporter | None = None) -> dict:
    """Re-run the lexical build and each model's dense build with its last settings, and build the
    new version's graph summary (a summary describes one version's edges and is never carried)."""
    report: dict = {}
    if "lexical" in kinds:
        from stark_pg.index.lexical import build_lexical

        report["lexical"] = build_lexical(conn, skb_name, progress=progress)
    if "dense" in kinds:
        from stark_pg.index.dense import build_dense

        builds = list(sql().builds_of_skb(conn, skb_id=require_skb(conn, skb_name)))
        from stark_pg.index.imported import reindex_imported

        report["dense"] = [
            reindex_imported(conn, skb_name, model, progress) if settings.get("imported") else
            build_dense(conn, skb_name, model=model, progress=progress,
                        with_relations=settings.get("with_relations", True),
                        multi_vector=settings.get("multi_vector", True),
                        max_neighbors=settings.get("max_neighbors", 25),
                        chunk_chars=settings.get("chunk_chars", 512))
            for model, settings in builds]
    if kinds:
        from stark_pg.index.graph import build_graph_summary

        report["graph"] = build_graph_summary(conn, skb_name, progress=progress)
    return report
