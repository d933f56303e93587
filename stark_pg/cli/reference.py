"""The CLI reference (docs/cli.md), generated from the commands themselves so that it cannot drift.

Every command's usage, help text, arguments and options come from the click objects typer builds, the
same ones `--help` prints; a test (tests/test_cli_documented.py) fails when docs/cli.md differs from what
this module renders. Regenerate it after changing a command:

    python -m stark_pg.cli.reference --write docs/cli.md
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import typer.main

HEADER = """# CLI reference

Generated from the commands' own definitions by `python -m stark_pg.cli.reference --write docs/cli.md`
(do not edit by hand: `tests/test_cli_documented.py` fails when this page and the CLI differ). Every
command also prints this with `--help`. How the commands fit together: the [README](../README.md).
"""


def commands(group, prefix: str = "stark-pg") -> list[tuple[str, object]]:
    """(full name, command) of every command and subcommand, in the order `--help` lists them."""
    found = []
    for name, command in group.commands.items():
        full = f"{prefix} {name}"
        found.append((full, command))
        if _is_group(command):
            found += commands(command, full)
    return found


def _is_group(command) -> bool:
    return hasattr(command, "commands")


def _is_argument(param) -> bool:
    """typer builds on its own copy of click (typer._click), so the kind is read from the object, not its class."""
    return type(param).__name__.endswith("Argument")


_TYPES = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "Path": "PATH"}


def _type_label(param) -> str:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    name = getattr(annotation, "__name__", "") or "TEXT"
    return _TYPES.get(name, name.upper())


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(param) -> str:
    default = param.default
    if callable(default) or default is None or default == () or default == []:
        return ""
    if getattr(param, "is_flag", False):
        if param.secondary_opts:
            name = param.opts[0] if default else param.secondary_opts[0]
            return f"`{name}`"
        return "" if not default else "on"
    return f"`{default}`"


def _names(param) -> str:
    if _is_argument(param):
        return f"`{param.name.upper()}`" + ("" if param.required else " (optional)")
    names = " ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    if not getattr(param, "is_flag", False):
        names += f" {_type_label(param)}"
    if getattr(param, "envvar", None):
        names += f" (env `{param.envvar}`)"
    return names


def render_command(full: str, command) -> str:
    ctx = command.context_class(command, info_name=full)
    usage = " ".join(command.collect_usage_pieces(ctx))
    out = [f"## {full}", "", "```", f"{full} {usage}".rstrip(), "```", ""]
    if command.help:
        out += [inspect.cleandoc(command.help).split("\f")[0].strip(), ""]
    params = [p for p in command.params if p.name != "help" and not getattr(p, "hidden", False)]
    if _is_group(command):
        out += ["| command | what it does |", "| --- | --- |"]
        for name, sub in command.commands.items():
            anchor = f"{full} {name}".lower().replace(" ", "-")
            out.append(f"| [`{name}`](#{anchor}) | {_cell(sub.get_short_help_str(limit=200))} |")
        out.append("")
    if params:
        out += ["| argument / option | default | meaning |", "| --- | --- | --- |"]
        for param in params:
            out.append(f"| {_names(param)} | {_default(param)} | {_cell(getattr(param, 'help', '') or '')} |")
        out.append("")
    return "\n".join(out)


def render() -> str:
    """The whole reference page, as docs/cli.md holds it."""
    from stark_pg.cli import app

    root = typer.main.get_command(app)
    parts = [HEADER, render_command("stark-pg", root)]
    parts += [render_command(full, command) for full, command in commands(root)]
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print (or --write) the CLI reference in Markdown.")
    parser.add_argument("--write", metavar="FILE", help="write it to FILE instead of printing it")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
