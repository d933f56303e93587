"""What every command shares: the connection it uses, errors turned into messages, JSON output."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

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

    def reads(self):
        """A function opening read connections (on a standby) when the DSN names several hosts: what an
        evaluation searches on while it stores on the primary; None for a DSN of one server."""
        from stark_pg.db import connect
        from stark_pg.db.connection import resolve_dsn, several_hosts

        url = resolve_dsn(self.dsn)
        return (lambda: connect(url, read=True)) if several_hosts(url) else None


def state(ctx: typer.Context) -> Context:
    return ctx.ensure_object(Context)


def reporter(quiet: bool):
    """Progress bars on a terminal unless quiet (or when stderr is not a terminal)."""
    return NullReporter() if quiet or not sys.stderr.isatty() else RichReporter(err)


WORKERS_HELP = ("Requests to a served model (LLM or openai: embedding model) at once; results are stored as a "
                "sequential run stores them. Default: STARK_PG_WORKERS, else 1.")


def concurrent_calls(value: int | None):
    """The `--workers` bound as a context for the command's work (stark_pg.llm.concurrency); a bad
    value (0, a negative, a non-number in STARK_PG_WORKERS) is one line naming it."""
    from stark_pg.llm.concurrency import WorkersError, resolve_workers, workers

    try:
        return workers(resolve_workers(value, "--workers"))
    except WorkersError as exc:
        fail(str(exc))


def print_json(value, stream=None) -> None:
    (stream or sys.stdout).write(json.dumps(value, indent=2, default=str) + "\n")


def fail(message: str, code: int = 1):
    # soft_wrap: one line whatever the terminal width, so that scripts and logs see one line per error
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def writable_dir(path: Path, option: str) -> Path:
    """`path` made (with its parents) and checked writable before a command starts its work, so that a
    bad output folder is one line at once, not a traceback after an hour of evaluation."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"{option} {path}: cannot make the folder ({exc.strerror or exc})")
    if not os.access(path, os.W_OK | os.X_OK):
        fail(f"{option} {path}: the folder is not writable")
    return path


def writable_file(path: Path, option: str) -> Path:
    """The folder of an output file checked as `writable_dir` does, and the file itself not a folder."""
    if path.is_dir():
        fail(f"{option} {path}: is a folder, not a file")
    writable_dir(path.parent if str(path.parent) else Path("."), option)
    if path.exists() and not os.access(path, os.W_OK):
        fail(f"{option} {path}: the file is not writable")
    return path


def expected_errors() -> tuple[type[BaseException], ...]:
    """Failures a user can cause or fix (bad input or cache file, unknown name, method or option, missing
    index or model, device, LLM or database unavailable): one line on stderr. Anything else is a bug: a
    traceback."""
    import psycopg

    from stark_pg.db.connection import DatabaseError
    from stark_pg.embed import DeviceError, ModelUnavailable
    from stark_pg.eval.run_sources import CompareError
    from stark_pg.llm.cache_io import CacheFileError
    from stark_pg.llm.errors import LLMError
    from stark_pg.options import OptionError
    from stark_pg.retrieve import MissingIndex, UnknownMethod
    from stark_pg.retrieve.vss import MissingQueryVector
    from stark_pg.skb.records import LoadError
    from stark_pg.skb.store import SkbExists

    # psycopg: the server refused the input (DataError: out of range, bad encoding, an SQL function's
    # invalid_parameter_value), one of our SQL functions raised on its arguments (RAISE EXCEPTION), or
    # the connection was lost mid-command
    return (LoadError, CacheFileError, CompareError, DatabaseError, SkbExists, OptionError, UnknownMethod,
            MissingIndex, MissingQueryVector,
            ModelUnavailable, DeviceError, LLMError, psycopg.OperationalError, psycopg.errors.DataError,
            psycopg.errors.RaiseException,
            UnicodeEncodeError)     # text that is not UTF-8 (bytes on a command line become lone surrogates)


def ray_options(executor: str, address: str | None, workers: int | None, gpus: float | None = None, *,
                check_installed: bool = True):
    """`--executor` and the Ray options checked, as RayOptions (None for the local executor, which takes
    none of them); with `check_installed`, a missing Ray is an error naming the extra to install."""
    from stark_pg.embed.executor import EXECUTORS

    wanted = executor.strip().lower()
    if wanted not in EXECUTORS:
        fail(f"--executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    given = [flag for flag, value in (("--ray-address", address), ("--ray-workers", workers),
                                      ("--gpus-per-worker", gpus)) if value is not None]
    if wanted == "local":
        if given:
            fail(f"{given[0]} is for --executor ray")
        return None
    from stark_pg.embed.ray_executor import RayOptions, RayUnavailable, require_ray

    try:
        options = RayOptions(address, workers, gpus)
        if check_installed:
            require_ray()
    except RayUnavailable as exc:
        fail(str(exc))
    return options
