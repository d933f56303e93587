"""The graph's typed-link summary (stark.edge_type_link): for each node, which node types it has edges
to, per relation and direction, with how many.

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
    """Build the SKB's typed-link summary unless it exists; {"rows", "built", "seconds"}. One statement
    over all the edges (about 20 s for STaRK-Prime's 8M), in a transaction of its own."""
    started = time.perf_counter()
    with skb_name_locked(conn, skb_name):
        skb_id = require_skb(conn, skb_name)
        before = sql().edge_type_link_rows(conn, skb_id=skb_id)
        with (progress or NullReporter()).stage("graph summary", total=1) as stage, conn.transaction():
            rows = sql().build_edge_type_link(conn, skb_name=skb_name, rebuild=rebuild)
            stage.advance()
    return {"rows": rows, "built": rebuild or before == 0, "seconds": round(time.perf_counter() - started, 3)}
