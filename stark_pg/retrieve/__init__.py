"""Retrieval methods: one module per method, each with an `Options` dataclass and one entry point.

    search(conn, skb: str, query: str, k: int, options: Options | None = None) -> Ranking

Methods never reach into each other's tables; shared pieces (the query embedding, BM25 scoring)
are functions they call. `get_method(name)` finds a method module by its CLI name.

Each method module also declares `NEEDS`, what it needs beyond an SKB and its indexes: a tuple of
"llm" (it calls an LLM at query time) and "training" (a `stark-pg train ...` run must come first).
`stark-pg methods` and the help of `search` and `eval` read it (stark_pg/retrieve/catalog.py), so
a user learns before a run, not from its error, that a method will call an LLM or wants a model.
"""

from __future__ import annotations

import importlib

from stark_pg.options import did_you_mean
from stark_pg.ranking import Hit, Ranking
from stark_pg.skb.records import MissingIndex

__all__ = ["Hit", "Ranking", "MissingIndex", "METHODS", "UnknownMethod", "get_method"]


METHODS = {
    "bm25": "stark_pg.retrieve.bm25",
    "vss": "stark_pg.retrieve.vss",
    "multivss": "stark_pg.retrieve.multivss",
    "hybrid": "stark_pg.retrieve.hybrid",
    "mfar": "stark_pg.retrieve.mfar",
    "vss+rerank": "stark_pg.retrieve.vss_rerank",
    "4stepfocus": "stark_pg.retrieve.focus",
    "prf": "stark_pg.retrieve.expand.prf",
    "hyde": "stark_pg.retrieve.expand.hyde",
    "rar": "stark_pg.retrieve.expand.rar",
    "agr": "stark_pg.retrieve.expand.agr",
    "kar": "stark_pg.retrieve.expand.kar",
    "agent": "stark_pg.retrieve.agent",
    "fusion": "stark_pg.retrieve.fusion",
    "fusion-ce": "stark_pg.retrieve.fusion_ce",
    "fusion+rerank": "stark_pg.retrieve.fusion_rerank",
    "qagnn": "stark_pg.retrieve.qagnn",
}


class UnknownMethod(ValueError):
    pass


def get_method(name: str):
    """The module implementing method `name` (it has `Options` and `search`)."""
    if name not in METHODS:
        raise UnknownMethod(f"unknown method {name!r} ({did_you_mean(name, METHODS)}known: {', '.join(METHODS)})")
    return importlib.import_module(METHODS[name])
