"""Our metrics against torchmetrics' retrieval functions applied the STaRK way (a score for every candidate).

STaRK (stark_qa/evaluator.py) gives unranked candidates `min(scores) - 1` and calls torchmetrics on the
full float32 vector. torchmetrics breaks ties with CPU argsort/topk, whose order for tied scores is
unspecified (not stable, and argsort and topk disagree), so the comparisons are:

1. given the order torch actually produced for a metric, every metric is equal to 1e-6, ties and all;
2. for our own rankings (ties in the order given, truncated, unranked answers): ndcg is equal (both
   average over ties), the rest lie between our value with answers last and first within each tie
   group (ours is that lower bound), and are equal where no tie separates answers from non-answers.

Scores are kept above 1 so that STaRK's fill value `min - 1` is positive: torchmetrics >= PR #3104
(the installed 1.9) ignores answers scored <= 0 in recall/mrr/map/precision, which STaRK's pinned
1.2.0 did not; `test_nonpositive_scores` marks that difference.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tm = pytest.importorskip("torchmetrics.functional.retrieval")

from stark_pg.eval.metrics import (DEFAULT_METRICS, evaluate, mean_metrics, parse_metric,  # noqa: E402
                                   rank_of_answers, summarize)

NAMES = DEFAULT_METRICS + ("precision@5", "precision@20", "ndcg@1", "ndcg@20", "recall@500")


def stark_vector(ranked, scores, n):
    """STaRK's all_pred: float32 scores for candidates 0..n-1, the unranked ones at min(scores) - 1."""
    pred = torch.tensor(scores, dtype=torch.float32)
    all_pred = torch.ones(n, dtype=torch.float32) * (pred.min() - 1)
    all_pred[torch.as_tensor(ranked, dtype=torch.long)] = pred
    return all_pred


def stark_metric(name, all_pred, answers):
    """What STaRK's Evaluator.evaluate computes for one metric name."""
    target = torch.zeros(len(all_pred), dtype=torch.bool)
    target[torch.as_tensor(sorted(answers), dtype=torch.long)] = True
    kind, k = parse_metric(name)
    fn = {"hit": tm.retrieval_hit_rate, "recall": tm.retrieval_recall, "precision": tm.retrieval_precision,
          "map": tm.retrieval_average_precision, "ndcg": tm.retrieval_normalized_dcg}
    if kind == "mrr":
        return float(tm.retrieval_reciprocal_rank(all_pred, target))
    if kind == "rprecision":
        return float(tm.retrieval_r_precision(all_pred, target))
    return float(fn[kind](all_pred, target, top_k=k))


def torch_order(name, all_pred):
    """The candidate order the torchmetrics function behind `name` uses (argsort or topk)."""
    kind, k = parse_metric(name)
    if kind in ("hit", "recall", "rprecision", "ndcg"):
        return torch.argsort(all_pred, descending=True)
    k = len(all_pred) if k is None else min(k, len(all_pred))
    return all_pred.topk(k, sorted=True)[1]


def random_query(rng, n, ties, depth):
    """A ranking of `depth` of n candidates (scores > 1, quantised when `ties`) and its answers."""
    scores = rng.uniform(1.5, 9.0, n)
    if ties:
        scores = np.round(scores * rng.choice([1, 2, 8])) / 8 + 1.5
    order = np.lexsort((rng.permutation(n), -scores))[:depth]      # ties in a random order
    n_answers = min(n, int(rng.choice([1, 1, 2, 3, 5, 20, 60])))
    answers = set(rng.choice(n, size=n_answers, replace=False).tolist())
    return order.tolist(), scores[order].tolist(), answers


def reorder_ties(ranked, scores, answers, answers_first):
    """The same ranking with answers moved first (or last) within each group of equal float32 scores."""
    s32 = np.float32(scores)
    key = [(-float(s), (node in answers) != answers_first) for node, s in zip(ranked, s32)]
    order = sorted(range(len(ranked)), key=lambda i: key[i])
    return [ranked[i] for i in order], [scores[i] for i in order]


