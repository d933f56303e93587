"""The LLM reranker (STaRK's VSS+LLM reranker): an LLM scores each candidate's relevance in [0, 1].

Shared by `vss+rerank`, `fusion+rerank` and `4stepfocus`. Each candidate's document (stark.render_document, cut to
`doc_chars` characters) goes to the LLM with the query; the reply is a JSON object validated by
pydantic (one repair request, stark_pg.llm). Candidates are then sorted by the LLM's score plus
`sim_weight` times their standing in the incoming order ((n - i) / n for the i-th of n), as STaRK's
reranker combines them (its default weight is 0.1); ties keep the incoming order. A larger weight
trusts the first stage more, which a weak LLM needs. Two ways to ask:

- per candidate (default): one short request per candidate, `{"score": s}` back. The query comes
  first in the prompt, so a server with prompt caching (llama.cpp) reuses that prefix.
- batch: all candidates numbered in one request, `{"scores": [s1, ..., sn]}` back. One call
  instead of n, at the price of a long prompt (mind the model's context: n * doc_chars).

A reply that stays invalid after the repair scores 0 for its candidate(s) and is listed under
`invalid` in the trace; a call that fails (timeout, HTTP error, cache miss under cache=only)
raises, so the evaluation records the query as failed.
"""

from __future__ import annotations

import time
from typing import Annotated

import psycopg
from pydantic import BaseModel, Field, create_model, model_validator

from stark_pg.llm import LLMClient, LLMInvalidOutput, client_from_options
from stark_pg.llm.concurrency import ordered_map
from stark_pg.options import OptionError
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, Ranking

DOC_CHARS = 800
SIM_WEIGHT = 0.1       # STaRK's LLMReranker default
SYSTEM = ("You rate documents from a knowledge base as answers to a search query. "
          "You reply with JSON only.")

Score = Annotated[float, Field(ge=0.0, le=1.0)]


class Relevance(BaseModel):
    """One candidate's score. A bare number or a numeric string is accepted as the score."""

    score: Score

    @model_validator(mode="before")
    @classmethod
    def _bare_number(cls, data):
        if isinstance(data, (int, float, str)) and not isinstance(data, bool):
            return {"score": data}
        return data


def batch_model(n: int) -> type[BaseModel]:
    """`{"scores": [...]}` with exactly n scores in [0, 1]."""
    model = create_model(f"Relevances{n}", scores=(Annotated[list[Score], Field(min_length=n, max_length=n)], ...))
    return model


def documents(conn: psycopg.Connection, skb: str, node_ids: list[int], doc_chars: int = DOC_CHARS,
              with_relations: bool = False) -> dict[int, str]:
    """Each node's document, cut to doc_chars characters (an ellipsis marks a cut)."""
    rows = sql().rerank_documents(conn, skb=skb, node_ids=list(node_ids), with_relations=with_relations)
    return {int(node_id): _clip(text or "", doc_chars) for node_id, text in rows}


def check_rerank(doc_chars: int, sim_weight: float) -> None:
    """The reranking settings of vss+rerank and 4stepfocus, checked by their Options (and by `rerank`
    itself, which other code calls too)."""
    if doc_chars <= 0:
        raise OptionError(f"doc_chars must be positive, not {doc_chars}")
    if sim_weight < 0:
        raise OptionError(f"sim_weight must be 0 or more, not {sim_weight}")


