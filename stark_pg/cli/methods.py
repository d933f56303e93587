"""`stark-pg methods`: the retrieval methods, read from the registry, so that a user sees before a run
which ones call an LLM or need a training run, and which settings `-o KEY=VALUE` takes."""

from __future__ import annotations

import typer
from rich.table import Table

from stark_pg.cli.common import fail, out, print_json


def register(app: typer.Typer) -> None:
    app.command()(methods)


def methods(
    names: list[str] = typer.Argument(None, help="Only these methods (default: every one)."),
    json_: bool = typer.Option(False, "--json", help="Per method: name, module, summary, needs, settings "
                                                     "(name, type, default)."),
) -> None:
    """List the retrieval methods: what each does, what it needs beyond the SKB's indexes (an LLM,
    a training run) and its settings (`-o KEY=VALUE` of search and eval) with their defaults."""
    from stark_pg.retrieve import UnknownMethod
    from stark_pg.retrieve.catalog import all_methods, describe_method

    try:
        found = [describe_method(n) for n in names] if names else all_methods()
    except UnknownMethod as exc:
        fail(str(exc))
    if json_:
        print_json([m.to_dict() for m in found])
        return
    table = Table(show_lines=True)
    table.add_column("method", no_wrap=True)
    table.add_column("needs", no_wrap=True)
    table.add_column("what it does")
    table.add_column("settings (defaults)")
    for m in found:
        table.add_row(m.name, ", ".join(m.needs) or "-", m.summary,
                      " ".join(f"{s.name}={shown(s.default)}" for s in m.settings))
    out.print(table, highlight=False, markup=False)


def shown(default) -> str:
    """A default as one would type it after `-o KEY=`: none as nothing, booleans as true/false."""
    if default is None:
        return ""
    return str(default).lower() if isinstance(default, bool) else str(default)
