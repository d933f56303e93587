"""Every command of the CLI is documented in the README, and every command's --help works."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from stark_pg.cli import app

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def commands() -> list[str]:
    group = typer.main.get_command(app)
    found = []
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += [f"{name} {sub}" for sub in command.commands]
        else:
            found.append(name)
    return found


@pytest.mark.parametrize("command", commands())
def test_command_is_in_the_readme(command):
    assert f"stark-pg {command}" in README, f"`stark-pg {command}` is not documented in README.md"


@pytest.mark.parametrize("command", commands())
def test_help_explains_the_command(command):
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0 and "Usage" in result.output
