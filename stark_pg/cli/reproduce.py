"""`stark-pg reproduce`: re-run the commands of recorded results (results/SKB.yaml) and compare the figures."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from stark_pg.cli.common import err, fail, out, print_json, reporter, state

DEFAULT_TOLERANCE = 0.001


def register(app: typer.Typer) -> None:
    app.command()(reproduce)


def reproduce(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB whose recorded results to re-run (results/NAME.yaml)."),
    rows: list[str] = typer.Argument(None, help="Only these rows: a row's id (e.g. hybrid-weighted) or a method "
                                                "name, which takes every row evaluating it (default: every row)."),
    file: Path = typer.Option(None, "--file", help="The results file (default: results/NAME.yaml in the current "
                                                   "directory, else in the stark-pg checkout)."),
    tolerance: float = typer.Option(DEFAULT_TOLERANCE, "--tolerance", min=0.0,
                                    help="Largest accepted difference of a metric (measured, rounded to the "
                                         "recorded 3 decimals, minus recorded) for rows of kind exact and trained."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the rows and commands that would run; run nothing."),
    json_: bool = typer.Option(False, "--json", help="Per row: command, kind, run id, and per metric the recorded "
                                                     "and measured figures, the difference and whether it is flagged."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Re-run the `stark-pg eval` commands behind the recorded results and compare measured with recorded.

    Each row of the results file names the command that measured it; this runs it through the same code
    as `stark-pg eval` (a new stored run, like any evaluation) and prints recorded against measured for
    Hit@1, Hit@5, R@20, MRR, latency p50/p95 and LLM seconds a question.

    A metric is flagged when it differs by more than --tolerance (default 0.001, one unit of the third
    decimal the figures are recorded to; on 171 questions a single question changing its outcome moves
    Hit@1 by 0.006) in a row of kind `exact` (same data, index and settings: the same rankings) or
    `trained` (the same holds when the stored model is the one that was measured; retraining changes it).
    Rows of kind `llm` and every timing are shown for information only: a new LLM call may answer
    differently, and latency depends on the machine's load.

    A row that cannot run here (its trained model or index missing, the LLM unreachable) is reported as
    not run, with the reason, and the others go on. Exit code 0 when every row ran and nothing is
    flagged; 1 when a figure is flagged, a row could not run, or on an error (a malformed results file,
    an unknown SKB).
    """
    from stark_pg.results import ResultsError, load, path_for

    path = file or (Path("results") / f"{name}.yaml" if (Path("results") / f"{name}.yaml").is_file()
                    else path_for(name))
    try:
        results = load(path)
    except ResultsError as exc:
        fail(str(exc))
    if results.skb != name:
        fail(f"{path} records results of {results.skb}, not {name}")
    chosen = _select(results, rows or [])
    if dry_run:
        if json_:
            print_json({"skb": name, "file": str(path), "rows": [
                {"id": r.id, "kind": r.kind, "command": r.command, "recorded": r.metrics} for r in chosen]})
            return
        out.print(f"would run {len(chosen)} of {len(results.rows)} rows of {path}:", highlight=False)
        for row in chosen:
            out.print(f"  {row.id} ({row.kind}): {row.command}", highlight=False, soft_wrap=True)
        return
    from stark_pg.cli.common import expected_errors

    progress = reporter(quiet or json_)
    compared, not_run = [], []
    with state(ctx).connect() as conn:
        from stark_pg.skb.catalog import require_skb

        skb_id = require_skb(conn, name)
        for row in chosen:
            if not json_:
                err.print(f"{row.id}: {row.command}", highlight=False, soft_wrap=True)
            try:
                outcome = _run(conn, skb_id, name, row, path, progress)
            except expected_errors() as exc:      # a missing model or index, an LLM not reachable: the next row
                conn.rollback()
                message = " ".join(str(exc).split()) or type(exc).__name__
                not_run.append({"id": row.id, "command": row.command, "kind": row.kind, "error": message})
                continue
            summary = outcome.summary
            if summary["queries"] and summary["failed"] == summary["queries"]:   # e.g. a model not on this machine
                message = " ".join(str(summary.get("first_error", "")).split())
                not_run.append({"id": row.id, "command": row.command, "kind": row.kind,
                                "error": f"every one of its {summary['queries']} queries failed (run {outcome.run_id}): "
                                         f"{message}"})
                continue
            compared.append(compare(row, outcome, tolerance))
    flagged = sum(len(c["flagged"]) for c in compared)
    if json_:
        print_json({"skb": name, "file": str(path), "tolerance": tolerance, "flagged": flagged, "rows": compared,
                    "not_run": not_run})
    else:
        if compared:
            _print(compared, name, tolerance)
        for row in not_run:
            out.print(f"not run: {row['id']}: {row['error']}", highlight=False, soft_wrap=True)
    if flagged:
        err.print(f"[bold red]{flagged} figure(s) differ from the record by more than {tolerance}[/]: "
                  + ", ".join(f"{c['id']} {m}" for c in compared for m in c["flagged"]), soft_wrap=True)
    if not_run:
        err.print(f"[bold red]{len(not_run)} row(s) could not run[/]: " + ", ".join(r["id"] for r in not_run),
                  soft_wrap=True)
    if flagged or not_run:
        raise typer.Exit(1)


