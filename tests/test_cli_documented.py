"""Every command of the CLI is documented: used in the README or a docs page written by hand, listed in
the generated reference (docs/cli.md, which must equal what the CLI renders now), and its --help works."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from stark_pg.cli import app
from stark_pg.cli.reference import commands as reference_commands
from stark_pg.cli.reference import render

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "cli.md"
WRITTEN = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
                    if p != REFERENCE)


def commands() -> list[str]:
    """Every command that runs something (groups left out), as `train mfar`: the walk the reference uses."""
    return [full.removeprefix("stark-pg ") for full, command in reference_commands(typer.main.get_command(app))
            if not hasattr(command, "commands")]


@pytest.mark.parametrize("command", commands())
def test_command_is_shown_in_the_docs(command):
    assert f"stark-pg {command}" in WRITTEN, f"`stark-pg {command}` is used in neither README.md nor docs/*.md"


def test_the_cli_reference_is_up_to_date():
    assert REFERENCE.read_text(encoding="utf-8") == render(), \
        "docs/cli.md differs from the CLI: run `python -m stark_pg.cli.reference --write docs/cli.md`"


@pytest.mark.parametrize("command", commands())
def test_the_reference_has_a_section_per_command(command):
    assert f"\n## stark-pg {command}\n" in REFERENCE.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", commands())
def test_help_explains_the_command(command):
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_help_paragraphs_are_reflowed_to_the_terminal_not_the_source():
    """A docstring's paragraph wrapped at the source's width is one paragraph in --help: at 200 columns
    its sentences run on one line. Lists and indented lines keep their breaks."""
    from typer.testing import CliRunner

    from stark_pg.cli.app import reflowed

    assert reflowed("one\ntwo\n\n- a\n- b\n\nx\n  y") == "one two\n\n- a\n- b\n\nx\n  y"
    result = CliRunner().invoke(app, ["train", "fusion", "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert result.exit_code == 0
    assert "(mFAR's pairs), the answer type the nearest training queries vote for" in result.output
