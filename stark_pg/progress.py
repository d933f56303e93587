"""Progress reporting for long work: rich bars on a terminal, nothing when quiet.

Library code asks a `Reporter` for a stage and advances it in batches; the CLI decides whether the
user sees bars (counts, rates, elapsed time) or nothing (`--quiet`, `--json`, tests).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Protocol


class Stage(Protocol):
    def advance(self, n: int = 1) -> None: ...

    def describe(self, text: str) -> None: ...  # what the stage is doing now, shown beside its bar


class Reporter(Protocol):
    def stage(self, label: str, total: int | None = None, unit: str = ""): ...  # a context manager yielding a Stage


class _NullStage:
    def advance(self, n: int = 1) -> None:
        pass

    def describe(self, text: str) -> None:
        pass


class NullReporter:
    """Reports nothing: the default for library calls and tests."""

    @contextmanager
    def stage(self, label: str, total: int | None = None, unit: str = "") -> Iterator[Stage]:
        yield _NullStage()


class RichReporter:
    """A bar per stage on stderr, with the count, the rate per second and the elapsed time.

    A stage given a `unit` names it in the rate ("212 documents/s"): where what is counted differs from
    what the rate is about (an embedding stage counts nodes but is judged by documents per second), the
    stage says so with `describe`."""

    def __init__(self, console=None):
        from rich.console import Console

        self.console = console or Console(stderr=True)

    @contextmanager
    def stage(self, label: str, total: int | None = None, unit: str = "") -> Iterator[Stage]:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                   TimeElapsedColumn)

        count = MofNCompleteColumn() if total else TextColumn("{task.completed:,.0f}")
        rate = TextColumn("{task.fields[rate]}")
        with Progress(SpinnerColumn(), TextColumn("{task.description:<14}"), BarColumn(), count, rate,
                      TimeElapsedColumn(), console=self.console) as bar:
            task = bar.add_task(label, total=total, rate="")

            class _Stage:
                described = False

                def advance(self, n: int = 1) -> None:
                    bar.advance(task, n)
                    speed = bar.tasks[task].speed
                    if speed and not self.described:
                        bar.update(task, rate=rate_text(speed, unit))

                def describe(self, text: str) -> None:
                    self.described = True
                    bar.update(task, rate=text)

            yield _Stage()


def rate_text(per_second: float, unit: str = "") -> str:
    """'212 documents/s', '3.4 documents/s' (slow stages keep a decimal), or '212/s' without a unit."""
    shown = f"{per_second:,.1f}" if per_second < 10 else f"{per_second:,.0f}"
    return f"{shown} {unit}/s" if unit else f"{shown}/s"