def cases(count, seed0):
    params = []
    for seed in range(count):
        rng = np.random.default_rng(seed0 + seed)
        n = int(rng.choice([1, 3, 15, 17, 40, 120, 400, 3000]))
        depth = n if rng.random() < 0.4 else int(rng.integers(1, n + 1))
        params.append(pytest.param(rng, n, bool(rng.random() < 0.6), depth, id=f"seed{seed0 + seed}"))
    return params


@pytest.mark.parametrize("rng,n,ties,depth", cases(300, 0))
def test_same_order_same_values(rng, n, ties, depth):
    """Given the very order torch sorted the candidates in, every metric agrees, ties included."""
    ranked, scores, answers = random_query(rng, n, ties, depth)
    all_pred = stark_vector(ranked, scores, n)
    for name in NAMES:
        order = torch_order(name, all_pred).tolist()
        ours = evaluate(order, answers, (name,), scores=all_pred[order].tolist(), num_candidates=n)[name]
        assert ours == pytest.approx(stark_metric(name, all_pred, answers), abs=1e-6), name


def check_bracket(ranked, scores, answers, n, names=NAMES):
    """ndcg equal; other metrics between the answers-last and answers-first tie orders, equal if those agree."""
    all_pred = stark_vector(ranked, scores, n)
    ours = evaluate(ranked, answers, names, scores=scores, num_candidates=n)
    low_ranked, _ = reorder_ties(ranked, scores, answers, answers_first=False)
    high_ranked, _ = reorder_ties(ranked, scores, answers, answers_first=True)
    low = evaluate(low_ranked, answers, names, num_candidates=n)
    high = evaluate(high_ranked + sorted(answers - set(ranked)), answers, names, num_candidates=n)  # unranked next
    for name in names:
        stark = stark_metric(name, all_pred, answers)
        if name.startswith("ndcg"):
            assert ours[name] == pytest.approx(stark, abs=1e-6), name
            continue
        assert low[name] - 1e-6 <= ours[name] <= high[name] + 1e-6, name
        assert low[name] - 1e-6 <= stark <= high[name] + 1e-6, name
        if low[name] == high[name]:          # nothing left to tie-breaking: exact
            assert ours[name] == pytest.approx(stark, abs=1e-6), name


@pytest.mark.parametrize("rng,n,ties,depth", cases(300, 1000))
def test_our_rankings_bracket_stark(rng, n, ties, depth):
    """Ties in our order, unranked answers: ndcg equal, the rest between the answers-last/first tie orders."""
    check_bracket(*random_query(rng, n, ties, depth), n)


@pytest.mark.parametrize("seed", range(40))
def test_distinct_scores_full_ranking_is_exact(seed):
    """STaRK's usual case (dense retrieval scores every candidate): exact agreement, no caveats."""
    rng = np.random.default_rng(5000 + seed)
    n = int(rng.integers(20, 2000))
    ranked, scores, answers = random_query(rng, n, ties=False, depth=n)
    all_pred = stark_vector(ranked, scores, n)
    ours = evaluate(ranked, answers, NAMES, scores=scores, num_candidates=n)
    assert ours == pytest.approx({name: stark_metric(name, all_pred, answers) for name in NAMES}, abs=1e-6)


@pytest.mark.parametrize("seed", range(40))
def test_truncated_rankings_are_exact_within_their_depth(seed):
    """Distinct scores, top 100 of 500 known: metrics inside the depth are exact, mrr/map gaps are bounded."""
    rng = np.random.default_rng(9000 + seed)
    ranked, scores, answers = random_query(rng, 500, ties=False, depth=500)
    full = evaluate(ranked, answers, NAMES, scores=scores, num_candidates=500)
    cut = evaluate(ranked[:100], answers, NAMES, scores=scores[:100], num_candidates=500)
    for name in ("hit@1", "hit@10", "hit@50", "recall@20", "recall@100", "precision@20", "ndcg@10"):
        assert cut[name] == pytest.approx(full[name], abs=1e-12), name
    unranked = len(answers - set(ranked[:100]))
    for name in ("mrr", "map"):
        assert cut[name] <= full[name] + 1e-12 <= cut[name] + unranked / 101 + 1e-12, name
    cut_unbounded = evaluate(ranked[:100], answers, ("mrr", "map"))
    assert cut_unbounded["mrr"] <= cut["mrr"] and cut_unbounded["map"] <= cut["map"]


