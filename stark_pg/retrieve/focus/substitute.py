"""Substitution (Algorithm 2 of 4StepFocus), compiled to one SQL statement over stark.edge.

The prepared triplets become a JSON problem for `stark.focus_substitute` (sql/functions/focus.sql),
which narrows every variable's candidate set round after round until none changes; Python only
builds the problem and reads the sets back. The statement is rendered with its literal values, so
the trace carries SQL a user can paste into psql to see exactly what the method computed.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

import psycopg
from psycopg import sql as pgsql

from stark_pg.resources import queries as sql

Term = str | tuple[int, ...]        # a variable's name, or the node ids a constant links to


@dataclass(frozen=True)
class Triplet:
    head: Term
    relation: str | None
    tail: Term

    def as_json(self) -> dict:
        end = (lambda t: t if isinstance(t, str) else list(t))
        return {"head": end(self.head), "relation": self.relation, "tail": end(self.tail)}


@dataclass(frozen=True)
class Problem:
    """Variables (name -> node type, None for any) and the triplets that constrain them."""

    variables: dict[str, str | None]
    triplets: tuple[Triplet, ...]

    def as_json(self) -> dict:
        return {"variables": dict(sorted(self.variables.items())), "triplets": [t.as_json() for t in self.triplets]}


@dataclass
class CandidateSet:
    variable: str
    node_type: str | None
    unconstrained: bool            # nothing narrowed it: every node of its type (ids not listed)
    size: int
    node_ids: list[int] | None


# stark.focus_substitute's default bound on one revision's estimated index reads (its `max_cost`)
MAX_COST = 50_000


@dataclass
class Substitution:
    sets: dict[str, CandidateSet]
    rounds: int
    sql: str                       # the statement as run, with its values inlined
    ms: float
    extra: dict = field(default_factory=dict)
    cut: int = 0                   # revisions left out over max_cost (0: the sets are exact)


def substitute(conn: psycopg.Connection, skb: str, problem: Problem, *, respect_relations: bool = False,
               directed: bool = False, max_cost: int | None = MAX_COST) -> Substitution:
    """Every variable's candidate set once the triplets are applied until no set changes. A revision
    between two sets estimated to read more than `max_cost` index entries is left out (None: none is):
    its set keeps its members, a superset of the exact one; `cut` counts them."""
    params = {"skb": skb, "problem": json.dumps(problem.as_json()), "respect_relations": respect_relations,
              "directed": directed, "max_cost": max_cost}
    started = time.perf_counter()
    rows = list(sql().focus_substitute(conn, **params))
    ms = (time.perf_counter() - started) * 1000
    sets = {r[0]: CandidateSet(r[0], r[1], bool(r[2]), int(r[3]), None if r[4] is None else [int(i) for i in r[4]])
            for r in rows}
    rounds = int(rows[0][5]) if rows else 0
    cut = int(rows[0][6]) if rows else 0
    return Substitution(sets, rounds, render(conn, sql().focus_substitute.sql, params), round(ms, 3), cut=cut)


def render(conn: psycopg.Connection, statement: str, params: dict) -> str:
    """A named statement (aiosql's text, `%(name)s` placeholders) with SQL literals in place of its
    parameters: what the trace shows and psql can run."""
    def literal(match: re.Match) -> str:
        return pgsql.Literal(params[match.group(1)]).as_string(conn)

    text = re.sub(r"%\(([A-Za-z_][A-Za-z0-9_]*)\)s", literal, statement)
    return " ".join(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("--"))
