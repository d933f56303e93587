"""Learned fusion + LLM reranker (`fusion+rerank`): fusion's top k_max reranked by an LLM, the rest below.

The LLM on top of the best ranking stark-pg makes without one: the same reranker as `vss+rerank`
(stark_pg/retrieve/rerank.py), over the trained fusion model `name` instead of VSS. Each candidate's
LLM score is added to `sim_weight` times its standing in fusion's order, so `sim_weight` says how far
the LLM may move an answer: a candidate whose LLM score is higher by d rises fewer than
d * k_max / sim_weight places (at k_max or more, nowhere). Choose it on train (`stark-pg tune SKB
-m fusion+rerank --split train -g sim_weight=...`), never on the split reported. Reranked nodes score
one more than the best node left below them plus their combined score; the rest keep fusion's scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from stark_pg.options import LLMOptions, OptionError
from stark_pg.retrieve import Ranking, fusion
from stark_pg.retrieve.rerank import DOC_CHARS, check_rerank, rerank_head


NEEDS = ("llm", "training")  # an LLM at query time, and a model from `stark-pg train fusion`
TRAINED_BY = ("fusion",)     # the `stark-pg train` commands of what it builds on


@dataclass
class Options(LLMOptions):
    name: str = "default"         # the trained fusion model (`stark-pg train fusion SKB --name ...`)
    k_max: int = 10               # fusion's candidates the LLM reranks
    doc_chars: int = DOC_CHARS    # characters of each candidate's document shown to the LLM
    batch: bool = False           # all k_max candidates in one prompt instead of one request each
    relations: bool = False       # documents include their relations (neighbour names)
    sim_weight: float = 1.0       # weight of fusion's order added to the LLM's score (see the docstring)

    def check(self) -> None:
        super().check()
        if self.k_max <= 0:
            raise OptionError(f"fusion+rerank k_max must be positive, not {self.k_max}")
        check_rerank(self.doc_chars, self.sim_weight)


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    first = fusion.search(conn, skb, query, max(k, options.k_max), fusion.Options(name=options.name))
    return rerank_head(conn, skb, query, first, k, options, "fusion+rerank", "fusion")