@pytest.mark.parametrize("ties", [False, True])
def test_large_candidate_set(ties):
    """200K candidates, top 100 known: a big tied bottom group, where torch's sort order is least predictable."""
    rng = np.random.default_rng(7)
    ranked, scores, answers = random_query(rng, 200_000, ties, depth=100)
    check_bracket(ranked, scores, answers | {ranked[3]}, 200_000,
                  ("ndcg@10", "ndcg@20", "hit@1", "hit@50", "recall@100", "precision@5", "mrr", "map", "rprecision"))


def test_float32_collisions_are_ties():
    """Scores distinct in float64 but equal in float32 tie for STaRK (FloatTensor), so for our ndcg too."""
    ranked, scores, answers = [0, 1, 2], [3.0 + 1e-9, 3.0, 2.0], {1}
    all_pred = stark_vector(ranked, scores, 5)
    ours = evaluate(ranked, answers, ("ndcg@1", "ndcg@10"), scores=scores, num_candidates=5)
    assert ours["ndcg@1"] == pytest.approx(0.5) == pytest.approx(stark_metric("ndcg@1", all_pred, answers))
    assert ours["ndcg@10"] == pytest.approx(stark_metric("ndcg@10", all_pred, answers), abs=1e-6)


def test_huge_scores_merge_the_bottom_group():
    """With |scores| >= 2**24, STaRK's min - 1 rounds back to min in float32: the bottom ties with it."""
    ranked, scores, answers = [4, 2], [2.0**25, 2.0**25 - 4], {0}
    all_pred = stark_vector(ranked, scores, 6)
    ours = evaluate(ranked, answers, ("ndcg@2", "ndcg@5"), scores=scores, num_candidates=6)
    for name in ours:
        assert ours[name] == pytest.approx(stark_metric(name, all_pred, answers), abs=1e-6), name


def test_k_beyond_the_candidate_count_counts_unranked_answers():
    """recall@100 over 30 candidates is 1 in STaRK: every candidate is in the top 100, ranked or not."""
    ranked, scores, answers = list(range(10)), [11.0 - i for i in range(10)], {3, 25}
    all_pred = stark_vector(ranked, scores, 30)
    ours = evaluate(ranked, answers, ("recall@20", "recall@100", "hit@50"), scores=scores, num_candidates=30)
    assert ours == {"recall@20": 0.5, "recall@100": 1.0, "hit@50": 1.0}
    assert stark_metric("recall@100", all_pred, answers) == 1.0
    assert evaluate(ranked, answers, ("recall@100",))["recall@100"] == 0.5      # unbounded candidate set


def test_answers_outside_the_candidates():
    """STaRK drops answers that are not candidates; we refuse them when they cannot fit, and agree once dropped."""
    ranked = list(range(8))
    scores = [9.0 - i for i in range(8)]
    with pytest.raises(ValueError, match="not candidates"):
        evaluate(ranked, {2, 50}, scores=scores, num_candidates=8)
    all_pred = stark_vector(ranked, scores, 8)
    ours = evaluate(ranked, {2}, NAMES, scores=scores, num_candidates=8)
    assert ours == pytest.approx({name: stark_metric(name, all_pred, {2}) for name in NAMES}, abs=1e-6)


def _torchmetrics_drops_nonpositive() -> bool:
    return float(tm.retrieval_recall(torch.tensor([-1.0, -2.0]), torch.tensor([True, False]))) == 0.0


@pytest.mark.xfail(_torchmetrics_drops_nonpositive(), strict=True,
                   reason="installed torchmetrics (>= PR #3104) zeroes answers scored <= 0 in recall/mrr/map; "
                          "STaRK's pinned torchmetrics 1.2.0 did not, and rank-based metrics should not")
