"""Our metrics against torchmetrics' retrieval functions applied the STaRK way (a score for every candidate)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchmetrics.functional import retrieval as tm

from stark_pg.eval.metrics import DEFAULT_METRICS, answer_ranks, evaluate, mean_metrics


def stark_metric(name: str, scores: torch.Tensor, target: torch.Tensor) -> float:
    """What STaRK's Evaluator.evaluate computes for one metric name."""
    kind, _, k = name.partition("@")
    k = int(k) if k else None
    fn = {"hit": tm.retrieval_hit_rate, "recall": tm.retrieval_recall, "ndcg": tm.retrieval_normalized_dcg,
          "precision": tm.retrieval_precision}
    if kind == "mrr":
        return float(tm.retrieval_reciprocal_rank(scores, target))
    if kind == "map":
        return float(tm.retrieval_average_precision(scores, target))
    if kind == "rprecision":
        return float(tm.retrieval_r_precision(scores, target))
    return float(fn[kind](scores, target, top_k=k))


def random_query(rng: np.random.Generator, n_candidates: int):
    scores = rng.uniform(0.01, 1.0, n_candidates)             # positive, distinct (with probability 1)
    n_answers = int(rng.choice([1, 1, 2, 3, 5, 20]))
    answers = rng.choice(n_candidates, size=n_answers, replace=False)
    return scores, answers


@pytest.mark.parametrize("seed", range(300))
def test_full_rankings_agree_with_torchmetrics(seed):
    rng = np.random.default_rng(seed)
    scores, answers = random_query(rng, int(rng.integers(25, 400)))
    ranked = list(np.argsort(-scores, kind="stable"))
    ours = evaluate(ranked, answers.tolist(), DEFAULT_METRICS + ("precision@5", "ndcg@1", "ndcg@50"))
    target = torch.zeros(len(scores), dtype=torch.bool)
    target[torch.as_tensor(answers)] = True
    for name, value in ours.items():
        assert value == pytest.approx(stark_metric(name, torch.as_tensor(scores), target), abs=1e-6), name


@pytest.mark.parametrize("seed", range(100))
def test_truncated_rankings_are_exact_within_their_depth(seed):
    """Only the top `depth` nodes known: hit/recall/ndcg@k (k <= depth) and mrr (answer ranked) stay exact."""
    rng = np.random.default_rng(1000 + seed)
    scores, answers = random_query(rng, 500)
    ranked = list(np.argsort(-scores, kind="stable"))
    depth = 100
    full, truncated = evaluate(ranked, answers.tolist()), evaluate(ranked[:depth], answers.tolist())
    for name in ("hit@1", "hit@10", "hit@50", "recall@20", "recall@100", "ndcg@10"):
        assert truncated[name] == pytest.approx(full[name]), name
    first = min(answer_ranks(ranked, answers.tolist()))
    assert truncated["mrr"] == (full["mrr"] if first <= depth else 0.0)
    assert truncated["map"] <= full["map"] <= truncated["map"] + len(answers) / (depth + 1)


def test_ties_follow_the_order_given():
    # nodes 7 and 3 tie; the ranking we are given puts 7 first, so answer 3 is at rank 2
    assert evaluate([7, 3, 9], [3], ("hit@1", "mrr")) == {"hit@1": 0.0, "mrr": 0.5}


def test_hand_computed_values():
    values = evaluate([10, 20, 30, 40, 50], [20, 50, 99])      # 99 never ranked
    assert values["hit@1"] == 0.0 and values["hit@3"] == 1.0
    assert values["recall@5"] == pytest.approx(2 / 3)
    assert values["mrr"] == 0.5
    assert values["map"] == pytest.approx((1 / 2 + 2 / 5) / 3)
    assert values["rprecision"] == pytest.approx(1 / 3)
    assert mean_metrics([{"mrr": 1.0}, {"mrr": 0.0}]) == {"mrr": 0.5}


def test_unknown_metric_names_are_refused():
    with pytest.raises(ValueError, match="unknown metrics"):
        evaluate([1], [1], ("hits@1",))
