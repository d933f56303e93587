"""The queries an evaluation runs: a split of the SKB's stored queries, or a CSV file not loaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg

from stark_pg.resources import queries as sql
from stark_pg.skb.records import LoadError


@dataclass
class EvalQuery:
    query_id: int
    body: str
    answer_ids: list[int]


@dataclass
class QuerySet:
    label: str                 # split:val, split:all, file:/abs/path.csv[#split]
    split: str
    queries: list[EvalQuery]


HOLDOUT = "holdout"
"""The split name of a part held out of the training split (`hold_out`): where training chooses its
settings and epochs, so that no reported split (val, test) is ever looked at while training."""


def hold_out(queries: QuerySet, share: float, seed: int = 0) -> tuple[QuerySet, QuerySet]:
    """(the rest, a held-out `share` of the queries), by a seeded shuffle of the query ids: the same
    seed gives the same split on any machine, whatever order the queries came in."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"the held-out share must be between 0 and 1, not {share}")
    ordered, order = _shuffled(queries, seed)
    n_held = max(1, round(len(ordered) * share)) if len(ordered) > 1 else 0
    rest, kept = _split(ordered, order[:n_held])
    return (QuerySet(f"{queries.label}-{HOLDOUT}", queries.split, rest),
            QuerySet(f"{queries.label}:{HOLDOUT}", HOLDOUT, kept))


def fold(queries: QuerySet, k: int, n: int, seed: int = 0) -> tuple[QuerySet, QuerySet]:
    """(the rest, fold `k` of `n`) by the seeded shuffle of `hold_out`: the `n` folds partition the
    queries, so models trained each without one fold can give every query a score from a model that
    never saw it (cross-fitting: stark_pg.train.fusion's trained-dense feature)."""
    if n < 2 or not 0 <= k < n:
        raise ValueError(f"fold {k} of {n}: need at least 2 folds and 0 <= fold < folds")
    ordered, order = _shuffled(queries, seed)
    rest, kept = _split(ordered, np.array_split(order, n)[k])
    return (QuerySet(f"{queries.label}-fold{k}of{n}", queries.split, rest),
            QuerySet(f"{queries.label}:fold{k}of{n}", queries.split, kept))


def fold_of(queries: QuerySet, n: int, seed: int = 0) -> dict[int, int]:
    """{query id: its fold} for `fold`'s partition of `queries` into `n` folds."""
    ordered, order = _shuffled(queries, seed)
    return {ordered[int(i)].query_id: k for k, part in enumerate(np.array_split(order, n)) for i in part}


def _shuffled(queries: QuerySet, seed: int) -> tuple[list[EvalQuery], np.ndarray]:
    """The queries by id, and a seeded permutation of their positions: what hold_out and fold cut."""
    ordered = sorted(queries.queries, key=lambda q: q.query_id)
    return ordered, np.random.default_rng(seed).permutation(len(ordered))


def _split(ordered: list[EvalQuery], chosen) -> tuple[list[EvalQuery], list[EvalQuery]]:
    """(the queries not at the chosen positions, those at them), both in id order."""
    inside = {int(i) for i in chosen}
    return ([q for i, q in enumerate(ordered) if i not in inside], [q for i, q in enumerate(ordered) if i in inside])


def from_split(conn: psycopg.Connection, skb_id: int, split: str) -> QuerySet:
    rows = sql().split_queries(conn, skb_id=skb_id, split=split)
    return QuerySet(f"split:{split}", split, [EvalQuery(int(q), b, list(a)) for q, b, a in rows])


REPORTED_SPLITS = ("val", "test", "test-0.1", HOLDOUT)
"""Splits a trained method never learns from: the ones methods are reported on, and training's own held-out part."""


def learning_splits(splits: list[str] | str) -> list[str]:
    """The splits a trained method learns from (`--splits train,synthetic`), in order, each once; a split
    methods are reported on is refused, since learning from it would overstate every figure on it."""
    if isinstance(splits, str):
        splits = splits.split(",")
    chosen = list(dict.fromkeys(s.strip() for s in splits if s.strip()))
    if not chosen:
        raise ValueError("--splits needs at least one split (e.g. train, or train,synthetic)")
    reported = [s for s in chosen if s in REPORTED_SPLITS]
    if reported:
        raise ValueError(f"--splits {','.join(chosen)}: {', '.join(reported)} is a split methods are reported on; "
                         "learning from it would overstate every figure on it")
    return chosen


def from_splits(conn: psycopg.Connection, skb_id: int, splits: list[str]) -> QuerySet:
    """The questions of several splits, in the order given."""
    sets = [from_split(conn, skb_id, split) for split in splits]
    return QuerySet("+".join(s.label for s in sets), splits[0], [q for s in sets for q in s.queries])


def learning_sets(conn: psycopg.Connection, skb_id: int, splits: list[str], share: float,
                  seed: int = 0) -> tuple[QuerySet, QuerySet]:
    """(the questions of every split but a held-out `share` of the first, that share): training chooses
    its epochs on questions of the first split only (the real `train`), never on the splits added to it
    (synthesized questions)."""
    first, *more = splits
    rest, held = hold_out(from_split(conn, skb_id, first), share, seed)
    added = [q for split in more for q in from_split(conn, skb_id, split).queries]
    label = "+".join([rest.label, *(f"split:{split}" for split in more)])
    return QuerySet(label, first, rest.queries + added), held


def from_file(conn: psycopg.Connection, skb_id: int, path: Path, split: str) -> QuerySet:
    """A bundle-format CSV (`id,query,answer_ids[,split]`); rows of other splits are skipped unless split is 'all'.

    Answer ids must be nodes of the SKB: an answer that cannot be retrieved would only lower every
    method's figures silently, so it is an error naming the line.
    """
    from loaders.queries_csv import read_queries

    node_ids = {row[0] for row in sql().node_ids(conn, skb_id=skb_id)}
    chosen = []
    for line, query in read_queries(Path(path)):
        missing = [a for a in query.answer_ids if a not in node_ids]
        if missing:
            raise LoadError(f"answer ids {missing[:5]} of query {query.query_id} are not nodes of this SKB",
                            Path(path).name, line)
        if split == "all" or query.split in (split, "all"):
            chosen.append(EvalQuery(query.query_id, query.body, query.answer_ids))
    label = f"file:{Path(path).resolve()}" + ("" if split == "all" else f"#{split}")
    return QuerySet(label, split, chosen)
