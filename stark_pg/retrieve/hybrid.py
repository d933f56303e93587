"""Hybrid retrieval: BM25 and VSS fused inside PostgreSQL (reciprocal rank or weighted scores).

Python only embeds the query; `stark.hybrid` (sql/functions/hybrid.sql) runs both retrievers and
the fusion in one statement.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg

from stark_pg.embed import canonical_name, query_embeddings, skb_query_vector
from stark_pg.options import MethodOptions, OptionError
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, Ranking
from stark_pg.retrieve.vss import ef_search_set
from stark_pg.skb.catalog import require_skb


NEEDS = ()  # nothing beyond the SKB and its indexes


@dataclass
class Options(MethodOptions):
    fusion: str = "rrf"          # rrf | weighted
    weight: float = 0.5          # share of BM25 (the rest is VSS)
    pool: int = 100              # nodes each retriever contributes
    rrf_k: int = 60
    model: str | None = None     # embedding model (default all-MiniLM-L6-v2)
    ef_search: int | None = None  # VSS's index candidate list (default max(pool, 100))
    LIMITS = {"weight": (0.0, 1.0), "pool": (1, 10_000), "rrf_k": (1, 1_000_000), "ef_search": (1, 1000)}

    def check(self) -> None:
        if self.fusion not in ("rrf", "weighted"):
            raise OptionError(f"hybrid fusion must be rrf or weighted, not {self.fusion!r}")


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    require_skb(conn, skb)
    model = canonical_name(options.model)
    with query_embeddings() as spent:
        vector = skb_query_vector(conn, skb, query, model)
    embedded = time.perf_counter()
    with ef_search_set(conn, options.ef_search):
        rows = list(sql().hybrid_top(conn, skb=skb, query=query, embedding=vector, k=k, fusion=options.fusion,
                                     weight=options.weight, pool=options.pool, rrf_k=options.rrf_k, model=model))
    hits = [Hit(int(node_id), float(score)) for node_id, score in rows]
    return Ranking(hits, {"method": "hybrid", "sql": "stark.hybrid(skb, query, embedding, k, fusion, weight, pool, "
                                                      "rrf_k, model)",
                          "fusion": options.fusion, "weight": options.weight, "pool": options.pool, "model": model,
                          **spent.trace(),
                          "sql_ms": round((time.perf_counter() - embedded) * 1000, 3)})
