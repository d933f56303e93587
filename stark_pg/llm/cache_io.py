"""stark.llm_cache in and out of files, so that a rebuilt database or a colleague's keeps the answers.

A cache file is JSON Lines, one object per row with every column (`COLUMNS`), gzip-compressed when
its name ends in `.gz`. Export renders each line in PostgreSQL (request and response exactly as
stored) and reads them through a server-side cursor. Import checks every line before it counts
(JSON, keys, types, a 64-hex request_hash, no key twice) and inserts the lines' own text in
batches, all in one transaction: the first bad line is a `CacheFileError` naming `FILE:LINE`, and
nothing is imported. A key already in the cache keeps its row unless `replace`.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import sys
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import BinaryIO, Iterable, Iterator

import psycopg

from stark_pg.resources import queries as sql

COLUMNS = ("provider", "model", "request_hash", "request", "response", "prompt_tokens", "completion_tokens",
           "cost_usd", "seconds", "created_at")
REQUIRED = ("provider", "model", "request_hash", "request", "response")   # the others may be absent or null
STATS = ("provider", "model", "rows", "seconds", "prompt_tokens", "completion_tokens", "cost_usd", "oldest",
         "newest")

_HASH = re.compile(r"[0-9a-f]{64}")
# what both Python and PostgreSQL read alike: ISO 8601's extended form, with seconds optional and a zone required
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
                        r"(Z|[+-][0-9]{2}(:[0-9]{2})?)")
_INT4_MAX = (1 << 31) - 1
_BATCH_ROWS, _BATCH_BYTES = 1000, 4 << 20


class CacheFileError(Exception):
    """A cache file that cannot be read or written; a bad line is named `FILE:LINE: what is wrong`."""


@dataclass
class ImportCounts:
    rows: int = 0            # lines read
    inserted: int = 0        # new keys
    kept: int = 0            # keys already in the cache, left as they were
    replaced: int = 0        # keys already in the cache, overwritten (replace)

    def as_dict(self) -> dict:
        return asdict(self)


def stats(conn: psycopg.Connection) -> list[dict]:
    """Per provider and model: rows, total seconds, tokens and cost (None where none is known), oldest
    and newest created_at."""
    return [dict(zip(STATS, row)) for row in sql().llm_cache_stats(conn)]


def export(conn: psycopg.Connection, out: BinaryIO, *, provider: str | None = None, model: str | None = None,
           since: datetime | None = None) -> int:
    """Write the cache's rows (those of `provider`, `model`, created at or after `since`; a naive
    `since` is in the server's time zone) to `out` as UTF-8 JSON Lines; the number of rows written."""
    written = 0
    with conn.transaction(), conn.cursor(name="llm_cache_export") as cursor:
        cursor.itersize = _BATCH_ROWS
        cursor.execute(sql().llm_cache_export.sql, {"provider": provider, "model": model, "since": since})
        for (line,) in cursor:
            out.write(line.encode("utf-8") + b"\n")
            written += 1
    return written


def import_lines(conn: psycopg.Connection, lines: Iterable[bytes], label: str, *,
                 replace: bool = False) -> ImportCounts:
    """Import the lines of a cache file (`label` names it in errors) in one transaction."""
    counts = ImportCounts()
    with conn.transaction():
        for batch in _batches(_checked(lines, label)):
            inserted, replaced = sql().llm_cache_import(conn, rows="[" + ",".join(batch) + "]", replace=replace)
            counts.rows += len(batch)
            counts.inserted += inserted
            counts.replaced += replaced
            counts.kept += len(batch) - inserted - replaced
    return counts


def _checked(lines: Iterable[bytes], label: str) -> Iterator[str]:
    """The text of each line that holds a row (blank lines skipped), once `check_line` and the keys
    seen before accept it; else a CacheFileError naming the line, reading and decoding errors included."""
    seen: dict[tuple[str, str, str], int] = {}
    reader = iter(lines)
    number = 0
    while True:
        try:
            raw = next(reader, None)
        except (OSError, EOFError, zlib.error) as exc:        # a truncated or broken gzip stream
            raise CacheFileError(f"{label}:{number + 1}: cannot read: {exc}") from None
        if raw is None:
            return
        number += 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CacheFileError(f"{label}:{number}: not valid UTF-8 (byte {exc.start + 1} of the line)") from None
        if number == 1:
            text = text.removeprefix("\ufeff")
        if not text.strip():
            continue
        try:
            row = check_line(text)
        except ValueError as exc:
            raise CacheFileError(f"{label}:{number}: {exc}") from None
        first = seen.setdefault((row["provider"], row["model"], row["request_hash"]), number)
        if first != number:
            raise CacheFileError(f"{label}:{number}: the same provider, model and request_hash as line {first}")
        yield text


