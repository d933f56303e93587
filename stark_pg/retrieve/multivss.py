"""Multi-VSS (STaRK's multi-vector baseline): nodes ranked by the similarities of their chunks.

A node has several vectors (name and type, pieces of each text field, one per relation; see
`stark.render_chunks`). `stark.multivss` (sql/functions/dense.sql) takes the nodes owning the `pool`
chunks nearest the query as candidates (HNSW), scores every chunk of every candidate exactly, and
aggregates per node: `agg="max"` (the best chunk) or `"mean"` (the mean of the `top` best chunks).
STaRK itself re-ranks VSS's top 50 nodes by their chunks; here the chunks choose the candidates, so
a node whose whole document reads poorly but one field matches well can still be found.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg

from stark_pg.embed import canonical_name, query_embeddings, skb_query_vector
from stark_pg.options import MethodOptions, OptionError
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, MissingIndex, Ranking
from stark_pg.retrieve.vss import ef_search_set


NEEDS = ()  # nothing beyond the SKB and its indexes


@dataclass
class Options(MethodOptions):
    model: str | None = None     # embedding model (default all-MiniLM-L6-v2); must match what was indexed
    agg: str = "max"             # max | mean (of the `top` best chunks of a node)
    top: int = 3                 # chunks averaged by agg=mean
    pool: int | None = None      # chunks fetched by HNSW to find candidates (default k * 20, at most 1000)
    exact: bool = False          # every node is a candidate, every chunk scored (slower; the ground truth)
    ef_search: int | None = None  # the chunk index's candidate list (default: max(pool, 100))
    LIMITS = {"ef_search": (1, 1000)}

    def check(self) -> None:
        if self.agg not in ("max", "mean"):
            raise OptionError(f"multivss agg must be max or mean, not {self.agg!r}")


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    model = canonical_name(options.model)
    with query_embeddings() as spent:
        vector = skb_query_vector(conn, skb, query, model)
    embedded = time.perf_counter()
    try:
        with ef_search_set(conn, options.ef_search):
            rows = list(sql().multivss_top(conn, skb=skb, embedding=vector, k=k, model=model, agg=options.agg,
                                           top=options.top, pool=options.pool, exact=options.exact))
    except psycopg.errors.RaiseException as exc:
        primary = exc.diag.message_primary or ""
        if "has no chunk vectors" not in primary:
            raise
        raise MissingIndex(f"{primary}: multivss ranks by chunk vectors, which `stark-pg index` builds when "
                           f"asked: run `stark-pg index {skb} --chunks`") from None
    hits = [Hit(int(node_id), float(score)) for node_id, score in rows]
    return Ranking(hits, {"method": "multivss", "sql": "stark.multivss(skb, embedding, k, model, agg, top, pool, exact)",
                          "model": model, "agg": options.agg, "top": options.top,
                          "pool": options.pool if options.pool is not None else min(k * 20, 1000),
                          "exact": options.exact,
                          **spent.trace(),
                          "sql_ms": round((time.perf_counter() - embedded) * 1000, 3)})
