"""Retrieval metrics exactly as STaRK's evaluator computes them (torchmetrics' retrieval functions).

STaRK scores every candidate node and hands the full score vector to torchmetrics, so every metric
is defined over the full ranking of all candidates. stark-pg receives a ranking truncated at some
depth (the best `depth` nodes, best first). Within that depth everything is exact; a relevant node
that is not in the ranking is treated as ranked after every ranked node, at a position we do not
know, which means:

- hit@k, recall@k, ndcg@k and rprecision: exact whenever k (or R, the number of answers) is at most
  the ranking's length; the unranked answer counts in recall's denominator (all answers do);
- mrr: 1 / rank of the first answer in the ranking, 0 if none is ranked (the full ranking would give
  at most 1 / (depth + 1));
- map: the mean over *all* answers of precision at each answer's rank, unranked answers adding 0
  (they would add at most their count / (depth + 1)).

Ties keep the order of the ranking given (stark-pg's SQL breaks ties by node id). Scores play no part:
torchmetrics (1.x) also drops relevant nodes whose score is not positive, which never happens with
STaRK's positive similarity scores and which a rank-based definition has no reason to copy.
tests/comparison/test_metrics_torchmetrics.py checks all of this against torchmetrics.
"""

from __future__ import annotations

import math
import re
from typing import Hashable, Iterable, Sequence

DEFAULT_METRICS = ("hit@1", "hit@3", "hit@5", "hit@10", "hit@20", "hit@50",
                   "recall@5", "recall@10", "recall@20", "recall@50", "recall@100",
                   "mrr", "map", "rprecision", "ndcg@10")
_NAME = re.compile(r"^(hit|recall|ndcg|precision)@(\d+)$|^(mrr|map|rprecision)$")


def check_metric_names(names: Iterable[str]) -> list[str]:
    names = list(names)
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise ValueError(f"unknown metrics {bad}: use hit@K, recall@K, ndcg@K, precision@K, mrr, map, rprecision")
    return names


def answer_ranks(ranked: Sequence[Hashable], answers: Iterable[Hashable]) -> list[int | None]:
    """The 1-based rank of each answer in the ranking, None where it is not ranked."""
    position = {}
    for i, node in enumerate(ranked, start=1):
        position.setdefault(node, i)
    return [position.get(a) for a in answers]


def evaluate(ranked: Sequence[Hashable], answers: Iterable[Hashable],
             names: Sequence[str] = DEFAULT_METRICS) -> dict[str, float]:
    """Every metric in `names` for one query: `ranked` best first, `answers` the relevant nodes."""
    relevant = set(answers)
    ranks = sorted(r for r in answer_ranks(ranked, relevant) if r is not None)
    n_rel = len(relevant)
    values: dict[str, float] = {}
    for name in check_metric_names(names):
        kind, _, k_text = name.partition("@")
        k = int(k_text) if k_text else None
        found = sum(1 for r in ranks if k is None or r <= k)
        if not n_rel:
            values[name] = 0.0
        elif kind == "hit":
            values[name] = float(found > 0)
        elif kind == "recall":
            values[name] = found / n_rel
        elif kind == "precision":
            values[name] = found / k
        elif kind == "mrr":
            values[name] = 1.0 / ranks[0] if ranks else 0.0
        elif kind == "map":
            values[name] = sum((i + 1) / r for i, r in enumerate(ranks)) / n_rel
        elif kind == "rprecision":
            values[name] = sum(1 for r in ranks if r <= n_rel) / n_rel
        elif kind == "ndcg":
            dcg = sum(1.0 / math.log2(r + 1) for r in ranks if r <= k)
            ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(n_rel, k) + 1))
            values[name] = dcg / ideal
    return values


def mean_metrics(per_query: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean of each metric over queries (STaRK reports means), default metrics first in their order."""
    if not per_query:
        return {}
    names = sorted(per_query[0], key=lambda n: (DEFAULT_METRICS.index(n) if n in DEFAULT_METRICS else 99, n))
    return {name: sum(q[name] for q in per_query) / len(per_query) for name in names}
