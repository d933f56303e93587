"""The values a program's slots are bound to for one question.

`:query`, `:query_vector` and `:answer_type` (the category's node type) cost no LLM call. The
entity slots do: the LLM names the entities of the question (KAR's entity parsing, so both methods
share the cached reply), and each is linked to a node the way KAR links them (the node of that very
name, else the nearest document of its type). They are asked for only when the program uses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import psycopg

from stark_pg.llm.concurrency import current, ordered_map
from stark_pg.retrieve.agent.sandbox import ENTITY_SLOTS, Program
from stark_pg.retrieve.expand import structure
from stark_pg.retrieve.expand import kar


@dataclass
class SlotSource:
    """What binding needs beyond the question: the LLM client (None: entity slots stay NULL)."""

    client: object | None
    model: str
    match_pool: int = 10
    parsed: dict = field(default_factory=dict)     # question -> its entities, asked ahead by `prefetch`

    def prefetch(self, conn: psycopg.Connection, skb_id: int, queries: list[str]) -> None:
        """Ask the LLM for the entities of `queries` up to --workers at once (stark_pg.llm.concurrency),
        before a program is run on them one by one: each question's parse is then taken (once) from
        `parsed`, and the requests and meters are those of a sequential run. A question whose parse
        fails is left to `bind_values`, which fails the same way."""
        if self.client is None or current() <= 1:
            return
        shape = structure(conn, skb_id)

        def parse(query: str):
            try:
                return kar.parse_entities(self.client, shape, query, ENTITY_SLOTS)
            except Exception:
                return None
        pending = list(dict.fromkeys(q for q in queries if q not in self.parsed))
        for query, entities in zip(pending, ordered_map(parse, pending)):
            if entities is not None:
                self.parsed[query] = entities


def bind_values(conn: psycopg.Connection, skb: str, skb_id: int, query: str, vector: np.ndarray,
                answer_type: str | None, program: Program, source: SlotSource) -> dict:
    values: dict = {"query": query, "query_vector": vector, "answer_type": answer_type}
    if not program.uses_entities or source.client is None:
        return values
    shape = structure(conn, skb_id)
    entities = source.parsed.pop(query, None)
    if entities is None:
        entities = kar.parse_entities(source.client, shape, query, ENTITY_SLOTS)
    if not entities:
        return values
    options = kar.Options(model=source.model, match_pool=source.match_pool)
    anchors = [a for a in kar.match_entities(conn, skb, query, vector, entities, shape.type_names, options)
               if not a["pseudo"]]
    for i, anchor in enumerate(anchors[:ENTITY_SLOTS], 1):
        values[f"entity_{i}"] = anchor["entity"]
        values[f"entity_{i}_type"] = anchor["type"] or anchor.get("node_type")
        values[f"entity_{i}_node"] = anchor["node_id"]
    return values


def shown(values: dict) -> dict:
    """The bound values for a trace: the vector abbreviated."""
    return {k: (f"<vector of {len(v)} dimensions>" if isinstance(v, np.ndarray) else v) for k, v in values.items()}
