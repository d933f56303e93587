"""Retrieval metrics as STaRK's evaluator defines them, computed from a (possibly truncated) ranking.

STaRK (stark_qa/evaluator.py, `Evaluator.evaluate`) builds a float32 score for every candidate:
nodes missing from the prediction get `min(scores) - 1`, i.e. all unranked candidates tie at the
bottom. It then calls torchmetrics' functional retrieval metrics (the version STaRK pins, 1.2.0)
over that full vector: hit@k, recall@k (found in top k / all answers), precision@k (found / k),
mrr, map (average precision over the whole ranking), rprecision (found in the top R / R, R = number
of answers) and ndcg@k. With no answers every metric is 0. (STaRK also accepts map@k, which
torchmetrics averages over the answers found in the top k only; we leave it out: it is not
monotone in the answers' ranks, so the bound below would not hold.)

Ties. torchmetrics orders by `argsort(descending=True)` (hit, recall, rprecision) or `topk`
(mrr, map, precision), neither stable on CPU: beyond ~16 elements tied scores come out in an order
that depends on the sort's internals and torch version, and the two functions disagree with each
other. That order cannot be reproduced, so:

- ndcg@k is exact: torchmetrics averages the gain over each group of tied scores (float32, as STaRK
  casts them), and so do we, including the bottom group of unranked candidates;
- the other metrics take tied ranked nodes in the order given (stark-pg's SQL orders by score,
  then node id) and put the unranked answers *last* of all `num_candidates` (ranks n-u+1..n).
  That is one order torch could produce, the least favourable, so each value is a lower bound of
  STaRK's, equal to it whenever no tie separates answers from non-answers. Past a truncated
  ranking the gap is at most (unranked answers) / (len(ranking) + 1) for mrr and map, and nothing
  for hit/recall/precision@k with k <= len(ranking) or rprecision with R <= len(ranking). With the
  full ranking and distinct scores every metric equals STaRK's.
- `num_candidates=None` means an unbounded candidate set: unranked answers never count, i.e. mrr
  and map get 0 from them (trec_eval's convention, the limit of the above for many candidates).

Every answer must be a candidate: STaRK silently drops answers outside its candidate list, so drop
them before calling (we only know the candidate count and refuse answers that cannot fit).

Not copied from torchmetrics: since PR #3104 (in the installed 1.9) recall, mrr, map and precision
ignore answers whose score is <= 0. STaRK's 1.2.0 had no such rule, metrics are rank-based, and
STaRK's fill value `min - 1` is often negative, so we do not reproduce it.
tests/comparison/test_metrics_torchmetrics.py checks all of the above against torchmetrics.
"""

from __future__ import annotations

import re
from typing import Hashable, Iterable, Sequence

import numpy as np

DEFAULT_METRICS = ("hit@1", "hit@3", "hit@5", "hit@10", "hit@20", "hit@50",
                   "recall@5", "recall@10", "recall@20", "recall@50", "recall@100",
                   "mrr", "map", "rprecision", "ndcg@10")
_NAME = re.compile(r"^(?:(hit|recall|ndcg|precision)@(\d+)|(mrr|map|rprecision))$")


def parse_metric(name: str) -> tuple[str, int | None]:
    """'ndcg@20' -> ('ndcg', 20), 'mrr' -> ('mrr', None); ValueError for names STaRK would not compute."""
    m = _NAME.match(name)
    k = int(m[2]) if m and m[2] else None
    if not m or k == 0:
        raise ValueError(f"unknown metrics ['{name}']: use hit@K, recall@K, precision@K, ndcg@K (K >= 1), "
                         "mrr, map, rprecision")
    return m[1] or m[3], k


def check_metric_names(names: Iterable[str]) -> list[str]:
    """The names as a list, after checking every one parses (one error listing all bad names)."""
    names, bad = list(names), []
    for name in names:
        try:
            parse_metric(name)
        except ValueError:
            bad.append(name)
    if bad:
        raise ValueError(f"unknown metrics {bad}: use hit@K, recall@K, precision@K, ndcg@K, mrr, map, rprecision")
    return names


def rank_of_answers(ranked_ids: Sequence[Hashable], answers: Iterable[Hashable]) -> list[int | None]:
    """The 1-based rank of each answer (in the answers' order) in the ranking, None where unranked."""
    position: dict[Hashable, int] = {}
    for i, node in enumerate(ranked_ids, start=1):
        position.setdefault(node, i)
    return [position.get(a) for a in answers]


answer_ranks = rank_of_answers  # the name the runner uses


