"""Choosing a method's settings on one split: every combination of a grid of settings evaluated, the
best by one metric.

Why: a setting chosen on the split that is reported (hybrid's BM25 weight picked on `val`, say) makes
that split's figures optimistic. `stark-pg tune` evaluates the grid on `train` by default, so that the
setting it names can then be reported on `val` with `stark-pg eval`. Each point is an ordinary stored
evaluation run (stark_pg.eval.runner): an interrupted sweep resumes, and `stark-pg compare` can set
any two points side by side.

A method whose defaults may come from the SKB (hybrid: its module has TUNED_KEYS) gets the best point
stored as those defaults (`store_defaults`, stark.tuned_setting), but only when it was chosen on the
train split: val and test are what the defaults are reported with, so they never choose them.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import psycopg

from stark_pg.eval.metrics import DEFAULT_METRICS
from stark_pg.eval.query_sets import QuerySet
from stark_pg.eval.runner import Resolve, RunOutcome, run_method
from stark_pg.eval.session import method_options
from stark_pg.options import OptionError
from stark_pg.progress import Reporter
from stark_pg.resources import queries as sql

TRAIN = "train"
"""The only split whose tuning becomes a method's stored defaults."""


@dataclass
class GridPoint:
    settings: dict[str, str]       # the grid's KEY: VALUE at this point (as written)
    outcome: RunOutcome
    options: object = None         # the method's Options at this point


@dataclass
class Tuning:
    method: str
    metric: str
    points: list[GridPoint]
    best: GridPoint


def parse_grid(entries: list[str]) -> list[dict[str, str]]:
    """`KEY=V1,V2,...` entries -> every combination as {KEY: V}, in the order written (the first key
    varies slowest). A key given twice, or one without values, is an error naming the entry."""
    axes: dict[str, list[str]] = {}
    for entry in entries:
        key, eq, values = entry.partition("=")
        key = key.strip()
        choices = [v.strip() for v in values.split(",") if v.strip()]
        if not eq or not key or not choices:
            raise OptionError(f"--grid {entry!r}: write KEY=V1,V2,... (e.g. weight=0.3,0.5,0.7)")
        if key in axes:
            raise OptionError(f"--grid {entry!r}: {key} is given twice; list all its values in one --grid")
        axes[key] = list(dict.fromkeys(choices))
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def tune(conn: psycopg.Connection, skb_id: int, skb: str, method: str, fixed: list[str], grid: list[str],
         query_set: QuerySet, metric: str = "mrr", *, resolve: Resolve, depth: int = 1000,
         progress: Reporter | None = None) -> Tuning:
    """Evaluate `method` with the `fixed` KEY=VALUE settings plus each point of `grid` on `query_set`;
    the best point by `metric` (ties: the first in grid order). Every point's settings are checked
    before any is run, so a bad value fails at once instead of after an hour of sweeping."""
    if metric not in DEFAULT_METRICS:
        raise OptionError(f"--metric {metric!r}: one of {', '.join(DEFAULT_METRICS)}")
    points = parse_grid(grid)
    options = [method_options([method], list(fixed) + [f"{k}={v}" for k, v in p.items()], resolve=resolve)[method]
               for p in points]
    done = []
    for point, opts in zip(points, options):
        done.append(GridPoint(point, run_method(conn, skb_id, skb, method, opts, query_set, resolve=resolve,
                                                depth=depth, progress=progress), opts))
    best = max(done, key=lambda p: (p.outcome.summary["metrics"][metric], -done.index(p)))
    return Tuning(method, metric, done, best)


def default_grid(module) -> list[str]:
    """The grid `stark-pg tune` sweeps when given none: the method module's DEFAULT_GRID, if it has one."""
    return list(getattr(module, "DEFAULT_GRID", ()))


def storable(module, query_set: QuerySet) -> str | None:
    """Why the best point of a tuning cannot become the method's stored defaults, None if it can."""
    if not hasattr(module, "TUNED_KEYS"):
        return "the method takes no stored defaults"
    if query_set.split != TRAIN or not query_set.label.startswith(f"split:{TRAIN}"):
        return f"chosen on {query_set.label}, not on the train split"
    return None


def store_defaults(conn: psycopg.Connection, skb_id: int, module, tuning: Tuning, query_set: QuerySet) -> dict:
    """Store the best point's settings of the module's TUNED_KEYS as the method's defaults for the SKB
    (replacing any before); returns them. The caller checked `storable`."""
    chosen = {key: getattr(tuning.best.options, key) for key in module.TUNED_KEYS}
    grid = [{"settings": p.settings, "value": p.outcome.summary["metrics"][tuning.metric], "run_id": p.outcome.run_id}
            for p in tuning.points]
    with conn.transaction():
        sql().store_tuned_setting(conn, skb_id=skb_id, method=tuning.method, options=json.dumps(chosen),
                                  query_set=query_set.label, queries=len(query_set.queries), metric=tuning.metric,
                                  value=tuning.best.outcome.summary["metrics"][tuning.metric],
                                  run_id=tuning.best.outcome.run_id, grid=json.dumps(grid))
    return chosen


def forget_defaults(conn: psycopg.Connection, skb_id: int, method: str) -> bool:
    """Remove the method's stored defaults for the SKB; whether there were any."""
    with conn.transaction():
        return bool(sql().forget_tuned_setting(conn, skb_id=skb_id, method=method))