def rerank(conn: psycopg.Connection, skb: str, query: str, node_ids: list[int], client: LLMClient, *,
           doc_chars: int = DOC_CHARS, batch: bool = False, with_relations: bool = False, sim_weight: float = SIM_WEIGHT,
           trace: dict | None = None) -> list[Hit]:
    """`node_ids` sorted by the LLM's relevance score plus `sim_weight` times their standing in the
    given order (the Hit's score), ties in their given order.

    If `trace` is given, `trace["rerank"]` receives the prompt style, the per-candidate scores and
    the candidates whose reply was invalid.
    """
    check_rerank(doc_chars, sim_weight)
    node_ids = list(dict.fromkeys(int(n) for n in node_ids))
    if not node_ids:
        return []
    docs = documents(conn, skb, node_ids, doc_chars, with_relations)
    texts = [docs.get(n, f"(node {n} is not in {skb})") for n in node_ids]
    invalid: list[int] = []
    if batch:
        scores = _score_batch(client, query, texts)
        if scores is None:
            scores, invalid = [0.0] * len(node_ids), list(node_ids)
    else:
        scores = []
        # one request per candidate, up to --workers at once (stark_pg.llm.concurrency), in order
        for node_id, score in zip(node_ids, ordered_map(lambda text: _score_one(client, query, text), texts)):
            if score is None:
                invalid.append(node_id)
            scores.append(score or 0.0)
    n = len(node_ids)
    combined = [scores[i] + sim_weight * (n - i) / n for i in range(n)]
    order = sorted(range(n), key=lambda i: (-combined[i], i))
    if trace is not None:
        trace["rerank"] = {"prompt": "batch" if batch else "per-candidate", "doc_chars": doc_chars,
                           "with_relations": with_relations, "sim_weight": sim_weight,
                           "scores": [[node_ids[i], scores[i]] for i in range(len(node_ids))],
                           "invalid": invalid}
    return [Hit(node_ids[i], combined[i]) for i in order]


def rerank_head(conn: psycopg.Connection, skb: str, query: str, first: Ranking, k: int, options, method: str,
                stage: str, offset: float | None = None) -> Ranking:
    """A first stage's top `options.k_max` reranked by the LLM (`rerank`), the rest of its ranking below.

    What `vss+rerank` and `fusion+rerank` share; `options` carries the LLM (llm, base_url, cache) and
    the reranker's settings (k_max, doc_chars, batch, relations, sim_weight). Reranked nodes score
    `offset` + their combined score, the rest keep the first stage's: with `offset` None, one more than
    the best score left below, so scores fall as ranks rise whatever the first stage's scale. The trace
    holds the first stage's under `stage`, each candidate's LLM score and the LLM meter (`llm`)."""
    client = client_from_options(conn, llm=options.llm, base_url=options.base_url, cache=options.cache)
    head, rest = first.hits[:options.k_max], first.hits[options.k_max:]
    trace = {"method": method, stage: first.trace, "k_max": options.k_max}
    started = time.perf_counter()
    with client.metered() as meter:
        reranked = rerank(conn, skb, query, [h.node_id for h in head], client, doc_chars=options.doc_chars,
                          batch=options.batch, with_relations=options.relations,
                          sim_weight=options.sim_weight, trace=trace)
    trace["rerank_ms"] = round((time.perf_counter() - started) * 1000, 3)
    trace["llm"] = meter.as_dict()
    if offset is None:
        offset = (max(h.score for h in rest) + 1.0) if rest else 0.0
    hits = [Hit(h.node_id, offset + h.score) for h in reranked] + rest
    return Ranking(hits[:k], trace)


def _score_one(client: LLMClient, query: str, document: str) -> float | None:
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Query: {query}\n\nDocument:\n{document}\n\n"
                                            "How well does this document answer the query? Score it from 0 "
                                            "(unrelated) to 1 (exactly what the query asks for). Reply with "
                                            'only {"score": <number>}.'}]
    try:
        value, _ = client.chat_json(messages, Relevance, max_tokens=24)
    except LLMInvalidOutput:
        return None
    return float(value.score)


def _score_batch(client: LLMClient, query: str, documents_: list[str]) -> list[float] | None:
    n = len(documents_)
    listing = "\n\n".join(f"[{i}]\n{text}" for i, text in enumerate(documents_, 1))
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Query: {query}\n\nCandidate documents:\n\n{listing}\n\n"
                                            f"Score each of the {n} candidates, in the order given, from 0 "
                                            "(unrelated) to 1 (exactly what the query asks for). Reply with only "
                                            f'{{"scores": [<{n} numbers>]}}.'}]
    try:
        value, _ = client.chat_json(messages, batch_model(n), max_tokens=16 + 8 * n)
    except LLMInvalidOutput:
        return None
    return [float(s) for s in value.scores]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " ..."
