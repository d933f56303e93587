"""`stark-pg eval | score`: STaRK-compatible evaluation of methods, and of rankings made elsewhere."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from stark_pg.cli.common import (WORKERS_HELP, concurrent_calls, err, fail, out, print_json, ray_options, reporter,
                                 state, writable_dir)
from stark_pg.retrieve.catalog import method_help

SHOWN = ("hit@1", "hit@5", "recall@20", "mrr")


def register(app: typer.Typer) -> None:
    app.command(name="eval")(evaluate)
    app.command()(score)


def evaluate(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB whose queries (or --queries file) to evaluate on."),
    method: str = typer.Option("bm25,vss,hybrid", "--method", "-m", help="Comma-separated methods: "
                                                                         + method_help(", ") + "."),
    split: str = typer.Option("val", "--split", help="Query split (train, val, test, human, ...; 'all' for every one)."),
    queries: Path = typer.Option(None, "--queries", help="Evaluate a CSV in the bundle format "
                                                          "(id,query,answer_ids[,split]) without loading it."),
    limit: int = typer.Option(None, "--limit", help="Only the first N queries (by id)."),
    option: list[str] = typer.Option(None, "--option", "-o", help="Method setting KEY=VALUE (every method that has "
                                                                  "KEY) or METHOD.KEY=VALUE; repeatable."),
    mask: list[str] = typer.Option(None, "--mask", help="mfar: zero the weight of a field, or of one scorer of it "
                                                        "(FIELD or FIELD:lexical|dense), repeatable; the same as "
                                                        "-o mfar.mask=FIELD,... (`stark-pg masking` makes the table)."),
    depth: int = typer.Option(1000, "--depth", help="Ranking depth asked of each method: answers ranked deeper count "
                                                    "as not retrieved (their MRR share would be under 1/depth)."),
    stored_k: int = typer.Option(100, "--stored-k", help="Ranked ids (and scores) stored per query."),
    out_dir: Path = typer.Option(None, "--out", help="Write CSV/JSON per method, TREC run and qrels, report.md, "
                                                     "report.png and report.html (every query's rankings) here."),
    context: str = typer.Option(None, "--context", help="Show published figures of this STaRK dataset (prime, "
                                                        "mag, amazon) in report.md; guessed from the SKB."),
    workers: int = typer.Option(None, "--workers", help="LLM methods (and openai: embedding models): queries "
                                                        "searched at once. " + WORKERS_HELP, show_default=False),
    executor: str = typer.Option("local", "--executor",
                                 help="Where the searches run: local (this process) or ray (shards of the "
                                      "queries as tasks on a Ray cluster, each on a connection of its own to "
                                      "this database, which the workers must reach under the same DSN; needs "
                                      "pip install 'stark-pg[ray]'). Results are stored here, in one run."),
    ray_address: str = typer.Option(None, "--ray-address",
                                    help="--executor ray: the cluster's head, HOST:PORT (or ray://HOST:PORT). "
                                         "Default: RAY_ADDRESS, else a cluster on this machine, else a new one."),
    ray_workers: int = typer.Option(None, "--ray-workers",
                                    help="--executor ray: tasks at once. Default: the cluster's CPUs.",
                                    show_default=False),
    json_: bool = typer.Option(False, "--json", help="Per method: mean metrics, query count, latency p50/p95."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Run every query through every method; store rankings, answer ranks, metrics, latency and traces.

    Results go to stark.eval_run / stark.eval_result. Re-running an interrupted evaluation continues it.
    A latency (p50/p95 ms) is a question's search with the method alone: its query embedding counts even
    when another method of the run embedded the question first.
    """
    from stark_pg.eval.report import write_report
    from stark_pg.eval.runner import LATENCY_NOTE
    from stark_pg.eval.session import choose_queries, guess_dataset, method_options, run_methods
    from stark_pg.options import OptionError
    from stark_pg.retrieve import UnknownMethod, get_method
    from stark_pg.retrieve.results import check_k
    from stark_pg.skb.catalog import require_skb

    methods = [m.strip() for m in method.split(",") if m.strip()]
    try:
        check_k(depth, "--depth")
        settings = method_options(methods, list(option or []) + ([f"mfar.mask={','.join(mask)}"] if mask else []),
                                  resolve=get_method)
    except (UnknownMethod, OptionError) as exc:
        fail(str(exc))
    if out_dir:
        writable_dir(out_dir, "--out")
    ray = ray_options(executor, ray_address, ray_workers)
    bound = concurrent_calls(workers)
    progress = reporter(quiet or json_)
    with bound, state(ctx).connect() as conn:
        skb_id = require_skb(conn, name)
        chosen = choose_queries(conn, skb_id, name, split, queries, limit)
        try:
            outcomes = run_methods(conn, skb_id, name, settings, chosen, resolve=get_method, depth=depth,
                                   stored_k=stored_k, progress=progress, reads=state(ctx).reads(), ray=ray)
        except RuntimeError as exc:
            from stark_pg.embed.ray_executor import RayUnavailable

            if not isinstance(exc, RayUnavailable):
                raise
            fail(str(exc))
        report = None
        if out_dir:
            report = write_report(conn, skb_id, name, split, outcomes, out_dir, context or guess_dataset(name),
                                  bodies={q.query_id: q.body for q in chosen.queries})
    if json_:
        print_json({"skb": name, "query_set": chosen.label,
                    "methods": {o.method: {"run_id": o.run_id, "options": o.options, **o.summary}
                                for o in outcomes}})
        _fail_when_nothing_ran(outcomes)
        return
    table = Table(title=f"{name}, {chosen.label}, {len(chosen.queries)} queries", title_justify="left")
    table.add_column("method")
    table.add_column("run", justify="right")
    for m in SHOWN:
        table.add_column(m, justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("p95 ms", justify="right")
    table.add_column("failed", justify="right")
    with_llm = any("llm" in o.summary for o in outcomes)
    if with_llm:
        table.add_column("LLM s/q", justify="right")
        table.add_column("LLM calls (cached)", justify="right")
    for o in outcomes:
        row = [o.method, str(o.run_id), *(f"{o.summary['metrics'][m]:.3f}" for m in SHOWN),
               f"{o.summary['latency_ms']['p50']:.1f}", f"{o.summary['latency_ms']['p95']:.1f}",
               str(o.summary["failed"])]
        if with_llm:
            llm = o.summary.get("llm")
            row += [f"{llm['seconds_per_query']:.2f}", f"{llm['calls']} ({llm['cache_hits']})"] if llm else ["", ""]
        table.add_row(*row)
    out.print(table)
    err.print(f"p50/p95 ms: {LATENCY_NOTE}.", style="dim", highlight=False)   # stderr: stdout stays the table
    for o in outcomes:
        if o.summary["failed"]:
            err.print(f"{o.method}: {o.summary['failed']} of {o.summary['queries']} queries failed (scored 0); "
                      f"the first: {o.summary['first_error']}", highlight=False, soft_wrap=True, markup=False)
    if report:
        out.print(f"report: {report.with_suffix('.html')} (and {report.name}, {report.with_suffix('.png').name})")
    _fail_when_nothing_ran(outcomes)


def _fail_when_nothing_ran(outcomes) -> None:
    """A method all of whose queries failed measured nothing: its zeros are not a result, so the command
    exits non-zero (the run and its errors stay stored, for `stark-pg compare` and the report)."""
    broken = [o for o in outcomes if o.summary["queries"] and o.summary["failed"] == o.summary["queries"]]
    if broken:
        fail("; ".join(f"every query of {o.method} failed (run {o.run_id}): {o.summary['first_error']}"
                       for o in broken))


def score(
    run: Path = typer.Argument(..., help="TREC run file: qid Q0 docid rank score tag."),
    qrels: Path = typer.Argument(..., help="TREC qrels file: qid 0 docid rel (rel > 0 is relevant)."),
    per_query: bool = typer.Option(False, "--per-query", help="One row per query as well as the means."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Score rankings made elsewhere with stark-pg's STaRK-compatible metrics.

    Relevant nodes missing from a query's ranking count as ranked after every ranked node (they add
    to recall's denominator, nothing to mrr); judged queries absent from the run score zero.
    """
    from stark_pg.eval.scoring import score_run

    result = score_run(run, qrels)
    if json_:
        print_json(result if per_query else {k: v for k, v in result.items() if k != "per_query"})
        return
    table = Table(title=f"{run.name} against {qrels.name}: {result['queries']} queries", title_justify="left")
    table.add_column("metric")
    table.add_column("mean", justify="right")
    for metric, value in result["metrics"].items():
        table.add_row(metric, f"{value:.4f}")
    out.print(table)
    if per_query:
        names = list(result["metrics"])
        detail = Table(show_header=True)
        detail.add_column("qid")
        for m in names:
            detail.add_column(m, justify="right")
        for qid, values in result["per_query"].items():
            detail.add_row(qid, *(f"{values[m]:.4f}" for m in names))
        out.print(detail)
