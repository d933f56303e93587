"""An evaluation as a person asks for it: methods by name with their settings, a split (or a CSV of
queries) cut to a limit, every method run over it (stark_pg.eval.runner). `stark-pg eval` and the
Python API (`stark_pg.api`) both call this, so their figures are the same runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import psycopg

from stark_pg.eval import query_sets
from stark_pg.eval.query_sets import QuerySet
from stark_pg.eval.runner import Reads, Resolve, RunOutcome, run_method
from stark_pg.options import OptionError, did_you_mean
from stark_pg.progress import Reporter
from stark_pg.resources import queries as sql
from stark_pg.skb.records import LoadError


def method_options(methods: list[str], pairs: list[str] | None = None, values: dict | None = None, *,
                   resolve: Resolve) -> dict:
    """Each method's Options from `KEY=VALUE` (all methods having KEY) and `METHOD.KEY=VALUE` pairs, or
    from Python `values` ({method: {key: value}}, or {key: value} for every method having the key);
    `resolve` finds each method's module by name (stark_pg.eval.runner.Resolve)."""
    from stark_pg.options import options_from_values, parse_options

    modules = {m: resolve(m) for m in methods}
    if values:
        return {m: options_from_values(modules[m].Options, per_method) for m, per_method in
                _values_per_method(modules, values).items()}
    per_method: dict[str, list[str]] = {m: [] for m in methods}
    for pair in pairs or []:
        key = pair.partition("=")[0]
        target, dot, field = key.partition(".")
        if dot:
            if target not in modules:
                raise OptionError(f"--option {pair!r}: {target} is not among the methods evaluated")
            per_method[target].append(f"{field}={pair.partition('=')[2]}")
            continue
        takers = [m for m, mod in modules.items() if key in _fields(mod)]
        if not takers:
            raise OptionError(f"--option {pair!r}: none of {', '.join(methods)} has a setting {key!r}")
        for m in takers:
            per_method[m].append(pair)
    return {m: parse_options(modules[m].Options, per_method[m]) for m in methods}


def _fields(module) -> set[str]:
    return {f.name for f in dataclasses.fields(module.Options)}


def _values_per_method(modules: dict, values: dict) -> dict[str, dict]:
    per_method: dict[str, dict] = {m: {} for m in modules}
    for key, value in values.items():
        if key in modules:                        # {"hybrid": {"fusion": "weighted"}}
            if not isinstance(value, dict):
                raise OptionError(f"settings of {key} must be a dict of KEY: VALUE, not {value!r}")
            per_method[key].update(value)
            continue
        takers = [m for m, mod in modules.items() if key in _fields(mod)]
        if not takers:
            raise OptionError(f"setting {key!r}: none of {', '.join(modules)} has it (nor is it a method evaluated)")
        for m in takers:
            per_method[m][key] = value
    return per_method


def splits_hint(conn: psycopg.Connection, skb_id: int, split: str) -> str:
    """" (did you mean 'val'? its splits: train 435, val 171)": what to type instead of a split that
    holds no queries."""
    splits = dict(sql().count_queries_by_split(conn, skb_id=skb_id))
    listed = ", ".join(f"{s} {n:,}" for s, n in splits.items()) or "none: load queries with stark-pg load FILE --skb"
    return f" ({did_you_mean(split, splits)}its splits: {listed})"


def choose_queries(conn: psycopg.Connection, skb_id: int, skb_name: str, split: str = "val",
                   queries_file: Path | None = None, limit: int | None = None) -> QuerySet:
    """The split's stored queries, or those of a CSV not loaded, cut to the first `limit` (by id);
    an empty set is an error naming it (an evaluation of nothing would store runs of zeros)."""
    chosen = (query_sets.from_file(conn, skb_id, Path(queries_file), split) if queries_file
              else query_sets.from_split(conn, skb_id, split))
    if limit:
        chosen.queries = chosen.queries[:limit]
        chosen.label += f"[:{limit}]"
    if not chosen.queries:
        raise LoadError(f"no queries in {chosen.label} of {skb_name}"
                        + ("" if queries_file else splits_hint(conn, skb_id, split)))
    return chosen


def run_methods(conn: psycopg.Connection, skb_id: int, skb_name: str, settings: dict, query_set: QuerySet, *,
                resolve: Resolve, depth: int = 1000, stored_k: int = 100,
                progress: Reporter | None = None, reads: Reads | None = None, ray=None) -> list[RunOutcome]:
    """Every method of `settings` ({method: Options}) over the query set, one stored run each (searched on
    connections from `reads` when given, or on a Ray cluster with `ray`: stark_pg.eval.runner)."""
    return [run_method(conn, skb_id, skb_name, method, options, query_set, resolve=resolve, depth=depth,
                       stored_k=stored_k, progress=progress, reads=reads, ray=ray)
            for method, options in settings.items()]


def guess_dataset(skb_name: str) -> str | None:
    """The STaRK dataset whose published figures a report shows beside an SKB's (from its name)."""
    lowered = skb_name.lower()
    return next((d for d in ("prime", "mag", "amazon") if d in lowered), None)
