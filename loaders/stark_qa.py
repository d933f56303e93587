"""STaRK's query files: `stark_qa.csv` with `split/{train,val,test}.index`, and the human-generated CSV.

Both attach queries to an SKB that is already loaded (their answer ids are that SKB's node ids).
Split index files list query ids, one per line; a query in no index file gets split `unassigned`;
the human-generated CSV's queries get split `human`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from loaders.queries_csv import read_queries
from loaders.textfiles import decoded_lines, parse_int
from stark_pg.skb.records import LoadError, Query


def find_qa_csv(path: Path) -> Path | None:
    """The `stark_qa.csv` of a STaRK QA directory (as published, possibly one level down), else None."""
    for candidate in (path / "stark_qa.csv", path / "stark_qa" / "stark_qa.csv"):
        if candidate.is_file():
            return candidate
    return None


def is_human_csv(path: Path) -> bool:
    if not (path.is_file() and path.suffix == ".csv"):
        return False
    with path.open("rb") as handle:
        return b"answer_ids_source" in handle.readline()


class StarkQaSource:
    format = "stark-qa"

    def __init__(self, path: Path):
        path = Path(path)
        if path.is_file():
            self.csv, self.split_of = path, None
            self.default_split = "human" if is_human_csv(path) else "all"
            self.format = "stark-qa-human" if is_human_csv(path) else "stark-qa"
        else:
            csv_path = find_qa_csv(path)
            if csv_path is None:
                raise LoadError(f"{path} holds no stark_qa.csv")
            self.csv, self.default_split = csv_path, "all"
            self.split_of = _split_indices(path)
        self.location = str(path.resolve())
        self.queries_label = self.csv.name

    def queries(self) -> Iterator[tuple[int, Query]]:
        yield from read_queries(self.csv, self.queries_label, default_split=self.default_split,
                                split_of=self.split_of)


def _split_indices(path: Path) -> dict[int, str] | None:
    """query id -> split from `split/*.index` (beside stark_qa.csv or its parent); None when there are none."""
    for folder in (path / "split", path.parent / "split"):
        if folder.is_dir():
            split_of: dict[int, str] = {}
            for index in sorted(folder.glob("*.index")):
                label = f"split/{index.name}"
                for line, text in decoded_lines(index, label):
                    if text.strip():
                        split_of[parse_int(text.strip(), "query id", label, line)] = index.stem
            return split_of
    return None
