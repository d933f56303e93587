"""What every command shares: the connection it uses, errors turned into messages, JSON output."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.markup import escape

from stark_pg.progress import NullReporter, RichReporter

err = Console(stderr=True)
out = Console()


@dataclass
class Context:
    dsn: str | None = None

    def connect(self, **kwargs):
        from stark_pg.db import connect

        return connect(self.dsn, **kwargs)


def state(ctx: typer.Context) -> Context:
    return ctx.ensure_object(Context)


def reporter(quiet: bool):
    """Progress bars on a terminal unless quiet (or when stderr is not a terminal)."""
    return NullReporter() if quiet or not sys.stderr.isatty() else RichReporter(err)


def print_json(value, stream=None) -> None:
    (stream or sys.stdout).write(json.dumps(value, indent=2, default=str) + "\n")


def fail(message: str, code: int = 1):
    # soft_wrap: one line whatever the terminal width, so that scripts and logs see one line per error
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
