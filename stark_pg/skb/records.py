"""What every loader produces, whatever its source format: nodes, edges and queries, each with its position.

A loader is an `SkbSource`. Its iterators yield a *position* with each record (a line number,
or a description such as "key 17"), which is turned into a readable origin only when something
is wrong, so that the common path stays cheap for millions of rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol


@dataclass(slots=True)
class Node:
    node_id: int
    type: str
    name: str | None
    fields: dict[str, str] = field(default_factory=dict)
    attrs: dict | None = None


@dataclass(slots=True)
class Query:
    query_id: int
    split: str
    body: str
    answer_ids: list[int]


Position = int | str
"""A line number (int, 1-based) or a free description of where a record sits (str)."""


def origin(label: str, position: Position | None) -> str:
    """'nodes.jsonl line 3', 'node_info.pkl key 17' or just the label."""
    if position is None:
        return label
    if isinstance(position, int):
        return f"{label} line {position}"
    return f"{label} {position}"


class MissingIndex(LookupError):
    """A search needs an index (or a trained model) the SKB does not have yet: the message says which
    command builds it. Beside LoadError because both say what the SKB lacks, and both the retrieval
    methods and the models they load raise it."""


class LoadError(Exception):
    """Bad input: the message names the file and line (or key) at fault."""

    def __init__(self, message: str, label: str | None = None, position: Position | None = None):
        self.where = origin(label, position) if label else None
        super().__init__(f"{self.where}: {message}" if self.where else message)


INT8_MIN, INT8_MAX = -(1 << 63), (1 << 63) - 1


def check_int8(value: int, what: str, label: str | None, position: Position | None) -> int:
    """`value` if PostgreSQL's bigint can hold it (node and query ids are bigint), else a LoadError
    naming where it came from, rather than a driver error halfway through a COPY."""
    if not INT8_MIN <= value <= INT8_MAX:
        raise LoadError(f"{what} {value} is out of range (ids must fit a 64-bit signed integer)", label, position)
    return value


class SkbSource(Protocol):
    """A knowledge base to load. `nodes()` may be called once; ids in edges and answers refer to node ids."""

    format: str            # loader name stored with the SKB: bundle, stark-processed, synthetic, ...
    location: str          # path or description stored as the SKB's source
    default_name: str      # SKB name when the user gives none
    nodes_label: str       # how errors name the node input, e.g. "nodes.jsonl"
    edges_label: str
    queries_label: str
    meta: dict             # settings worth keeping with the SKB (generator seed, dataset, ...)

    def nodes(self) -> Iterator[tuple[Position, Node]]: ...

    def edges(self) -> Iterator[tuple[Position, int, str, int]]:
        """(position, src, relation, dst)."""
        ...

    def queries(self) -> Iterator[tuple[Position, Query]]: ...


class QuerySource(Protocol):
    """Queries only (STaRK QA files, human-generated CSVs): attached to an SKB that is already loaded."""

    format: str
    location: str
    queries_label: str

    def queries(self) -> Iterator[tuple[Position, Query]]: ...
