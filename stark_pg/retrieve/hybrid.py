"""Hybrid retrieval: BM25 and VSS fused inside PostgreSQL (reciprocal rank or weighted scores); its
defaults are those `stark-pg tune` chose on the SKB's train split, where it did, else RRF.

Python only embeds the query; `stark.hybrid` (sql/functions/hybrid.sql) runs both retrievers and
the fusion in one statement.

Why tuned defaults: how far apart BM25's and VSS's scores are, and which of the two is better, depends
on the SKB; plain RRF can fall below its better half (it did on the slice's questions). `stark-pg tune
SKB -m hybrid` chooses the fusion settings on train and stores them (stark.tuned_setting); a search or
evaluation given none of TUNED_KEYS then uses them, and its trace's `settings_from` says where they came
from. Given any of them, the rest are the built-in defaults below. Options made in code are used as they
are (the expansion methods' hybrid retriever, tests).
"""

from __future__ import annotations

import copy
import dataclasses
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
DEFAULT_GRID = ("fusion=rrf,weighted", "weight=" + ",".join(f"{w / 10:g}" for w in range(11)))
"""What `stark-pg tune SKB -m hybrid` sweeps when given no --grid: both fusions, BM25's share 0 to 1."""
TUNED_KEYS = ("fusion", "weight", "pool", "rrf_k")
"""The settings `stark-pg tune` may store as an SKB's defaults (stark.hybrid_tuned_keys() in SQL)."""


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


def resolve_options(conn: psycopg.Connection, skb: str, options: Options) -> Options:
    """The settings a search of `skb` runs with, marked with where they came from (`_source`): the
    caller's when it gave any of TUNED_KEYS (or made the Options in code), else those `stark-pg tune`
    stored for the SKB, else the built-in defaults. Evaluation resolves before it names a run, so runs
    under different tuned settings are different runs."""
    if getattr(options, "_source", None) is not None:
        return options
    options = copy.copy(options)            # the caller's stays as it was (it may search another SKB)
    given = getattr(options, "_given", None)
    if given is None or given & set(TUNED_KEYS):
        source = {"from": "options"}
    else:
        row = sql().tuned_setting(conn, skb_id=require_skb(conn, skb), method="hybrid")
        if row is None:
            source = {"from": "built-in defaults", "why": "no setting stored by `stark-pg tune` for this SKB"}
        else:
            stored, query_set, queries, metric, value, run_id, chosen_at = row
            try:
                options = dataclasses.replace(options, **{k: v for k, v in stored.items() if k in TUNED_KEYS})
            except (TypeError, OptionError) as exc:
                raise OptionError(f"hybrid's stored defaults for {skb} ({stored}) are not valid: {exc}; "
                                  f"run `stark-pg tune {skb} -m hybrid` again") from None
            object.__setattr__(options, "_given", frozenset(given) | set(stored))
            source = {"from": "stark-pg tune", "query_set": query_set, "queries": queries, "metric": metric,
                      "value": round(value, 4), "run_id": run_id, "chosen_at": str(chosen_at)}
    object.__setattr__(options, "_source", source)
    return options


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = resolve_options(conn, skb, options or Options())
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
                          "fusion": options.fusion, "weight": options.weight, "pool": options.pool,
                          "rrf_k": options.rrf_k, "settings_from": options._source, "model": model,
                          **spent.trace(),
                          "sql_ms": round((time.perf_counter() - embedded) * 1000, 3)})