def _batches(texts: Iterable[str]) -> Iterator[list[str]]:
    """`texts` in lists of at most _BATCH_ROWS, cut earlier once they hold _BATCH_BYTES characters."""
    batch: list[str] = []
    size = 0
    for text in texts:
        batch.append(text)
        size += len(text)
        if len(batch) >= _BATCH_ROWS or size >= _BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def check_line(text: str) -> dict:
    """The object of one line if it is a cache row PostgreSQL will store as it is, else a ValueError
    saying what is wrong."""
    try:
        row = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise ValueError(f"not a JSON object but {_json_type(row)}")
    missing = [key for key in REQUIRED if key not in row]
    if missing:
        raise ValueError(f"missing key{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    unknown = sorted(set(row) - set(COLUMNS))
    if unknown:
        raise ValueError(f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                         f"(a row has {', '.join(COLUMNS)})")
    for key in ("provider", "model"):
        if not isinstance(row[key], str) or not row[key]:
            raise ValueError(f"{key} must be a non-empty string, not {_shown(row[key])}")
    if not isinstance(row["request_hash"], str) or not _HASH.fullmatch(row["request_hash"]):
        raise ValueError(f"request_hash must be 64 lowercase hex digits (a sha256), not {_shown(row['request_hash'])}")
    for key in ("request", "response"):
        if not isinstance(row[key], dict):
            raise ValueError(f"{key} must be a JSON object, not {_json_type(row[key])}")
    for key in ("prompt_tokens", "completion_tokens"):
        value = row.get(key)
        if value is not None and (type(value) is not int or not 0 <= value <= _INT4_MAX):
            raise ValueError(f"{key} must be a whole number from 0 to {_INT4_MAX} or null, not {_shown(value)}")
    for key in ("cost_usd", "seconds"):
        value = row.get(key)
        if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
            raise ValueError(f"{key} must be a finite number or null, not {_shown(value)}")
    created = row.get("created_at")
    if created is not None and not _is_timestamp_with_zone(created):
        raise ValueError(f"created_at must be an ISO 8601 timestamp with a time zone "
                         f"(2026-11-24T15:43:00.000000Z), not {_shown(created)}")
    if "\\u" in text:                  # escapes Python reads but jsonb refuses: NUL, lone surrogates
        bad = _unstorable(row)
        if bad is not None:
            raise ValueError(f"the text {_shown(bad)} holds a character PostgreSQL's jsonb cannot store "
                             f"(\\u0000 or a lone surrogate)")
    return row


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _is_timestamp_with_zone(value) -> bool:
    if not isinstance(value, str) or not _TIMESTAMP.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value)          # a real date and time (no month 13)
    except ValueError:
        return False
    return True


def _unstorable(value) -> str | None:
    """The first string (key or value) inside `value` that jsonb cannot hold, if any."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value
        return value if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _unstorable(key) if isinstance(key, str) else None
        found = found if found is not None else _unstorable(item)
        if found is not None:
            return found
    return None


def _json_type(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 80 else text[:77] + "..."


# -- files ----------------------------------------------------------------------------------------------

def export_file(conn: psycopg.Connection, path: str, **filters) -> int:
    """`export` into `path` (`-`: standard output; `.gz`: gzip). A file appears whole or not at all:
    it is written beside, as PATH.part, and renamed when complete."""
    if path == "-":
        written = export(conn, sys.stdout.buffer, **filters)
        sys.stdout.buffer.flush()
        return written
    partial = path + ".part"
    try:
        handle = gzip.open(partial, "wb") if path.endswith(".gz") else open(partial, "wb")
    except OSError as exc:
        raise CacheFileError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with handle:
            written = export(conn, handle, **filters)
        os.replace(partial, path)
    except OSError as exc:
        _remove(partial)
        raise CacheFileError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        _remove(partial)
        raise
    return written


def import_file(conn: psycopg.Connection, path: str, *, replace: bool = False) -> ImportCounts:
    """`import_lines` from `path` (`-`: standard input; `.gz`: gzip)."""
    with _reading(path) as lines:
        return import_lines(conn, lines, path, replace=replace)


@contextmanager
def _reading(path: str):
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        handle = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    except OSError as exc:
        raise CacheFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with handle:
        yield handle


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
