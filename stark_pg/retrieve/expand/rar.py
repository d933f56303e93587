"""RAR (retrieval-augmented rewriting, as the KAR paper's baseline; query2doc with retrieved
context): like HyDE, with the first retrieval's top `n` documents in the prompt, so the written
document can lean on what the knowledge base holds."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from stark_pg.options import LLMOptions, OptionError
from stark_pg.retrieve import Ranking
from stark_pg.retrieve.expand import Context, RetrieverOptions, ask_text, listing, run

PROMPT = """{structure}

Question: {query}

Documents the search engine found for the question (they may or may not answer it):
{documents}

Using these documents where they help, write the knowledge-base document of an entity that answers
the question: "name: ...", "type: ...", then its text fields, at most {words} words in all. Reply with
only {{"document": "..."}}."""


NEEDS = ("llm",)  # an LLM at query time (see README: LLMs)


@dataclass
class Options(LLMOptions, RetrieverOptions):
    n: int = 3                    # top documents of the first retrieval shown to the LLM
    doc_chars: int = 300          # characters of each
    words: int = 80
    max_tokens: int = 200

    def check(self) -> None:
        super().check()
        if self.n <= 0 or self.doc_chars <= 0:
            raise OptionError(f"rar n and doc_chars must be positive, not {self.n}, {self.doc_chars}")


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    o = options or Options()

    def expand(ctx: Context) -> list[str]:
        docs = listing(ctx.first_pass(o.n), o.doc_chars)
        return [ask_text(ctx.client, PROMPT.format(structure=ctx.structure().text(), query=query, documents=docs,
                                                   words=o.words), o.max_tokens)]

    return run(conn, skb, query, k, o, "rar", expand)
