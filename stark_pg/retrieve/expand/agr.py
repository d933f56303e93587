"""AGR (Chen et al. 2024, "Analyze, Generate and Refine"): four LLM steps.

1. keywords of the query; 2. an analysis of what the query asks for (the kind of entity, its
properties, its relations); 3. candidate documents, one from the analysis and one from the first
retrieval's top `n` documents; 4. one refined document that checks the candidates against each
other and the query. The query plus the keywords and the refined document is retrieved."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from stark_pg.options import LLMOptions, OptionError
from stark_pg.retrieve import Ranking
from stark_pg.retrieve.expand import Context, RetrieverOptions, ask_text, ask_texts, listing, run

KEYWORDS = """Question: {query}

List the keywords of this question that a search engine should match (entity names, technical
terms), at most 8. Reply with only {{"keywords": ["...", ...]}}."""

ANALYSIS = """{structure}

Question: {query}
Keywords: {keywords}

Analyse the question in at most 60 words: which type of entity does it ask for, which properties
must that entity have, and which relations to which other entities? Reply with only {{"analysis": "..."}}."""

CANDIDATES = """{structure}

Question: {query}
Analysis: {analysis}

Documents the search engine found for the question (they may or may not answer it):
{documents}

Write two candidate knowledge-base documents of an entity that answers the question ("name: ...",
"type: ...", then its text fields, at most {words} words each): the first from the analysis, the
second from the found documents. Reply with only {{"documents": ["...", "..."]}}."""

REFINE = """Question: {query}
Analysis: {analysis}

Candidate documents:
{candidates}

Check the candidates against each other and against the question: keep what they agree on and
what fits the question, drop what contradicts it. Write one refined knowledge-base document of the
answer ("name: ...", "type: ...", then its text fields, at most {words} words). Reply with only
{{"document": "..."}}."""


NEEDS = ("llm",)  # an LLM at query time (see README: LLMs)


@dataclass
class Options(LLMOptions, RetrieverOptions):
    n: int = 3                    # top documents of the first retrieval shown in step 3
    doc_chars: int = 300
    words: int = 80
    max_tokens: int = 200

    def check(self) -> None:
        super().check()
        if self.n <= 0 or self.doc_chars <= 0:
            raise OptionError(f"agr n and doc_chars must be positive, not {self.n}, {self.doc_chars}")


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    o = options or Options()

    def expand(ctx: Context) -> list[str]:
        client, structure = ctx.client, ctx.structure().text()
        keywords = ask_texts(client, KEYWORDS.format(query=query), 80)[:8]
        ctx.explain["1. keywords"] = [", ".join(keywords)]
        analysis = ask_text(client, ANALYSIS.format(structure=structure, query=query, keywords=", ".join(keywords)),
                            o.max_tokens)
        ctx.explain["2. analysis"] = [analysis]
        docs = listing(ctx.first_pass(o.n), o.doc_chars)
        candidates = ask_texts(client, CANDIDATES.format(structure=structure, query=query, analysis=analysis,
                                                         documents=docs, words=o.words), 2 * o.max_tokens)[:2]
        ctx.explain["3. candidates"] = [f"{i}. {c}" for i, c in enumerate(candidates, 1)]
        refined = ask_text(client, REFINE.format(query=query, analysis=analysis, words=o.words,
                                                 candidates="\n".join(f"[{i}] {c}" for i, c in
                                                                      enumerate(candidates, 1))), o.max_tokens)
        ctx.trace["agr"] = {"keywords": keywords, "analysis": analysis, "candidates": candidates}
        return [", ".join(keywords), refined]

    return run(conn, skb, query, k, o, "agr", expand)
