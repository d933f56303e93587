"""Reading text inputs line by line so that every error, decoding included, names its line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from stark_pg.skb.records import LoadError, check_int8


def decoded_lines(path: Path, label: str | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text without the line ending) for each line of a UTF-8 file; errors name the line."""
    label = label or path.name
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise LoadError(f"cannot read: {exc.strerror}", label) from exc
    with handle:
        number = 0
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise LoadError(f"not valid UTF-8 (byte {exc.start + 1} of the line)", label, number) from exc
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            yield number, text.rstrip("\r\n")
        if number == 0:
            raise LoadError("the file is empty", label)


_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def parse_int(text: str, what: str, label: str, line: int) -> int:
    """A decimal integer that fits PostgreSQL's bigint. Plain ASCII digits only: Python's int() would
    also take '1_4_4' (as 144) or other scripts' digits, which no one means in an id column."""
    if not isinstance(text, str) or not _INTEGER.fullmatch(text):
        raise LoadError(f"{what} {str(text)[:60]!r} is not an integer", label, line)
    text = text.strip()
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > 19:                # beyond bigint, and int() refuses more than 4300 digits anyway
        shown = text if len(text) <= 30 else f"{text[:20]}... ({len(digits)} digits)"
        raise LoadError(f"{what} {shown} is out of range (ids must fit a 64-bit signed integer)", label, line)
    value = int(digits or "0")          # without its leading zeros, which int() counts against its limit too
    return check_int8(-value if text.startswith("-") else value, what, label, line)