def _select(results, wanted: list[str]) -> list:
    if not wanted:
        return list(results.rows)
    chosen = []
    for key in wanted:
        matches = [r for r in results.rows if r.id == key or key in _methods(r)]
        if not matches:
            fail(f"{results.path}: no row {key!r} (rows: {', '.join(r.id for r in results.rows)})")
        chosen += [r for r in matches if r not in chosen]
    return chosen


def _methods(row) -> list[str]:
    args = row.args()
    for i, arg in enumerate(args):
        if arg in ("-m", "--method") and i + 1 < len(args):
            return [m.strip() for m in args[i + 1].split(",") if m.strip()]
        if arg.startswith("--method="):
            return [m.strip() for m in arg.split("=", 1)[1].split(",") if m.strip()]
    return ["bm25", "vss", "hybrid"]           # eval's default


def _run(conn, skb_id: int, name: str, row, path: Path, progress):
    """The row's `stark-pg eval` command parsed by eval's own parser and run through its code path."""
    import typer.main

    from stark_pg.cli import evaluate
    from stark_pg.eval.session import choose_queries, method_options, run_methods
    from stark_pg.retrieve import get_method

    where = f"{path}:{row.line}: row {row.id!r}"
    commands = typer.Typer()
    evaluate.register(commands)             # eval's own parser, without the whole app (which imports this)
    command = typer.main.get_command(commands).commands["eval"]
    try:
        params = command.make_context("stark-pg eval", row.args()[1:]).params
    except Exception as exc:                  # click's UsageError / BadParameter
        fail(f"{where}: the command does not parse: {exc}")
    methods = [m.strip() for m in params["method"].split(",") if m.strip()]
    if len(methods) != 1:
        fail(f"{where}: the command must evaluate one method (-m), not {', '.join(methods)}")
    if params.get("queries"):
        fail(f"{where}: --queries is not reproducible from the record (a file outside it); load the queries instead")
    mask = params.get("mask") or []
    settings = method_options(methods, list(params.get("option") or []) + ([f"mfar.mask={','.join(mask)}"] if mask else []),
                              resolve=get_method)
    chosen = choose_queries(conn, skb_id, name, params["split"], None, params.get("limit"))
    return run_methods(conn, skb_id, name, settings, chosen, depth=params["depth"], stored_k=params["stored_k"],
                       progress=progress, resolve=get_method)[0]


def compare(row, outcome, tolerance: float) -> dict:
    """Recorded against measured, per metric; `flagged` lists the checked metrics beyond the tolerance."""
    summary = outcome.summary
    checked = row.kind in ("exact", "trained")
    metrics, flagged = {}, []
    for metric, recorded in row.metrics.items():
        measured = summary["metrics"].get(metric)
        difference = None if measured is None else round(round(measured, 3) - recorded, 3)
        beyond = difference is None or abs(difference) > tolerance + 1e-9
        metrics[metric] = {"recorded": recorded, "measured": measured, "difference": difference,
                           "beyond_tolerance": beyond, "flagged": checked and beyond}
        if checked and beyond:
            flagged.append(metric)
    latency = {k: {"recorded": v, "measured": summary["latency_ms"].get(k)} for k, v in row.latency_ms.items()}
    llm = summary.get("llm") or {}
    return {"id": row.id, "command": row.command, "kind": row.kind, "checked": checked, "run_id": outcome.run_id,
            "queries": summary["queries"], "failed": summary["failed"], "metrics": metrics,
            "latency_ms": latency,
            "llm_s_per_question": {"recorded": row.llm_s_per_question, "measured": llm.get("seconds_per_query")},
            "flagged": flagged}


def _print(compared: list[dict], name: str, tolerance: float) -> None:
    table = Table(title=f"{name}: recorded against measured (tolerance {tolerance} for exact and trained rows)",
                  title_justify="left")
    for column in ("row", "kind", "run", "figure", "recorded", "measured", "difference", ""):
        table.add_column(column, justify="right" if column in ("run", "recorded", "measured", "difference") else "left")
    for c in compared:
        first = True
        for metric, m in c["metrics"].items():
            verdict = "DIFFERS" if m["flagged"] else ("differs (for information)" if m["beyond_tolerance"] else "ok")
            table.add_row(c["id"] if first else "", c["kind"] if first else "", str(c["run_id"]) if first else "",
                          metric, f"{m['recorded']:.3f}", "" if m["measured"] is None else f"{m['measured']:.3f}",
                          "" if m["difference"] is None else f"{m['difference']:+.3f}", verdict)
            first = False
        for key, m in c["latency_ms"].items():
            table.add_row("", "", "", f"{key} ms", f"{m['recorded']:g}",
                          "" if m["measured"] is None else f"{m['measured']:.1f}", "", "for information")
        llm = c["llm_s_per_question"]
        if llm["recorded"] is not None or llm["measured"] is not None:
            table.add_row("", "", "", "LLM s / question", "" if llm["recorded"] is None else f"{llm['recorded']:g}",
                          "" if llm["measured"] is None else f"{llm['measured']:.1f}", "", "for information")
        if c["failed"]:
            table.add_row("", "", "", "failed queries", "", str(c["failed"]), "", "")
    out.print(table)
