"""Query CSV files, in the three shapes stark-pg reads.

- the bundle's `queries.csv`: `id,query,answer_ids[,split]` (answer ids a JSON list);
- STaRK's `stark_qa.csv`: `id,query,answer_ids` (a Python list literal, which is valid JSON);
- STaRK's human-generated evaluation CSV: `id,query,answer_ids,answer_ids_source`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterator

from loaders.textfiles import decoded_lines, parse_int
from stark_pg.skb.records import LoadError, Query

REQUIRED = ("id", "query", "answer_ids")
OPTIONAL = ("split", "answer_ids_source")


def read_queries(path: Path, label: str | None = None, *, default_split: str = "all",
                 split_of: dict[int, str] | None = None) -> Iterator[tuple[int, Query]]:
    """Queries of a CSV with a header line; `split_of` (query id -> split) overrides the split column."""
    label = label or path.name
    lines = decoded_lines(path, label)
    numbered: list[int] = []

    def texts():
        # the line ending goes back on: csv needs it to keep the newline inside a quoted multi-line field
        for number, text in lines:
            numbered.append(number)
            yield text + "\n"

    # strict: a quote left open at the end of the file, or text after a closing quote (`"who"?`), is an
    # error rather than a field silently taken to the end of the file or stripped of its quotes
    reader = csv.reader(texts(), strict=True)
    try:
        header = next(reader)
    except csv.Error as exc:
        raise LoadError(f"bad CSV: {exc}", label, 1) from None
    unknown = [h for h in header if h not in REQUIRED + OPTIONAL]
    missing = [h for h in REQUIRED if h not in header]
    if missing or unknown or len(set(header)) != len(header):
        raise LoadError(f"header must be {','.join(REQUIRED)}[,split] (missing {missing}, unexpected {unknown})",
                        label, 1)
    column = {name: i for i, name in enumerate(header)}
    while True:
        first = len(numbered)           # the row starts on the next line read (errors name that line)
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise LoadError(f"bad CSV: {exc}", label, numbered[-1]) from None
        line = numbered[first] if first < len(numbered) else numbered[-1]
        if not row:
            continue
        if len(row) != len(header):
            raise LoadError(f"expected {len(header)} columns, found {len(row)}", label, line)
        query_id = parse_int(row[column["id"]], "query id", label, line)
        answers = _answer_ids(row[column["answer_ids"]], label, line)
        if split_of is not None:
            split = split_of.get(query_id, "unassigned")
        elif "split" in column:
            split = row[column["split"]].strip() or default_split
        else:
            split = default_split
        body = row[column["query"]]
        if not body.strip():
            raise LoadError(f"query {query_id} has no text", label, line)
        yield line, Query(query_id=query_id, split=split, body=body, answer_ids=answers)


def _answer_ids(text: str, label: str, line: int) -> list[int]:
    try:
        value = json.loads(text)
    except ValueError:                  # malformed JSON, or an integer of more than 4300 digits
        raise LoadError(f"answer_ids {text[:60]!r} is not a list of integers", label, line) from None
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and not isinstance(v, bool)
                                                            for v in value):
        raise LoadError(f"answer_ids {text[:60]!r} is not a non-empty list of integers", label, line)
    return value
