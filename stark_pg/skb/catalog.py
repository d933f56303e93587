"""Reading and removing loaded SKBs: what `stark-pg info` and `stark-pg drop` show and do."""

from __future__ import annotations

import psycopg

from stark_pg.options import did_you_mean
from stark_pg.resources import queries as sql
from stark_pg.skb.locks import lock_skb_name
from stark_pg.skb.records import LoadError


def skb_info(conn: psycopg.Connection, name: str) -> dict:
    """Counts of one SKB: nodes by type, edges by relation, queries by split, text fields."""
    skb_id = require_skb(conn, name)
    row = next(r for r in sql().list_skbs(conn) if r[0] == skb_id)
    nodes = {t: n for t, n in sql().count_nodes_by_type(conn, skb_id=skb_id)}
    edges = {r: n for r, n in sql().count_edges_by_relation(conn, skb_id=skb_id)}
    queries = {s: n for s, n in sql().count_queries_by_split(conn, skb_id=skb_id)}
    fields = {f: n for f, n in sql().count_fields(conn, skb_id=skb_id)}
    return {
        "name": row[1], "format": row[2], "source": row[3], "loaded_at": row[4].isoformat(),
        "nodes": sum(nodes.values()), "edges": sum(edges.values()), "queries": sum(queries.values()),
        "node_types": nodes, "relation_types": edges, "queries_by_split": queries, "fields": fields,
    }


def drop_summary(conn: psycopg.Connection, name: str) -> dict:
    """What dropping an SKB removes: its nodes, queries and stored evaluation runs, counted."""
    nodes, queries, runs = sql().count_what_drop_removes(conn, skb_id=require_skb(conn, name))
    return {"nodes": nodes, "queries": queries, "runs": runs}


def all_skb_names(conn: psycopg.Connection) -> list[str]:
    return [row[1] for row in sql().list_skbs(conn)]


def require_skb(conn: psycopg.Connection, name: str) -> int:
    skb_id = sql().find_skb_id(conn, name=name)
    if skb_id is None:
        names = all_skb_names(conn)
        raise LoadError(f"no SKB named {name!r} ({did_you_mean(name, names)}known: {', '.join(names) or 'none loaded'})")
    return skb_id


def drop_skb(conn: psycopg.Connection, name: str) -> None:
    with conn.transaction():
        lock_skb_name(conn, name)
        sql().delete_skb_rows(conn, skb_id=require_skb(conn, name))
        sql().drop_orphan_tables(conn, keep=None)    # emptied edge partitions of replaced SKBs
