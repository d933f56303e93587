"""Reading text inputs line by line so that every error, decoding included, names its line."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from stark_pg.skb.records import LoadError


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


def parse_int(text: str, what: str, label: str, line: int) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise LoadError(f"{what} {text!r} is not an integer", label, line) from None
