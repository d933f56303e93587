"""Query categories of the agent: the node type a question asks for.

The AvaTaR line asks the LLM to group the training questions (12 groups in the Agent Retriever
paper). Here a question's category is the answer type the nearest training questions vote for
(`stark.answer_type_votes`, which names the answers' type more often than a small LLM does): no LLM call, the same at training and at test time (a training question does not vote
for itself), and each category's program can lean on its type. Types with too few training
questions share the category `any`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import psycopg

from stark_pg.retrieve.focus.answer_type import votes

ANY = "any"


def voted_type(conn: psycopg.Connection, skb: str, query: str, vector: np.ndarray, model: str,
               splits: Sequence[str] = ("train",), k: int = 10) -> str | None:
    """The type the nearest questions of `splits` (those the agent was trained from) vote for."""
    voted = votes(conn, skb, query, vector, split=splits, k=k, model=model)
    return voted[0][0] if voted else None


def category_of(voted: str | None, categories) -> str:
    return voted if voted in categories else ANY
