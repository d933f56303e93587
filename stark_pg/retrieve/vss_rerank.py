"""VSS + LLM reranker (`vss+rerank`): VSS's top k_max reranked by an LLM, the rest of VSS below.

The LLM step is stark_pg/retrieve/rerank.py; the LLM is chosen by `llm`, `base_url` and `cache`
(None: STARK_PG_LLM, STARK_PG_LLM_BASE_URL, STARK_PG_LLM_CACHE). Reranked nodes score 1 + their
LLM score, the rest keep their cosine similarity (at most 1), so scores fall as ranks rise.
The trace holds VSS's trace, each candidate's LLM score (`rerank.scores`, [node_id, score] in VSS
order) and the LLM meter (`llm`).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from stark_pg.options import LLMOptions, OptionError
from stark_pg.retrieve import Ranking, vss
from stark_pg.retrieve.rerank import DOC_CHARS, SIM_WEIGHT, check_rerank, rerank_head


NEEDS = ("llm",)  # an LLM at query time (see README: LLMs)


@dataclass
class Options(LLMOptions):
    k_max: int = 20               # VSS candidates the LLM reranks
    model: str | None = None      # embedding model of the VSS step (default all-MiniLM-L6-v2)
    doc_chars: int = DOC_CHARS    # characters of each candidate's document shown to the LLM
    batch: bool = False           # all k_max candidates in one prompt instead of one request each
    relations: bool = False       # documents include their relations (neighbour names)
    sim_weight: float = SIM_WEIGHT  # weight of the VSS order added to the LLM's score (STaRK: 0.1)

    def check(self) -> None:
        super().check()
        if self.k_max <= 0:
            raise OptionError(f"vss+rerank k_max must be positive, not {self.k_max}")
        check_rerank(self.doc_chars, self.sim_weight)


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    first = vss.search(conn, skb, query, max(k, options.k_max), vss.Options(model=options.model))
    return rerank_head(conn, skb, query, first, k, options, "vss+rerank", "vss", offset=1.0)
