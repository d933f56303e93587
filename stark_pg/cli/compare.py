"""`stark-pg compare`: stored evaluation runs or TREC run files side by side, with paired significance tests."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from stark_pg.cli.common import fail, out, print_json, state

DEFAULT_METRICS = "hit@1,hit@5,recall@20,mrr"


def register(app: typer.Typer) -> None:
    app.command()(compare)


def compare(
    ctx: typer.Context,
    runs: list[str] = typer.Argument(..., help="Two or more stored run ids (stark.eval_summary; `stark-pg eval "
                                               "--json` prints them) or TREC run files; the first is the baseline."),
    qrels: Path = typer.Option(None, "--qrels", help="TREC files: the qrels file (qid 0 docid rel) to score "
                                                    "them with."),
    skb: str = typer.Option(None, "--skb", help="TREC files: score them against this SKB's answers (of --split)."),
    split: str = typer.Option("val", "--split", help="With --skb: the split whose answers are the qrels."),
    metric: str = typer.Option(DEFAULT_METRICS, "--metric", help="Comma-separated metrics (hit@K, recall@K, "
                                                                 "precision@K, ndcg@K, mrr, map, rprecision)."),
    baseline: str = typer.Option(None, "--baseline", help="The run the others are compared with (one of RUNS; "
                                                          "default: the first)."),
    test: str = typer.Option("t", "--test", help="Paired test: t (Student's), randomization, wilcoxon."),
    correction: str = typer.Option("holm", "--correction", help="Multiple-testing correction over all the "
                                                                "table's tests: holm, bonferroni, bh, none."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level, applied to adjusted p-values."),
    permutations: int = typer.Option(10000, "--permutations", help="Randomization test: random swaps drawn."),
    seed: int = typer.Option(0, "--seed", help="Randomization test: seed of the swaps (same seed, same p)."),
    json_: bool = typer.Option(False, "--json", help="Means, differences, raw and adjusted p-values."),
) -> None:
    """Compare runs over the same queries: each metric's mean per run, the difference from the baseline,
    and paired significance tests with a multiple-testing correction (as IR papers report them).

    Stored runs keep the per-query values `stark-pg eval` computed (STaRK's metrics at the run's full
    depth); TREC files are scored with the same metrics against --qrels or an SKB split's answers.
    """
    from stark_pg.eval import run_sources
    from stark_pg.eval.compare import compare as compare_runs
    from stark_pg.eval.metrics import check_metric_names
    from stark_pg.eval.run_sources import CompareError

    try:
        names = check_metric_names(m.strip() for m in metric.split(",") if m.strip())
    except ValueError as exc:
        fail(f"--metric: {exc}")
    if not names:
        fail("--metric: name at least one metric")
    if len(runs) < 2:
        fail("compare needs at least two runs (run ids or TREC files)")
    if baseline is not None and baseline not in runs:
        fail(f"--baseline {baseline!r} is not one of the runs compared ({', '.join(runs)})")
    if permutations < 1:
        fail("--permutations must be at least 1")
    stored = [r for r in runs if r.isdigit()]
    if stored and len(stored) != len(runs):
        files = [r for r in runs if not r.isdigit()]
        fail(f"give run ids or TREC files, not both ({', '.join(files)} is not a run id)")
    try:
        if stored:
            if qrels or skb:
                fail("--qrels and --skb are for TREC files: stored runs carry their own answers")
            with state(ctx).connect() as conn:
                loaded = run_sources.stored_runs(conn, [int(r) for r in runs], names, defaults=default_settings)
            first = loaded[0].info
            title = f"{first['skb']}, {first['query_set']}"
        else:
            paths = [Path(r) for r in runs]
            for path in paths:
                if not path.is_file():
                    fail(f"run {str(path)!r} is neither a stored run id nor a file")
            if bool(qrels) == bool(skb):
                fail("TREC files need one qrels source: --qrels FILE or --skb NAME [--split SPLIT]")
            if qrels:
                if not qrels.is_file():
                    fail(f"--qrels {str(qrels)!r}: no such file")
                from stark_pg.eval import trec

                judgments, label = trec.read_qrels(qrels), qrels.name
            else:
                with state(ctx).connect() as conn:
                    judgments = run_sources.skb_qrels(conn, skb, split)
                label = f"{skb} split:{split}"
            loaded = run_sources.trec_runs(paths, judgments, label, names)
            title = f"against {label}"
        result = compare_runs(loaded, names, baseline=runs.index(baseline) if baseline else 0, test=test,
                              correction=correction, alpha=alpha, permutations=permutations, seed=seed)
    except CompareError as exc:
        fail(str(exc))
    if json_:
        print_json(result)
        return
    show(result, title)


def default_settings(method: str) -> dict | None:
    """A method's default settings, which a stored run's label leaves out (None: not known here)."""
    import dataclasses

    from stark_pg.retrieve import get_method

    try:
        return dataclasses.asdict(get_method(method).Options())
    except Exception:           # a method gone or renamed since the run: its label shows no settings
        return None


def show(result: dict, title: str) -> None:
    """The paper's table (means, differences from the baseline, a dagger where significant), then one row
    per test with the counts and p-values behind it."""
    names = result["metrics"]
    by_cell = {(c["run"], c["metric"]): c for c in result["comparisons"]}
    means = Table(title=f"{title}: {result['queries']} queries, baseline {result['baseline']}",
                  title_justify="left")
    means.add_column("run", overflow="fold")        # a long label (a file's path) wraps whole, never cut
    for m in names:
        means.add_column(m, justify="right")
    for run in result["runs"]:
        cells = []
        for m in names:
            c = by_cell.get((run["label"], m))
            value = f"{run['means'][m]:.3f}"
            cells.append(value if c is None else f"{value} {c['difference']:+.3f}{'†' if c['significant'] else ' '}")
        means.add_row(run["label"], *cells)
    out.print(means)
    out.print(f"† different from {result['baseline']} with adjusted p < {result['alpha']} ({result['test_name']}, "
              f"{result['correction_name']} over the {result['family']} tests below)", soft_wrap=True)
    tests = Table(title="tests against the baseline", title_justify="left")
    for column in ("run", "metric", "difference", "better", "worse", "p", "adjusted p", ""):
        tests.add_column(column, justify="left" if column in ("run", "metric") else "right",
                         overflow="fold" if column == "run" else "ellipsis")     # a long label wraps whole
    for c in result["comparisons"]:
        tests.add_row(c["run"], c["metric"], f"{c['difference']:+.4f}", str(c["better"]), str(c["worse"]),
                      _p(c["p_value"]), _p(c["p_adjusted"]), "†" if c["significant"] else "")
    out.print(tests)
    for run in result["runs"]:
        if run.get("finished") is False:
            out.print(f"note: run {run['run_id']} is unfinished (interrupted); `stark-pg eval` again completes it")


def _p(value: float) -> str:
    return f"{value:.1e}" if value < 0.001 else f"{value:.3f}"
