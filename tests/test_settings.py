"""The environment is read in one place (stark_pg/config.py), and docs/configuration.md lists exactly the
variables declared there: a variable cannot be read without being documented, nor documented after the
code stopped reading it."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from stark_pg import config

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stark_pg"
DOC = ROOT / "docs" / "configuration.md"


def environment_reads(path: Path) -> list[int]:
    """Lines of `path` that touch os.environ or os.getenv (any use: a read, a write, a setdefault)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "os" and node.attr in ("environ", "getenv")]


def env_names(path: Path) -> set[str]:
    """The variables `path` reads through config.env: literal names, config's constants, or module
    constants set to either; where env is called with a variable, every declared name the module passes
    to a function (the LLM settings' and the providers' helpers take the variable's name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants: dict[str, str] = {}

    def value(arg) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return constants.get(arg.id, getattr(config, arg.id, None))
        return None

    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found = value(node.value)
            if found is not None:
                constants[node.targets[0].id] = found
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    names = {value(c.args[0]) for c in calls if c.args and getattr(c.func, "id", getattr(c.func, "attr", None)) == "env"}
    if None in names:       # env(variable): the declared names this module passes to its own helpers
        names |= {value(arg) for c in calls for arg in c.args if value(arg) in config.VARIABLES}
    return names - {None}


def test_only_config_touches_the_environment():
    touching = {str(p.relative_to(ROOT)): lines for p in sorted(PACKAGE.rglob("*.py"))
                for lines in [environment_reads(p)] if lines}
    assert list(touching) == ["stark_pg/config.py"]


def test_every_declared_variable_is_read():
    read = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "config.py" or path.parent != PACKAGE:
            read |= env_names(path)
    read |= {config.ENV_HOME, config.ENV_DSN}          # config.home_dir and config.configured_dsn
    assert set(config.VARIABLES) == read


def test_the_documentation_lists_the_declared_variables():
    documented = set(re.findall(r"`((?:STARK_PG|OPENAI|ANTHROPIC|HF)_[A-Z_]+)`", DOC.read_text(encoding="utf-8")))
    assert documented == set(config.VARIABLES)


def test_an_undeclared_variable_is_refused(monkeypatch):
    monkeypatch.setenv("STARK_PG_NOT_A_SETTING", "1")
    with pytest.raises(KeyError, match="not declared"):
        config.env("STARK_PG_NOT_A_SETTING")
    monkeypatch.setenv(config.ENV_LLM, "openai:x")
    assert config.env(config.ENV_LLM) == "openai:x" == os.environ[config.ENV_LLM]
