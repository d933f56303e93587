"""The queries an evaluation runs: a split of the SKB's stored queries, or a CSV file not loaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def from_split(conn: psycopg.Connection, skb_id: int, split: str) -> QuerySet:
    rows = sql().split_queries(conn, skb_id=skb_id, split=split)
    return QuerySet(f"split:{split}", split, [EvalQuery(int(q), b, list(a)) for q, b, a in rows])


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
