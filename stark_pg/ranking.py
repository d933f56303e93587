"""What a search returns: ranked nodes and a trace of how they were found.

It lives below every package that makes or reads one (the retrieval methods, the models they score
with, the evaluation that stores them), so none of them imports another just for the type.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Hit:
    node_id: int
    score: float


@dataclass
class Ranking:
    """Ranked nodes, best first, with a trace of how they were found (SQL, candidate counts, ...)."""

    hits: list[Hit]
    trace: dict = field(default_factory=dict)

    @property
    def node_ids(self) -> list[int]:
        return [h.node_id for h in self.hits]
