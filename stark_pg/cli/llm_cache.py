"""`stark-pg llm-cache ...`: what stark.llm_cache holds, and files to keep it or share it."""

from __future__ import annotations

import os
import sys

import typer
from rich.table import Table

from stark_pg.cli.common import err, fail, out, print_json, state

app = typer.Typer(help="The LLM cache (stark.llm_cache): what it holds; export it to a file and import it "
                       "elsewhere, so that a rebuilt database or a colleague replays runs without calls.",
                  no_args_is_help=True)

FILE_HELP = "JSON Lines, one object per cache row; gzip when the name ends in .gz; - for standard {}."


@app.command()
def stats(ctx: typer.Context, json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Rows per provider and model, with their LLM seconds, tokens, cost, oldest and newest.

    Seconds, tokens and cost add up what the cached calls took (cost null where the model's price is
    unknown); oldest and newest are the rows' created_at."""
    from stark_pg.llm.cache_io import stats as cache_stats

    with state(ctx).connect() as conn:
        rows = cache_stats(conn)
    if json_:
        print_json(rows)
        return
    if not rows:
        out.print("the LLM cache is empty")
        return
    table = Table(title="stark.llm_cache", title_justify="left")
    for title in ("provider", "model", "rows", "seconds", "tokens in / out", "cost USD", "oldest", "newest"):
        table.add_column(title, justify="left" if title in ("provider", "model") else "right",
                         no_wrap=title in ("oldest", "newest"))
    for row in rows:
        tokens = f"{_number(row['prompt_tokens'], '{:,}')} / {_number(row['completion_tokens'], '{:,}')}"
        table.add_row(row["provider"], row["model"], f"{row['rows']:,}", _number(row["seconds"], "{:,.1f}"),
                      tokens, _number(row["cost_usd"], "{:,.4f}"), _when(row["oldest"]), _when(row["newest"]))
    out.print(table)
    total = sum(row["rows"] for row in rows)
    seconds = sum(row["seconds"] or 0 for row in rows)
    out.print(f"{total:,} rows, {seconds:,.1f} LLM seconds", highlight=False)


def _number(value, form: str) -> str:
    return "-" if value is None else form.format(value)


def _when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M")


@app.command()
def export(ctx: typer.Context,
           file: str = typer.Argument(..., help=FILE_HELP.format("output")),
           provider: str = typer.Option(None, "--provider", help="Only this provider's rows (openai, anthropic)."),
           model: str = typer.Option(None, "--model", help="Only this model's rows."),
           since: str = typer.Option(None, "--since", help="Only rows created at or after this ISO 8601 date or time "
                                                          "(2026-11-01, 2026-11-01T12:00Z; without a zone, the "
                                                          "server's)."),
           json_: bool = typer.Option(False, "--json", help="Print {\"file\", \"rows\"} as JSON (on stderr when "
                                                           "FILE is -).")) -> None:
    """Write the cache's rows to a JSON Lines file (gzip for .gz), to keep or share them.

    Every column, request and response exactly as stored, created_at in UTC, in key order; read
    through a server-side cursor, so any size fits. The file appears only once complete."""
    from datetime import datetime

    from stark_pg.llm.cache_io import export_file

    try:
        after = datetime.fromisoformat(since) if since else None
    except ValueError:
        fail(f"--since {since!r} is not an ISO 8601 date or time (2026-11-01, 2026-11-01T12:00Z)")
    with state(ctx).connect() as conn:
        try:
            written = export_file(conn, file, provider=provider, model=model, since=after)
        except BrokenPipeError:           # `... export - | head`: the reader has seen enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
    report = {"file": file, "rows": written}
    if json_:
        print_json(report, sys.stderr if file == "-" else sys.stdout)
        return
    (err if file == "-" else out).print(f"wrote {written:,} rows to {file}", highlight=False, soft_wrap=True)


@app.command(name="import")
def import_(ctx: typer.Context,
            file: str = typer.Argument(..., help=FILE_HELP.format("input")),
            replace: bool = typer.Option(False, "--replace", help="Overwrite rows whose key (provider, model, "
                                                                  "request_hash) is already in the cache; by "
                                                                  "default they are kept."),
            json_: bool = typer.Option(False, "--json", help="Print the counts (rows, inserted, kept, replaced) "
                                                            "as JSON.")) -> None:
    """Read a file written by `llm-cache export` into the cache, all or nothing.

    Every line is checked (JSON, keys, types, a 64-hex request_hash, no key twice); the first bad one
    stops the import with FILE:LINE and what is wrong, and nothing is imported (one transaction).
    Rows whose key is already here are kept unless --replace. A `cache=only` replay of the run that
    filled the cache then needs no LLM, with the same llm and base_url (or STARK_PG_LLM_ENDPOINT):
    the key includes the endpoint."""
    from stark_pg.llm.cache_io import import_file

    with state(ctx).connect() as conn:
        counts = import_file(conn, file, replace=replace)
    if json_:
        print_json(counts.as_dict())
        return
    out.print(f"{counts.rows:,} rows read from {file}: {counts.inserted:,} inserted, {counts.kept:,} kept, "
              f"{counts.replaced:,} replaced", highlight=False, soft_wrap=True)
