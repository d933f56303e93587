"""TREC run and qrels files: written by `stark-pg eval`, read by `stark-pg score` (trec_eval's formats).

run:   `qid Q0 docid rank score tag`, one ranked document a line;
qrels: `qid 0 docid rel`, one judged document a line (rel > 0 is relevant).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from stark_pg.skb.records import LoadError


def write_run(path: Path, rankings: dict[int, list[tuple[int, float]]], tag: str) -> None:
    with path.open("w", encoding="utf-8") as out:
        for qid, hits in rankings.items():
            for rank, (doc, score) in enumerate(hits, start=1):
                out.write(f"{qid} Q0 {doc} {rank} {score:.6f} {tag}\n")


def write_qrels(path: Path, answers: dict[int, list[int]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for qid, docs in answers.items():
            for doc in docs:
                out.write(f"{qid} 0 {doc} 1\n")


def read_run(path: Path) -> dict[str, list[tuple[str, float]]]:
    """qid -> [(docid, score)] best first: ordered by score (desc), then by the file's rank column."""
    rows: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
    for line_no, parts in _rows(path, 6):
        try:
            rank, score = int(parts[3]), float(parts[4])
        except ValueError:
            raise LoadError("rank must be an integer and score a number", path.name, line_no) from None
        rows[parts[0]].append((score, rank, parts[2]))
    return {qid: [(doc, score) for score, rank, doc in sorted(hits, key=lambda h: (-h[0], h[1]))]
            for qid, hits in rows.items()}


def read_qrels(path: Path) -> dict[str, set[str]]:
    """qid -> relevant docids (rel > 0)."""
    relevant: dict[str, set[str]] = defaultdict(set)
    for line_no, parts in _rows(path, 4):
        try:
            rel = float(parts[3])
        except ValueError:
            raise LoadError(f"relevance {parts[3]!r} is not a number", path.name, line_no) from None
        if rel > 0:
            relevant[parts[0]].add(parts[2])
        else:
            relevant.setdefault(parts[0], set())
    return dict(relevant)


def _rows(path: Path, columns: int):
    from loaders.textfiles import decoded_lines

    for line_no, text in decoded_lines(path):
        if not text.strip():
            continue
        parts = text.split()
        if len(parts) != columns:
            raise LoadError(f"expected {columns} whitespace-separated columns, found {len(parts)}", path.name, line_no)
        yield line_no, parts
