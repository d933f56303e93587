"""Which candidates the verifiers are asked about when a candidate set is large.

STaRK verifies every candidate of the relational set against the textual requirements; with a large set
that is most of the LLM calls of a question. `--prefilter N` asks about at most N candidates (the gold
included): the others are those whose documents are nearest the requirements by the embedding model
(cosine over the same clipped text the verifiers read). A candidate left out is not an answer, so the
prefilter can only lose answers: `benchmarks/synth_prefilter_recall.py` measures how many, on items
whose every candidate was verified.
"""

from __future__ import annotations

import numpy as np

from stark_pg.embed import encode


def shortlist(requirements: list[str], documents: dict[int, str], candidates: list[int], keep: int,
              model: str | None = None) -> list[int]:
    """The `keep` candidates whose documents are nearest the requirements, in the candidates' order."""
    if keep >= len(candidates):
        return list(candidates)
    if keep <= 0:
        return []
    vectors = encode(["; ".join(requirements)] + [documents.get(c, "") for c in candidates], model)
    similarity = vectors[1:] @ vectors[0]
    nearest = set(np.argsort(-similarity, kind="stable")[:keep].tolist())
    return [c for i, c in enumerate(candidates) if i in nearest]