def evaluate(ranked: Sequence[Hashable], answers: Iterable[Hashable], names: Sequence[str] = DEFAULT_METRICS, *,
             scores: Sequence[float] | None = None, num_candidates: int | None = None) -> dict[str, float]:
    """Every metric in `names` for one query.

    `ranked` is best first, `scores` (optional, non-increasing) its scores: they only decide which
    nodes tie, which matters for ndcg alone (None: no ties). `num_candidates` is the size of the
    candidate set STaRK scores (None: unbounded); see the module docstring for what both change.
    """
    specs = [(name, *parse_metric(name)) for name in names]
    ranked = list(ranked)
    relevant = set(answers)
    if len(set(ranked)) != len(ranked):
        raise ValueError("the ranking lists a node more than once")
    n, depth, n_rel = num_candidates, len(ranked), len(relevant)
    is_answer = np.fromiter((node in relevant for node in ranked), dtype=bool, count=depth)
    unranked = n_rel - int(is_answer.sum())
    if n is not None and depth + unranked > n:
        raise ValueError(f"{depth} ranked nodes and {unranked} unranked answers do not fit in {n} candidates: "
                         "drop answers that are not candidates (STaRK ignores them)")
    s32 = None
    if scores is not None:
        s32 = np.asarray(scores, dtype=np.float32)  # STaRK's torch.FloatTensor: float32 decides ties
        if s32.shape != (depth,) or not np.all(s32[1:] <= s32[:-1]):
            raise ValueError("scores must be one per ranked node, non-increasing (best first), not NaN")

    # 1-based positions of all answers in the full ranking; unranked ones last (or nowhere if unbounded)
    pos = np.flatnonzero(is_answer) + 1.0
    if n is not None:
        pos = np.concatenate([pos, np.arange(n - unranked + 1, n + 1, dtype=float)])
    values: dict[str, float] = {}
    for name, kind, k in specs:
        if not n_rel:
            values[name] = 0.0
        elif kind == "hit":
            values[name] = float(np.any(pos <= k))
        elif kind == "recall":
            values[name] = float(np.count_nonzero(pos <= k) / n_rel)
        elif kind == "precision":
            values[name] = float(np.count_nonzero(pos <= k) / k)
        elif kind == "mrr":
            values[name] = float(1.0 / pos[0]) if pos.size else 0.0
        elif kind == "map":
            values[name] = float(np.sum(np.arange(1, pos.size + 1) / pos)) / n_rel
        elif kind == "rprecision":
            values[name] = float(np.count_nonzero(pos <= n_rel) / n_rel)
        else:
            values[name] = _ndcg(is_answer, s32, unranked, n, n_rel, k)
    return values


def _ndcg(is_answer: np.ndarray, s32: np.ndarray | None, unranked: int, n: int | None, n_rel: int, k: int) -> float:
    """ndcg@k with torchmetrics' tie rule: each group of equal scores shares its gain evenly."""
    depth = len(is_answer)
    cut = k if n is None else min(k, n)
    gain_to = np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(2, cut + 2)))])  # [p]: positions 1..p
    sizes, gains = np.ones(depth), is_answer.astype(float)
    if s32 is not None and depth:  # merge runs of equal scores
        group = np.concatenate([[0], np.cumsum(s32[1:] != s32[:-1])])
        sizes, gains = np.bincount(group), np.bincount(group, weights=gains)
    if n is not None and n > depth:  # the unranked candidates: one tie group scored min - 1 (float32)
        bottom = s32 is not None and depth and np.float32(s32[-1]) - np.float32(1) == s32[-1]
        if bottom:  # |scores| >= 2**24: min - 1 rounds back to min, so the group merges with the last one
            sizes[-1], gains[-1] = sizes[-1] + n - depth, gains[-1] + unranked
        else:
            sizes, gains = np.append(sizes, n - depth), np.append(gains, unranked)
    ends = np.cumsum(sizes).astype(int)
    starts = ends - sizes.astype(int)
    dcg = float(np.sum(gains / sizes * (gain_to[np.minimum(ends, cut)] - gain_to[np.minimum(starts, cut)])))
    return dcg / float(gain_to[min(n_rel, cut)])


def summarize(per_query: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean of each metric over queries, as STaRK reports them; default metrics first, in order.

    Every query must carry the same metrics: a mean over different subsets would mix definitions.
    """
    if not per_query:
        return {}
    names = set(per_query[0])
    if any(set(q) != names for q in per_query):
        raise ValueError("the queries do not all carry the same metrics")
    order = sorted(names, key=lambda n: (DEFAULT_METRICS.index(n) if n in DEFAULT_METRICS else len(DEFAULT_METRICS), n))
    return {name: float(np.mean([q[name] for q in per_query])) for name in order}


mean_metrics = summarize  # the name the runner and `stark-pg score` use
