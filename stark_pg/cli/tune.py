"""`stark-pg tune`: choose a method's settings on the training split, for `stark-pg eval` to report on val."""

from __future__ import annotations

import shlex

import typer
from rich.table import Table

from stark_pg.cli.common import err, fail, out, print_json, reporter, state
from stark_pg.cli.evaluate import SHOWN
from stark_pg.retrieve.catalog import method_help


def register(app: typer.Typer) -> None:
    app.command()(tune)


def tune(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB whose queries to tune on."),
    method: str = typer.Option(..., "--method", "-m", help="One method: " + method_help(", ") + "."),
    grid: list[str] = typer.Option(None, "--grid", "-g", help="A setting and the values to try, KEY=V1,V2,...; "
                                                              "repeatable (every combination is run). hybrid "
                                                              "without it: fusion=rrf,weighted and weight=0,0.1,...,1."),
    option: list[str] = typer.Option(None, "--option", "-o", help="A fixed method setting KEY=VALUE; repeatable."),
    split: str = typer.Option("train", "--split", help="The split to choose on. Keep it apart from the one you "
                                                       "report (val, test)."),
    limit: int = typer.Option(None, "--limit", help="Only the first N queries (by id)."),
    metric: str = typer.Option("mrr", "--metric", help="The metric the best point maximises (mrr, hit@1, "
                                                       "recall@20, ndcg@10, ...)."),
    depth: int = typer.Option(1000, "--depth", help="Ranking depth asked of the method, as in `stark-pg eval`."),
    json_: bool = typer.Option(False, "--json", help="Every point's settings, run id, metrics and latency, and the "
                                                     "best, as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    store: bool = typer.Option(True, "--store/--no-store", help="hybrid, chosen on train: store the best "
                                                                "setting as the SKB's hybrid defaults."),
    forget: bool = typer.Option(False, "--forget", help="Remove the stored defaults of the method for the SKB "
                                                        "(hybrid goes back to RRF) and run nothing."),
) -> None:
    """Evaluate a method over a grid of settings on one split (train by default) and name the best.

    Each point is a stored evaluation run (resumable; `stark-pg compare` takes its run id). Example:
    a weighted hybrid whose BM25 share is chosen on train (`-g weight=0.2,0.5,0.8 -o fusion=weighted`),
    then reported on val with the eval command it prints. Each point's p50 ms counts its own query
    embedding, as `eval`'s latencies do.

    hybrid's best setting chosen on train becomes the SKB's hybrid defaults (stored in
    stark.tuned_setting): `search`, `eval`, the API and stark.search use it whenever they are given none
    of fusion, weight, pool and rrf_k, and their trace's settings_from says so. Chosen on another split
    it is not stored; `--forget` removes it.
    """
    from stark_pg.eval.session import choose_queries
    from stark_pg.eval.tuning import default_grid, forget_defaults, storable, store_defaults, tune as run_tuning
    from stark_pg.options import OptionError
    from stark_pg.retrieve import UnknownMethod, get_method
    from stark_pg.skb.catalog import require_skb
    from stark_pg.skb.records import LoadError

    if "," in method:
        fail(f"--method {method!r}: tune one method at a time")
    if split in ("val", "test"):
        err.print(f"notice: choosing settings on {split!r} makes its figures optimistic; choose on train and "
                  f"report on {split}", highlight=False, soft_wrap=True)
    stored = None
    with state(ctx).connect() as conn:
        try:
            module = get_method(method)
            skb_id = require_skb(conn, name)
            if forget:
                gone = forget_defaults(conn, skb_id, method)
                if json_:
                    print_json({"skb": name, "method": method, "forgot": gone})
                else:
                    out.print(f"{method} on {name}: " + ("stored defaults removed" if gone else "no stored defaults"),
                              highlight=False)
                return
            grid = list(grid or default_grid(module))
            if not grid:
                raise OptionError(f"--grid: {method} has no default grid; give KEY=V1,V2,... (repeatable)")
            chosen = choose_queries(conn, skb_id, name, split, None, limit)
            result = run_tuning(conn, skb_id, name, method, list(option or []), grid, chosen, metric,
                                resolve=get_method, depth=depth, progress=reporter(quiet or json_))
            why_not = storable(module, chosen) if store else "--no-store"
            if why_not is None:
                stored = store_defaults(conn, skb_id, module, result, chosen)
        except (UnknownMethod, OptionError, LoadError) as exc:
            fail(str(exc))
    fixed = [f"-o {shlex.quote(o)}" for o in option or []]
    best = fixed + [f"-o {shlex.quote(f'{k}={v}')}" for k, v in result.best.settings.items()]
    command = f"stark-pg eval {shlex.quote(name)} -m {method} {' '.join(best)} --split val"
    if json_:
        print_json({"skb": name, "method": method, "query_set": chosen.label, "metric": metric, "fixed": option or [],
                    "points": [{"settings": p.settings, "run_id": p.outcome.run_id, **p.outcome.summary}
                               for p in result.points],
                    "best": result.best.settings, "eval_command": command, "stored_defaults": stored})
        return
    table = Table(title=f"{name}, {method}, {chosen.label}, {len(chosen.queries)} queries"
                        + (f" ({' '.join(fixed)})" if fixed else ""), title_justify="left")
    keys = list(result.points[0].settings)
    for key in keys:
        table.add_column(key)
    table.add_column("run", justify="right")
    for m in SHOWN:
        table.add_column(m, justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("best", justify="center")
    for p in result.points:
        figures = p.outcome.summary["metrics"]
        table.add_row(*(p.settings[k] for k in keys), str(p.outcome.run_id), *(f"{figures[m]:.3f}" for m in SHOWN),
                      f"{p.outcome.summary['latency_ms']['p50']:.1f}", "yes" if p is result.best else "")
    out.print(table)
    out.print(f"best by {metric} on {chosen.label}: {' '.join(best)}", highlight=False, soft_wrap=True, emoji=False)
    out.print(f"report it on val: {command}", highlight=False, soft_wrap=True, emoji=False)
    if stored is not None:
        out.print(f"stored as {method}'s defaults for {name}: "
                  + " ".join(f"{k}={v}" for k, v in stored.items())
                  + f" (used when a search sets none of them; `stark-pg tune {shlex.quote(name)} -m {method} --forget` "
                    "removes them)", highlight=False, soft_wrap=True, emoji=False)
    elif hasattr(module, "TUNED_KEYS") and store:
        out.print(f"not stored as {method}'s defaults: {storable(module, chosen)}", highlight=False, soft_wrap=True,
                  emoji=False)
