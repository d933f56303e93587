"""Paired significance tests between runs over the same queries, as IR papers report them.

Every run is compared with one baseline on every metric: the mean difference, how many queries got
better or worse, and a paired test on the per-query values (scipy: Student's t-test `ttest_rel`,
the randomization test `permutation_test` swapping the two runs' values within each query, or the
Wilcoxon signed-rank test). Testing several runs on several metrics multiplies the chances of a
false positive, so the p-values are adjusted as one family, all the (run, metric) tests of the
table, by Holm-Bonferroni (default), Bonferroni or Benjamini-Hochberg (statsmodels'
`multipletests`); a difference is significant when its adjusted p-value is below alpha.

When the two runs agree on every query the tests are undefined (no variance); that is no evidence of
a difference, so p = 1.
"""

from __future__ import annotations

import warnings

import numpy as np

from stark_pg.eval.run_sources import CompareError, RunScores, check_same_queries

TESTS = {"t": "paired Student's t-test", "randomization": "paired randomization test",
         "wilcoxon": "Wilcoxon signed-rank test"}
CORRECTIONS = {"holm": ("holm", "Holm-Bonferroni"), "bonferroni": ("bonferroni", "Bonferroni"),
               "bh": ("fdr_bh", "Benjamini-Hochberg"), "none": (None, "no correction")}


def compare(runs: list[RunScores], names: list[str], *, baseline: int = 0, test: str = "t",
            correction: str = "holm", alpha: float = 0.05, permutations: int = 10000, seed: int = 0) -> dict:
    """Means per run and metric, and each run's differences from `runs[baseline]` with raw and adjusted
    p-values; plain data (JSON-ready)."""
    if test not in TESTS:
        raise CompareError(f"--test {test!r}: use one of {', '.join(TESTS)}")
    if correction not in CORRECTIONS:
        raise CompareError(f"--correction {correction!r}: use one of {', '.join(CORRECTIONS)}")
    if not 0 < alpha < 1:
        raise CompareError(f"--alpha {alpha}: must be between 0 and 1")
    if len(runs) < 2:
        raise CompareError("compare needs at least two runs")
    check_same_queries(runs)
    qids = list(runs[0].per_query)
    values = [{m: np.array([run.per_query[q][m] for q in qids]) for m in names} for run in runs]
    base = values[baseline]
    comparisons = []
    for i, run in enumerate(runs):
        if i == baseline:
            continue
        for m in names:
            diff = values[i][m] - base[m]
            comparisons.append({
                "run": run.label, "metric": m, "baseline_mean": float(base[m].mean()),
                "mean": float(values[i][m].mean()),
                "difference": float(diff.mean()),
                "relative": float(diff.mean() / base[m].mean()) if base[m].mean() else None,
                "better": int(np.count_nonzero(diff > 0)), "worse": int(np.count_nonzero(diff < 0)),
                "p_value": p_value(values[i][m], base[m], test, permutations, seed)})
    method, correction_name = CORRECTIONS[correction]
    raw = [c["p_value"] for c in comparisons]
    if method:
        from statsmodels.stats.multitest import multipletests

        adjusted = multipletests(raw, alpha=alpha, method=method)[1]
    else:
        adjusted = raw
    for c, p in zip(comparisons, adjusted):
        c["p_adjusted"] = float(p)
        c["significant"] = bool(p < alpha)
    return {"queries": len(qids), "baseline": runs[baseline].label, "metrics": list(names),
            "test": test, "test_name": TESTS[test], "correction": correction, "correction_name": correction_name,
            "alpha": alpha, "family": len(comparisons),
            **({"permutations": permutations, "seed": seed} if test == "randomization" else {}),
            "runs": [{"label": run.label, "source": run.source, **run.info,
                      "means": {m: float(values[i][m].mean()) for m in names}} for i, run in enumerate(runs)],
            "comparisons": comparisons}


def p_value(x: np.ndarray, y: np.ndarray, test: str, permutations: int = 10000, seed: int = 0) -> float:
    """Two-sided p-value of the paired test that x and y (values per query, same order) differ."""
    from scipy import stats

    if np.array_equal(x, y):
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # constant differences: t is infinite, p is 0
        if test == "t":
            p = stats.ttest_rel(x, y).pvalue
        elif test == "wilcoxon":
            p = stats.wilcoxon(x, y).pvalue
        else:
            p = stats.permutation_test((x, y), _mean_difference, permutation_type="samples", vectorized=True,
                                       n_resamples=permutations, alternative="two-sided",
                                       random_state=np.random.default_rng(seed)).pvalue
    return 1.0 if np.isnan(p) else float(p)


def _mean_difference(x, y, axis):
    return np.mean(x - y, axis=axis)
