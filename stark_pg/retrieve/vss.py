"""VSS: nodes ranked by the cosine similarity of their document embedding to the query's.

Python embeds the query (`stark_pg.embed.encode_query`, cached); PostgreSQL does the rest in
`stark.vss` (sql/functions/dense.sql): through the SKB's partial HNSW (or DiskANN) index, or an exact
scan of its vectors on request. Build the vectors first with `stark-pg index` (stark_pg.index.dense).
`ef_search` sets the index's candidate list for the search: `stark.ef_search` with SET LOCAL in the
search's transaction, which stark.vss turns into hnsw.ef_search (or diskann.query_search_list_size).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from stark_pg.embed import canonical_name, encode_query
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, Ranking


NEEDS = ()  # nothing beyond the SKB and its indexes


@dataclass
class Options:
    model: str | None = None     # embedding model (default all-MiniLM-L6-v2); must match what was indexed
    exact: bool = False          # scan every vector instead of the HNSW index (the ground truth, slower)
    ef_search: int | None = None  # the index's candidate list (hnsw.ef_search); default max(k, 100)
    LIMITS = {"ef_search": (1, 1000)}


@contextmanager
def ef_search_set(conn: psycopg.Connection, ef_search: int | None):
    """A transaction in which the dense SQL functions search their index with this candidate list
    (`SET LOCAL stark.ef_search`; they set hnsw.ef_search from it). None: their defaults, no transaction."""
    if ef_search is None:
        yield
        return
    with conn.transaction():
        conn.execute("select set_config('stark.ef_search', %s, true)", (str(int(ef_search)),))
        yield
        conn.execute("select set_config('stark.ef_search', '', true)")   # a savepoint's SET LOCAL outlives it


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    model = canonical_name(options.model)
    started = time.perf_counter()
    vector = encode_query(query, model)
    embedded = time.perf_counter()
    with ef_search_set(conn, options.ef_search):
        rows = list(sql().vss_top(conn, skb=skb, embedding=vector, k=k, model=model, exact=options.exact))
    hits = [Hit(int(node_id), float(score)) for node_id, score in rows]
    return Ranking(hits, {"method": "vss", "sql": "stark.vss(skb, embedding, k, model, exact)", "model": model,
                          "exact": options.exact, "ef_search": options.ef_search,
                          "embed_ms": round((embedded - started) * 1000, 3),
                          "sql_ms": round((time.perf_counter() - embedded) * 1000, 3)})
