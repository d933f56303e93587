"""PRF (pseudo relevance feedback, no LLM): the query expanded with the text of the first
retrieval's top `n` documents, then retrieved again (the KAR paper's first baseline)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from stark_pg.options import OptionError
from stark_pg.retrieve import Ranking
from stark_pg.retrieve.expand import Context, RetrieverOptions, clip, run


NEEDS = ()  # nothing beyond the SKB and its indexes


@dataclass
class Options(RetrieverOptions):
    n: int = 3                    # top documents of the first retrieval added to the query
    doc_chars: int = 300          # characters of each of them

    def check(self) -> None:
        super().check()
        if self.n <= 0 or self.doc_chars <= 0:
            raise OptionError(f"prf n and doc_chars must be positive, not {self.n}, {self.doc_chars}")


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    o = options or Options()

    def expand(ctx: Context) -> list[str]:
        return [clip(d.text, o.doc_chars) for d in ctx.first_pass(o.n)]

    return run(conn, skb, query, k, o, "prf", expand)
