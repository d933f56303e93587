"""What type of node the question asks for, as probabilities over the SKB's node types.

The paper takes the target variable's type from the LLM and ranks every node of that type first.
A small model names it wrongly often enough that this costs more than it gains (docs/4stepfocus.md
gives the figures), so the type here is a soft preference: the ranking adds `type_weight` times the type's
probability to each node's cosine similarity (sql/functions/focus_rank.sql). Two sources are mixed:

- the LLM's type (share `llm_type_share`, 0.5 by default);
- the vote of the nearest training queries (the rest): each of the `type_k` queries of `type_split`
  most similar to the question votes for the types of its answers (stark.answer_type_votes), which
  names the answers' type more often than a small LLM does.

`llm_type_share=1` uses the LLM alone (no training queries needed); a `type_weight` of 2 or more
ranks every node of the most probable type above every other node, as the paper does.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataclasses import dataclass, field

import numpy as np
import psycopg

from stark_pg.embed import encode
from stark_pg.options import OptionError
from stark_pg.resources import queries as sql


@dataclass
class TypeBelief:
    probabilities: dict[str, float]                       # node type -> probability, summing to 1 (or empty)
    llm_type: str | None
    votes: list[tuple[str, float]] = field(default_factory=list)   # (type, vote share), best first

    @property
    def best(self) -> str | None:
        """The most probable type (the LLM's on a tie): the target variable's type for substitution."""
        if not self.probabilities:
            return None
        return max(self.probabilities, key=lambda t: (self.probabilities[t], t == self.llm_type, t))

    def as_json(self) -> dict:
        return {"best": self.best, "llm_type": self.llm_type,
                "probabilities": {t: round(p, 4) for t, p in sorted(self.probabilities.items(), key=lambda x: -x[1])},
                "votes": [[t, round(s, 4)] for t, s in self.votes]}


def embed_split(conn: psycopg.Connection, skb: str, split: str, model: str) -> int:
    """Embeds the split's queries that have no fresh vector (stark.query_vector); how many it did."""
    stale = list(sql().stale_query_vectors(conn, skb=skb, split=split, model=model))
    if not stale:
        return 0
    vectors = encode([body for _, body in stale], model)
    with conn.transaction():
        sql().store_query_vector(conn, [{"skb": skb, "query_id": query_id, "model": model, "body": body, "vec": vec}
                                        for (query_id, body), vec in zip(stale, vectors)])
    return len(stale)


def votes(conn: psycopg.Connection, skb: str, query: str, vector: np.ndarray, *,
          split: str | Sequence[str] = "train", k: int = 10, model: str) -> list[tuple[str, float]]:
    """(type, share of the votes) of the k nearest queries of `split` (one split, several in a sequence or
    comma-separated: a model trained on train,synthetic votes with both), best first; [] if none."""
    splits = split.split(",") if isinstance(split, str) else list(split)
    for one in splits:
        embed_split(conn, skb, one, model)
    return [(t, float(s)) for t, s, _ in sql().answer_type_votes(conn, skb=skb, embedding=vector, splits=splits, k=k,
                                                                  model=model, question=query)]


def check_share(llm_type_share: float) -> None:
    if not 0.0 <= llm_type_share <= 1.0:
        raise OptionError(f"4stepfocus llm_type_share must be between 0 and 1, not {llm_type_share}")


def belief(llm_type: str | None, voted: list[tuple[str, float]], llm_type_share: float = 0.5) -> TypeBelief:
    """The mixture; a source that says nothing leaves the whole mass to the other."""
    check_share(llm_type_share)
    llm_share = llm_type_share if voted else 1.0
    if llm_type is None:
        llm_share = 0.0
    probabilities: dict[str, float] = {}
    for t, share in voted:
        probabilities[t] = probabilities.get(t, 0.0) + (1.0 - llm_share) * share
    if llm_type is not None and llm_share > 0:
        probabilities[llm_type] = probabilities.get(llm_type, 0.0) + llm_share
    return TypeBelief({t: p for t, p in probabilities.items() if p > 0}, llm_type, voted)
