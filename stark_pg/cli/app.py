"""`stark-pg`: load semi-structured knowledge bases into PostgreSQL, index, search and evaluate them."""

from __future__ import annotations

import inspect
import sys

import typer

from stark_pg.cli import compare as compare_commands
from stark_pg.cli import db as db_commands
from stark_pg.cli import evaluate as evaluate_commands
from stark_pg.cli import llm_cache as llm_cache_commands
from stark_pg.cli import methods as methods_commands
from stark_pg.cli import reproduce as reproduce_commands
from stark_pg.cli import retrieval as retrieval_commands
from stark_pg.cli import serve as serve_commands
from stark_pg.cli import skb as skb_commands
from stark_pg.cli import synthesize as synthesize_commands
from stark_pg.cli import train as train_commands
from stark_pg.cli import tune as tune_commands
from stark_pg.cli.common import Context, expected_errors, fail

app = typer.Typer(
    name="stark-pg",
    help=(
        "Retrieval over semi-structured knowledge bases (STaRK) inside PostgreSQL.\n\n"
        "With no --dsn (and no STARK_PG_DSN), stark-pg starts its own embedded PostgreSQL 18 with "
        "pgvector in STARK_PG_HOME (default: your user data directory) and keeps it running between "
        "commands; `stark-pg db stop` stops it."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from stark_pg import __version__

        typer.echo(f"stark-pg {__version__}")
        raise typer.Exit()


@app.callback()
def _global(ctx: typer.Context,
            dsn: str = typer.Option(None, "--dsn", envvar="STARK_PG_DSN", show_envvar=True,
                                    help="PostgreSQL (15+, with pgvector) to use instead of the embedded server, "
                                         "e.g. postgresql://user:pass@host/db."),
            version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                         help="Print stark-pg's version and exit.")) -> None:
    ctx.obj = Context(dsn=dsn)


skb_commands.register(app)
retrieval_commands.register(app)
methods_commands.register(app)
evaluate_commands.register(app)
compare_commands.register(app)
reproduce_commands.register(app)
tune_commands.register(app)
train_commands.register(app)
serve_commands.register(app)
app.add_typer(db_commands.app, name="db")
app.add_typer(llm_cache_commands.app, name="llm-cache")
app.add_typer(synthesize_commands.app, name="synthesize")


def reflowed(text: str) -> str:
    """The text with each paragraph's lines joined: typer's help keeps a docstring's single line breaks,
    so a paragraph wrapped at the source's width came out ragged at any other terminal's. A paragraph
    with a line that is indented, a list item or click's no-rewrap mark (\\b) keeps its breaks."""
    def joined(paragraph: str) -> str:
        lines = paragraph.split("\n")
        kept = any(line[:1] in (" ", "\b") or line.startswith(("- ", "* ")) for line in lines)
        return paragraph if kept else " ".join(line.strip() for line in lines)

    return "\n\n".join(joined(p) for p in text.split("\n\n"))


def _reflow_help(group: typer.Typer) -> None:
    """Every command's help (its docstring, unless given) reflowed, through the sub-command groups."""
    for info in group.registered_commands:
        text = info.help or inspect.getdoc(info.callback)
        if text:
            info.help = reflowed(text)
    for sub in group.registered_groups:
        _reflow_help(sub.typer_instance)


_reflow_help(app)


def _check_arguments_are_text(args: list[str]) -> None:
    """Bytes on the command line that are not UTF-8 reach Python as lone surrogates, which no query can
    send to PostgreSQL: name the argument instead of failing deep inside."""
    for position, arg in enumerate(args, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "backslashreplace").decode("ascii", "replace")
            fail(f"argument {position} ({shown}) is not valid UTF-8 text")


def error_message(exc: BaseException) -> str:
    """What the user is told of an expected error: for a database error its primary message and its hint
    (what to run), not the CONTEXT lines (which PL/pgSQL function raised it, from which line)."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    if not primary:
        return str(exc)
    hint = getattr(diag, "message_hint", None)
    return f"{primary}; {hint}" if hint else primary


def main() -> None:
    """Console entry point: expected failures become one clear line on stderr and exit code 1."""
    try:
        _check_arguments_are_text(sys.argv[1:])
    except typer.Exit as exit_:
        raise SystemExit(exit_.exit_code) from None
    try:
        app()
    except (SystemExit, KeyboardInterrupt):
        raise       # before expected_errors(), whose imports (psycopg, numpy) would slow every --help
    except Exception as exc:
        if not isinstance(exc, expected_errors()):
            raise
        message = " ".join(error_message(exc).split()) or type(exc).__name__
        try:
            fail(message)
        except typer.Exit as exit_:
            raise SystemExit(exit_.exit_code) from None
