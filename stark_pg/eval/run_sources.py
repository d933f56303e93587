"""The per-query metric values `stark-pg compare` pairs up: stored evaluation runs or TREC run files.

A stored run brings the values `stark-pg eval` stored per query (`stark.eval_result.metrics`): STaRK's
definitions, computed at the run's full ranking depth, not re-derived from the top `stored_k` ids.
A TREC run file is scored here with the same metrics (stark_pg/eval/metrics.py) against qrels: a
qrels file, or the answers of an SKB's split. Either way a significance test needs every run over
the same queries, so a mismatch is an error naming the runs, never a silent intersection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from stark_pg.eval import metrics, trec
from stark_pg.resources import queries as sql


class CompareError(ValueError):
    """Runs that cannot be compared (unknown, empty, over other queries or metrics): a user's mistake."""


@dataclass
class RunScores:
    label: str                                   # name in tables: bm25#3 fusion=weighted, or the file's name
    source: str                                  # run:3, or the file's path
    per_query: dict[str, dict[str, float]]       # query id -> metric -> value
    answered: frozenset[str]                     # the queries the run ranked (what must match across runs)
    info: dict = field(default_factory=dict)     # method, options, skb, query set / qrels


def run_label(method: str, run_id: int, options: dict | None, defaults: dict | None) -> str:
    """`hybrid#6 fusion=weighted weight=0.5`: the method, the run id, and the settings the run changed
    from the method's defaults (none shown when the defaults are not known)."""
    options = options or {}
    changed = [f"{key}={_setting(options[key])}" for key in (defaults or {})      # in the Options' order
               if key in options and options[key] != defaults[key]]
    return " ".join([f"{method}#{run_id}", *changed])


def _setting(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value).lower() if isinstance(value, bool) else str(value)


def stored_runs(conn: psycopg.Connection, run_ids: list[int], names: list[str],
                defaults: Callable[[str], dict | None] | None = None) -> list[RunScores]:
    """Stored runs by id, all on one SKB, with each query's answers the same in every run. `defaults`
    gives a method's default settings (the caller knows the methods), so that labels show the others."""
    infos = []
    for run_id in run_ids:
        info = sql().run_info(conn, run_id=run_id)
        if info is None:
            raise CompareError(f"no evaluation run {run_id} (stark.eval_summary lists the stored runs)")
        infos.append(info)
    first = infos[0]
    for info in infos[1:]:
        if info[1] != first[1]:
            raise CompareError(f"runs {first[0]} and {info[0]} are on different SKBs ({first[2]}, {info[2]}): "
                               "compare runs over the same queries")
    runs, answers_seen = [], {}
    for run_id, skb_id, skb, method, query_set, options, finished in infos:
        label = run_label(method, run_id, options, defaults(method) if defaults else None)
        per_query = {}
        for query_id, answer_ids, values in sql().run_query_metrics(conn, skb_id=skb_id, run_id=run_id):
            qid = str(query_id)
            missing = [m for m in names if m not in values]
            if missing:
                raise CompareError(f"run {run_id} stored no {', '.join(missing)} (it has {', '.join(values)})")
            known = answers_seen.setdefault(qid, (label, sorted(answer_ids)))
            if known[1] != sorted(answer_ids):
                raise CompareError(f"query {qid} has other answers in {label} than in {known[0]} "
                                   "(evaluated on different query files?)")
            per_query[qid] = {m: float(values[m]) for m in names}
        if not per_query:
            raise CompareError(f"run {run_id} has no results")
        runs.append(RunScores(label, f"run:{run_id}", per_query, frozenset(per_query),
                              {"run_id": run_id, "method": method, "options": options, "skb": skb,
                               "query_set": query_set, "finished": finished}))
    return runs


def trec_runs(paths: list[Path], qrels: dict[str, set[str]], qrels_label: str, names: list[str]) -> list[RunScores]:
    """TREC run files scored against qrels, as `stark-pg score` scores them: over the judged queries
    (with a relevant document); a run's queries without judgments are ignored."""
    judged = {qid: relevant for qid, relevant in qrels.items() if relevant}
    if not judged:
        raise CompareError(f"{qrels_label} has no query with a relevant document")
    labels = [p.name for p in paths]
    runs = []
    for path, label in zip(paths, labels):
        ranking = trec.read_run(path)
        answered = frozenset(ranking) & judged.keys()
        if not answered:
            raise CompareError(f"{path}: ranks none of the {len(judged)} judged queries of {qrels_label} "
                               "(query ids must match the qrels')")
        per_query = {qid: metrics.evaluate([doc for doc, _ in ranking.get(qid, [])], relevant, names)
                     for qid, relevant in judged.items()}
        runs.append(RunScores(label if labels.count(label) == 1 else str(path), str(path), per_query, answered,
                              {"file": str(path), "qrels": qrels_label}))
    return runs


def skb_qrels(conn: psycopg.Connection, skb_name: str, split: str) -> dict[str, set[str]]:
    """The answers of an SKB's split as qrels (query id -> relevant node ids, as text like a TREC file's)."""
    from stark_pg.eval import query_sets
    from stark_pg.skb.catalog import require_skb

    chosen = query_sets.from_split(conn, require_skb(conn, skb_name), split)
    if not chosen.queries:
        raise CompareError(f"no queries in split {split!r} of {skb_name}")
    return {str(q.query_id): {str(a) for a in q.answer_ids} for q in chosen.queries}


def check_same_queries(runs: list[RunScores]) -> None:
    """Every run ranked the same queries; otherwise say how they differ, with a few ids."""
    first = runs[0]
    for run in runs[1:]:
        if run.answered != first.answered:
            only_first, only_run = sorted(first.answered - run.answered), sorted(run.answered - first.answered)
            raise CompareError(
                f"{first.label} and {run.label} are not over the same queries: {len(only_first)} only in "
                f"{first.label}{_examples(only_first)}, {len(only_run)} only in {run.label}{_examples(only_run)}")


def _examples(ids: list[str]) -> str:
    return f" (e.g. {', '.join(ids[:3])})" if ids else ""
