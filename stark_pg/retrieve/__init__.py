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
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Hit:
    node_id: int
    score: float


@dataclass
class Ranking:
    """Ranked nodes, best first, with a trace of how they were found (SQL, candidate counts, ...)."""

    hits: list[Hit]
    trace: dict = field(default_factory=dict)

    @property
    def node_ids(self) -> list[int]:
        return [h.node_id for h in self.hits]


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
    "qagnn": "stark_pg.retrieve.qagnn",
}


class UnknownMethod(ValueError):
    pass


class MissingIndex(LookupError):
    """A search needs an index the SKB does not have (yet): the message says which command builds it."""


def needs_setup(exc: BaseException) -> bool:
    """Whether a failed search failed for every query alike: an index, a trained model or the SKB itself
    is missing (MissingIndex; LoadError naming the SKB or model; one of our SQL functions raising with a
    hint that says which `stark-pg` command to run). An evaluation stops on such an error instead of
    recording it once per query as an all-zero run."""
    import psycopg

    from stark_pg.skb.records import LoadError

    if isinstance(exc, (MissingIndex, LoadError)):
        return True
    hint = exc.diag.message_hint if isinstance(exc, psycopg.Error) and exc.diag else None
    return bool(hint) and hint.startswith("run `stark-pg ")


def get_method(name: str):
    """The module implementing method `name` (it has `Options` and `search`)."""
    if name not in METHODS:
        raise UnknownMethod(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return importlib.import_module(METHODS[name])
