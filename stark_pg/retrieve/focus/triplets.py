"""Step 1 of 4StepFocus: the LLM writes the question as triplets over the SKB's schema.

The prompt lists the SKB's node types and relations (read from the database, each relation with the
node types it joins) and a few examples built from the SKB's own entities, so the same prompt serves
any SKB. The reply is JSON validated by pydantic (`TripletReply`): triplets whose ends are either
entities named in the question (constants) or unknowns written `?x1`, `?x2`, ... (variables), each
with a node type, and the target variable the question asks for. Small models stray from the format,
so the schema accepts common variants (a triplet as a 3-item list, `x1` or `|x1|` for `?x1`) and
`client.chat_json` makes one repair request when the reply does not fit at all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import psycopg
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from stark_pg.llm import LLMClient
from stark_pg.resources import queries as sql

SYSTEM = ("You translate questions about a knowledge base into triplets (head, relation, tail) for a graph "
          "search. You reply with JSON only.")

_VARIABLE = re.compile(r"^\|?\s*\??\s*(x\d+)\s*\|?$", re.IGNORECASE)


def variable_name(term: str) -> str | None:
    """'x1' for '?x1', '|x1|', 'x1' or '?X1'; '?name' for other terms starting with '?'; None for a constant."""
    term = term.strip()
    match = _VARIABLE.match(term)
    if match:
        return match.group(1).lower()
    if term.startswith("?") and len(term) > 1:
        return term[1:].strip().lower()
    return None


class RawTriplet(BaseModel):
    """One triplet as the LLM wrote it. Types and relations are checked against the SKB later
    (unknown ones are ignored there, as the paper does), so any string is accepted here."""

    model_config = ConfigDict(extra="ignore")

    head: str
    relation: str | None = None
    tail: str
    head_type: str | None = None
    tail_type: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, data):
        if isinstance(data, (list, tuple)) and len(data) == 3:
            return {"head": data[0], "relation": data[1], "tail": data[2]}
        return data

    @field_validator("head", "tail", mode="before")
    @classmethod
    def _end(cls, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            raise ValueError("head and tail must be non-empty strings: an entity name or ?x1, ?x2, ...")
        return value.strip().strip("'\"").strip()

    @field_validator("relation", "head_type", "tail_type", mode="before")
    @classmethod
    def _optional_text(cls, value):
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError("must be a string")
        return value.strip() or None


class TripletReply(BaseModel):
    """The LLM's answer: the target variable and the triplets."""

    model_config = ConfigDict(extra="ignore")

    target: str
    target_type: str | None = None
    triplets: list[RawTriplet] = []

    @field_validator("target", mode="before")
    @classmethod
    def _target(cls, value):
        if not isinstance(value, str) or not value.strip():
            raise ValueError("target must be the variable the question asks for, e.g. \"?x1\"")
        name = variable_name(value) or variable_name("?" + value.strip().lstrip("?"))
        return "?" + name

    def as_json(self) -> dict:
        return self.model_dump()


@dataclass(frozen=True)
class Schema:
    """What the prompt tells the LLM about an SKB."""

    node_types: tuple[str, ...]
    relations: tuple[tuple[str, str, str], ...]       # (relation, head type, tail type)
    examples: tuple[tuple[str, dict], ...]            # (question, reply JSON)

    @property
    def relation_names(self) -> set[str]:
        return {r for r, _, _ in self.relations}


def schema(conn: psycopg.Connection, skb_id: int) -> Schema:
    """The SKB's node types, relations and examples; computed once per SKB load (in-process cache)."""
    version = sql().focus_skb_version(conn, skb_id=skb_id)
    return _schema(conn, skb_id, version)


_SCHEMAS: dict[tuple, Schema] = {}       # (database, skb_id, loaded_at) -> Schema


def _schema(conn: psycopg.Connection, skb_id: int, version: str | None) -> Schema:
    key = (conn.info.dsn, skb_id, version)
    if key in _SCHEMAS:
        return _SCHEMAS[key]
    node_types = tuple(row[0] for row in sql().focus_node_types(conn, skb_id=skb_id))
    relations = tuple((r, h, t) for r, h, t, _ in sql().focus_relation_types(conn, skb_id=skb_id))
    examples = tuple(_examples(conn, skb_id, relations))
    _SCHEMAS[key] = Schema(node_types, relations, examples)
    return _SCHEMAS[key]


