"""Fusion + a cross-encoder (`fusion-ce`): fusion's top N re-scored by a trained cross-encoder, the rest as fusion ranks it.

Over fusion's top `top` results, the final score is fusion's score z-normalised over them plus
`weight` times the cross-encoder's score z-normalised over them (stark_pg/models/cross_encoder.py,
`mix`); results below the top N keep fusion's order, under them. By default `top` and `weight` are
the ones `stark-pg train cross-encoder` chose on held-out training questions, and the fusion model
is the one it trained over. At weight 0 (what training chooses when the cross-encoder never helped on
them) the ranking is fusion's exactly and the cross-encoder is not run at all.

Train first: `stark-pg train fusion SKB` and `stark-pg train cross-encoder SKB`. The trace holds
fusion's trace (`fusion`), each top result's two raw scores (`ce.scores`: [node, fusion, cross-encoder]
in fusion's order), the weight and the milliseconds spent reading documents and scoring (`ce_ms`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg

from stark_pg.models.cross_encoder import documents, load_model, predict, reorder
from stark_pg.options import MethodOptions, OptionError
from stark_pg.retrieve import Hit, Ranking, fusion
from stark_pg.skb.catalog import require_skb

NEEDS = ("training",)  # `stark-pg train fusion` and `stark-pg train cross-encoder` first
TRAINED_BY = ("fusion", "cross-encoder")   # the `stark-pg train` commands of what it builds on


@dataclass
class Options(MethodOptions):
    name: str = "default"           # the cross-encoder (`stark-pg train cross-encoder SKB --name ...`)
    fusion: str | None = None       # the fusion model (default: the one the cross-encoder was trained over)
    top: int | None = None          # fusion's results re-scored (default: the N training chose the weight for)
    weight: float | None = None     # the cross-encoder's weight (default: the one training chose; 0: fusion alone)

    def check(self) -> None:
        super().check()
        if self.top is not None and self.top < 1:
            raise OptionError(f"fusion-ce top must be at least 1, not {self.top}")
        if self.weight is not None and self.weight < 0:
            raise OptionError(f"fusion-ce weight must be at least 0, not {self.weight}")


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    ce = load_model(conn, require_skb(conn, skb), skb, options.name)
    top = options.top if options.top is not None else ce.top
    weight = options.weight if options.weight is not None else ce.weight
    first = fusion.search(conn, skb, query, max(k, top), fusion.Options(name=options.fusion or ce.fusion))
    head, rest = first.hits[:top], first.hits[top:]
    started = time.perf_counter()
    ids = [h.node_id for h in head]
    fused = [h.score for h in head]
    if weight and head:
        docs = documents(conn, skb, ids)
        scored = predict(ce.model, query, [docs.get(n, "") for n in ids]).tolist()
    else:
        scored = [0.0] * len(head)      # weight 0: fusion's order, the model not run
    mixed = reorder(ids, fused, scored, weight)
    ce_ms = round((time.perf_counter() - started) * 1000, 3)
    # the top N above the rest, and scores falling as ranks rise: the rest keep fusion's scores, the top N
    # their mixed score lifted above the best of the rest
    floor = (rest[0].score + 1.0 - min(s for _, s in mixed)) if rest and mixed else 0.0
    hits = [Hit(n, s + max(floor, 0.0)) for n, s in mixed] + rest
    trace = {"method": "fusion-ce", "fusion": first.trace, "cross_encoder": ce.name, "top": top, "weight": weight,
             "ce": {"scores": [[n, round(f, 5), round(c, 5)] for n, f, c in zip(ids, fused, scored)]},
             "ce_ms": ce_ms}
    return Ranking(hits[:k], trace)
