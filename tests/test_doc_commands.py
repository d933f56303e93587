"""Every `stark-pg ...` command line shown in the README and the docs pages parses with the real CLI:
no option that was renamed or removed, no missing argument, no value of the wrong type. (The SQL
examples run in tests/test_readme.py; README command 1's path runs in tests/test_api.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from stark_pg.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]   # docs/history/ too
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def command_lines(page: Path) -> list[tuple[str, list[str]]]:
    """(line as written, arguments after `stark-pg`) of each command in the page's bash blocks; a
    line of several commands (`&&`, `|`, `;`) gives one entry per `stark-pg` command in it."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            try:
                tokens = list(lexer)
            except ValueError:           # an unbalanced quote: not a command line
                continue
            segment: list[str] = []
            for token in [*tokens, ";"]:
                if token and set(token) <= set("&|;<>()"):
                    while segment and ENV.match(segment[0]):
                        segment = segment[1:]
                    if segment and segment[0].endswith("stark-pg"):
                        found.append((line.strip(), segment[1:]))
                    segment = []
                else:
                    segment.append(token)
    return found


def all_lines() -> list[tuple[str, str, list[str]]]:
    return [(page.name, line, args) for page in PAGES for line, args in command_lines(page)]


def test_the_pages_show_commands():
    assert len(all_lines()) >= 40


@pytest.mark.parametrize("page,line,args", all_lines(), ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None)
def test_the_command_line_parses(page, line, args):
    group = typer.main.get_command(app)
    command, name, rest = group, "stark-pg", list(args)
    # walk down the groups to the command, then let its own parser check the rest
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])
        default = getattr(command, "default_command", None)     # `stark-pg synthesize SKB` is `... make SKB`
        if sub is None and default:
            rest = [default, *rest]
            sub = command.commands[default]
        assert sub is not None, f"{page}: `{line}`: no command {rest[0]!r} under {name!r}"
        command, name, rest = sub, f"{name} {rest[0]}", rest[1:]
    if hasattr(command, "commands"):
        return                                  # a group shown with --help or options only
    try:
        command.make_context(name, rest)
    except Exception as exc:                    # click's UsageError / BadParameter, typer's own copy
        pytest.fail(f"{page}: `{line}` does not parse: {exc}")
