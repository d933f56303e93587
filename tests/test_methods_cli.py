"""`stark-pg methods` and the --method help of search and eval come from the method registry, and
each method's NEEDS (an LLM, a training run) is right: what a user reads before choosing a method."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import typer.main
from typer.testing import CliRunner

from stark_pg.cli import app
from stark_pg.retrieve import METHODS, get_method
from stark_pg.retrieve.catalog import KNOWN_NEEDS, all_methods, summary

KNOWN = {   # what a few methods need, by hand: the check on the modules' NEEDS
    "bm25": set(), "vss": set(), "hybrid": set(), "prf": set(),
    "mfar": {"training"}, "fusion": {"training"},
    "kar": {"llm"}, "hyde": {"llm"}, "rar": {"llm"}, "agr": {"llm"}, "4stepfocus": {"llm"}, "vss+rerank": {"llm"},
    "agent": {"llm", "training"}, "fusion+rerank": {"llm", "training"},
}


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def method_option_help(command: str) -> str:
    click_command = typer.main.get_command(app).commands[command]
    return next(p.help for p in click_command.params if "--method" in getattr(p, "opts", ()))


def words(text: str) -> set[str]:
    return set(re.split(r"[\s,|│().`:]+", text))


def test_every_method_is_listed_with_its_needs_and_settings():
    listed = {m["name"]: m for m in json.loads(invoke("methods", "--json"))}
    assert list(listed) == list(METHODS)
    for name, entry in listed.items():
        module = get_method(name)
        assert entry["summary"] and "\n" not in entry["summary"]
        assert entry["summary"] == summary(module.__doc__)
        assert [s["name"] for s in entry["settings"]] == [f.name for f in dataclasses.fields(module.Options)]
    assert {s["name"]: s["default"] for s in listed["bm25"]["settings"]} == {"k1": 1.2, "b": 0.75, "field": None,
                                                                            "engine": "auto"}
    table = invoke("methods")
    for name in METHODS:
        assert name in words(table), name


def test_needs_of_known_methods():
    needs = {m.name: set(m.needs) for m in all_methods()}
    assert set(KNOWN) <= set(needs)
    for name, expected in KNOWN.items():
        assert needs[name] == expected, name


def test_needs_follow_from_what_a_method_is():
    """Checked in general, so a new method cannot declare the wrong thing: it needs an LLM exactly when
    its settings choose one (`llm`), and training exactly when `stark-pg train` has a command of its name
    or the method says which commands train what it builds on (`TRAINED_BY`, each a real command)."""
    trainable = set(typer.main.get_command(app).commands["train"].commands)
    for name in METHODS:
        module = get_method(name)
        assert set(module.NEEDS) <= set(KNOWN_NEEDS), name
        settings = {f.name for f in dataclasses.fields(module.Options)}
        assert ("llm" in module.NEEDS) == ("llm" in settings), name
        trained_by = set(getattr(module, "TRAINED_BY", ()))
        assert trained_by <= trainable, name
        assert ("training" in module.NEEDS) == (name in trainable or bool(trained_by)), name


@pytest.mark.parametrize("command", ["search", "eval"])
def test_method_help_names_every_method(command):
    assert set(METHODS) <= words(method_option_help(command))
    rendered = " ".join(invoke(command, "--help").replace("│", " ").split())     # as read, whatever the wrapping
    assert "4stepfocus" in rendered and "vss+rerank" in rendered and "stark-pg methods" in rendered


def test_one_method_and_an_unknown_one():
    assert [m["name"] for m in json.loads(invoke("methods", "kar", "bm25", "--json"))] == ["kar", "bm25"]
    result = CliRunner().invoke(app, ["methods", "nope"])
    assert result.exit_code == 1
    assert "unknown method 'nope'" in result.output