def test_nonpositive_scores():
    """Cosine scores below 1 make STaRK's fill value min - 1 negative; the ranking is all that should count."""
    ranked, scores, answers = [0, 1, 2, 3], [0.9, 0.5, -0.1, -0.3], {2}
    all_pred = stark_vector(ranked, scores, 10)
    ours = evaluate(ranked, answers, ("recall@3", "mrr", "map"), scores=scores, num_candidates=10)
    assert ours == {"recall@3": 1.0, "mrr": pytest.approx(1 / 3), "map": pytest.approx(1 / 3)}
    assert ours == pytest.approx({n: stark_metric(n, all_pred, answers) for n in ours}, abs=1e-6)


def test_hand_computed_values():
    ranking, answers = [10, 20, 30, 40, 50], [20, 50, 99]      # 99 never ranked
    values = evaluate(ranking, answers)                       # unbounded candidates: 99 never counts
    assert values["hit@1"] == 0.0 and values["hit@3"] == 1.0
    assert values["recall@5"] == pytest.approx(2 / 3) and values["recall@100"] == pytest.approx(2 / 3)
    assert values["mrr"] == 0.5
    assert values["map"] == pytest.approx((1 / 2 + 2 / 5) / 3)
    assert values["rprecision"] == pytest.approx(1 / 3)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert values["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(6)) / ideal)
    # 10 candidates: 99 sits last, at rank 10, and the 5 unranked ones share ranks 6-10 for ndcg
    values = evaluate(ranking, answers, num_candidates=10)
    assert values["recall@5"] == pytest.approx(2 / 3) and values["recall@10"] == 1.0
    assert values["map"] == pytest.approx((1 / 2 + 2 / 5 + 3 / 10) / 3)
    tail = sum(1 / math.log2(r + 1) for r in range(6, 11)) / 5
    assert values["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(6) + tail) / ideal)
    assert evaluate([1, 2], [], num_candidates=4) == dict.fromkeys(DEFAULT_METRICS, 0.0)
    assert evaluate([], [3], ("mrr", "hit@1"), num_candidates=4) == {"mrr": 0.25, "hit@1": 0.0}


def test_ties_follow_the_order_given_except_ndcg():
    # nodes 7 and 3 tie; the ranking puts 7 first, so answer 3 is at rank 2; ndcg shares the tie's gain
    values = evaluate([7, 3, 9], [3], ("hit@1", "mrr", "ndcg@1"), scores=[2.0, 2.0, 1.0])
    assert values == {"hit@1": 0.0, "mrr": 0.5, "ndcg@1": 0.5}
    assert evaluate([7, 3, 9], [3], ("ndcg@1",))["ndcg@1"] == 0.0         # no scores: no ties


def test_rank_of_answers_and_summaries():
    assert rank_of_answers(["a", "b", "c"], ["c", "x", "a"]) == [3, None, 1]
    assert summarize([{"mrr": 1.0, "hit@1": 1.0}, {"mrr": 0.0, "hit@1": 0.5}]) == {"hit@1": 0.75, "mrr": 0.5}
    assert list(summarize([{"ndcg@20": 1.0, "mrr": 0.0}])) == ["mrr", "ndcg@20"]
    assert summarize([]) == {} and mean_metrics is summarize
    with pytest.raises(ValueError, match="same metrics"):
        summarize([{"mrr": 1.0}, {"hit@1": 1.0}])


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="unknown metrics"):
        evaluate([1], [1], ("hits@1",))
    for name in ("hit@0", "mrr@10", "rprecision@5", "ndcg", "map@10"):
        with pytest.raises(ValueError):
            parse_metric(name)
    assert parse_metric("ndcg@20") == ("ndcg", 20) and parse_metric("map") == ("map", None)
    with pytest.raises(ValueError, match="more than once"):
        evaluate([1, 2, 1], [2])
    with pytest.raises(ValueError, match="non-increasing"):
        evaluate([1, 2], [2], scores=[0.5, 0.9])
