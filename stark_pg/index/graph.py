"""The graph's typed-link summary (stark.edge_type_link): for each node, which node types it has edges
to, per relation and direction, with how many; and whether every edge is stored both ways
(stark.edge_symmetry), which lets a search that ignores direction read outgoing edges alone.

4StepFocus's substitution (sql/functions/focus.sql) reads it to revise candidate sets without probing
the edges of every member; without it the substitution gives the same sets, more slowly at STaRK-Prime's
size. An SKB's edges never change once it is loaded (a replacing load creates a new version), so the
summary is built once per loaded version: a second build returns at once unless asked to rebuild.
"""

from __future__ import annotations

import time

import psycopg

from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb
from stark_pg.skb.locks import skb_name_locked


def build_graph_summary(conn: psycopg.Connection, skb_name: str, rebuild: bool = False,
                        progress: Reporter | None = None) -> dict:
    """Build the SKB's typed-link summary and edge symmetry unless they exist; {"rows", "built",
    "one_way_edges", "seconds"}. Two statements over all the edges (long on a large SKB), in a
    transaction of its own."""
    started = time.perf_counter()
    with skb_name_locked(conn, skb_name):
        skb_id = require_skb(conn, skb_name)
        built = rebuild or sql().edge_type_link_rows(conn, skb_id=skb_id) == 0 \
            or sql().edge_one_way(conn, skb_id=skb_id) is None
        with (progress or NullReporter()).stage("graph summary", total=1) as stage, conn.transaction():
            rows = sql().build_edge_type_link(conn, skb_name=skb_name, rebuild=rebuild)
            stage.advance()
        one_way = sql().edge_one_way(conn, skb_id=skb_id)
    return {"rows": rows, "built": built, "one_way_edges": one_way,
            "seconds": round(time.perf_counter() - started, 3)}
