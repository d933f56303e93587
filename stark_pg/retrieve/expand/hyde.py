"""HyDE (Gao et al. 2023): the LLM writes a document that would answer the query, in the form of
the SKB's documents (their structures come from the database); the query plus that document is
retrieved."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from stark_pg.retrieve import Ranking
from stark_pg.options import LLMOptions
from stark_pg.retrieve.expand import Context, RetrieverOptions, ask_text, run

PROMPT = """{structure}

Question: {query}

Write the knowledge-base document of an entity that answers the question, as it would appear in the
knowledge base: "name: ...", "type: ...", then its text fields, at most {words} words in all. If you
do not know the answer's name, describe it. Reply with only {{"document": "..."}}."""


NEEDS = ("llm",)  # an LLM at query time (see README: LLMs)


@dataclass
class Options(LLMOptions, RetrieverOptions):
    words: int = 80               # length asked of the document
    max_tokens: int = 200         # the LLM's reply limit


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    o = options or Options()

    def expand(ctx: Context) -> list[str]:
        return [ask_text(ctx.client, PROMPT.format(structure=ctx.structure().text(), query=query, words=o.words),
                         o.max_tokens)]

    return run(conn, skb, query, k, o, "hyde", expand)