def _examples(conn: psycopg.Connection, skb_id: int, relations) -> list[tuple[str, dict]]:
    """Up to three examples from real edges of the SKB: one hop, two hops, one hop inside a longer
    question whose descriptive part is not a triplet."""
    names = list(dict.fromkeys(r for r, h, t in relations if h != t))
    rows = {r[0]: r for r in sql().focus_example_edges(conn, skb_id=skb_id, relations=names)}
    ordered = [rows[n] for n in names if n in rows]
    out: list[tuple[str, dict]] = []
    if ordered:
        rel, head, head_type, tail, tail_type, _, _ = ordered[0]
        out.append((f"Which {head_type} is linked to the {tail_type} {tail} by the relation '{rel}'?",
                    {"target": "?x1", "triplets": [{"head": "?x1", "head_type": head_type, "relation": rel,
                                                    "tail": tail, "tail_type": tail_type}]}))
    for row in ordered[1:]:                   # the first edge that has a second hop onwards
        rel, head, head_type, tail, tail_type, src, dst = row
        hop = list(sql().focus_second_hop(conn, skb_id=skb_id, node_id=dst, exclude_type=tail_type,
                                          exclude_node=src))
        if hop:
            rel2, name2, type2 = hop[0]
            out.append((f"Find a {head_type} linked by '{rel}' to some {tail_type} that is linked to {name2} "
                        f"by '{rel2}'.",
                        {"target": "?x1", "triplets": [
                            {"head": "?x1", "head_type": head_type, "relation": rel, "tail": "?x2",
                             "tail_type": tail_type},
                            {"head": "?x2", "head_type": tail_type, "relation": rel2, "tail": name2,
                             "tail_type": type2}]}))
            break
    if len(ordered) > 2:
        rel, head, head_type, tail, tail_type, _, _ = ordered[2]
        out.append((f"I am looking for a well-studied {tail_type}, described in recent work, to which the "
                    f"{head_type} {head} is linked by '{rel}'.",
                    {"target": "?x1", "triplets": [{"head": head, "head_type": head_type, "relation": rel,
                                                    "tail": "?x1", "tail_type": tail_type}]}))
    return out


def _pairs(relations):
    """Relations for the prompt: a relation stored both ways between two types is listed once, with <->."""
    kinds = set(relations)
    seen = set()
    for r, h, t in relations:
        if (r, t, h) in seen:
            continue
        seen.add((r, h, t))
        yield r, h, "<->" if h != t and (r, t, h) in kinds else "->", t


def messages(query: str, skb_schema: Schema, n_examples: int = 3) -> list[dict]:
    """The chat messages asking for the triplets of `query`."""
    relations = "\n".join(f"- {r} ({h} {arrow} {t})" for r, h, arrow, t in _pairs(skb_schema.relations))
    examples = "\n\n".join(f"Question: {q}\nJSON: {json.dumps(a)}" for q, a in skb_schema.examples[:n_examples])
    text = (
        f"Node types: {', '.join(skb_schema.node_types)}\n"
        f"Relations (head type -> tail type):\n{relations}\n\n"
        "Write the question as triplets. Each triplet is {\"head\", \"head_type\", \"relation\", \"tail\", "
        "\"tail_type\"}. A head or tail is either an entity named in the question, written exactly as in the "
        "question, or an unknown entity written ?x1, ?x2, ... (the same unknown keeps its name). Every head "
        "and tail gets a node type from the list; every relation comes from the list. \"target\" is the "
        "unknown the question asks for. Only write triplets the question states; leave out descriptions "
        "that are not relations to named or unknown entities. Reply with JSON only: "
        "{\"target\": \"?x1\", \"triplets\": [...]}\n\n"
        + (f"{examples}\n\n" if examples else "")
        + f"Question: {query}\nJSON:")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


def extract(conn: psycopg.Connection, skb_id: int, query: str, client: LLMClient, *, n_examples: int = 3,
            max_tokens: int = 400) -> TripletReply:
    """The LLM's triplets for `query` (LLMInvalidOutput if the reply fits the schema neither time)."""
    reply, _ = client.chat_json(messages(query, schema(conn, skb_id), n_examples), TripletReply,
                                max_tokens=max_tokens)
    return reply
