"""`--option KEY=VALUE` parsing into a method's settings."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from stark_pg.options import OptionError, describe, parse_options


@dataclass
class Knobs:
    k1: float = 1.2
    top: int = 3
    exact: bool = False
    field: str | None = None


def test_values_take_the_annotated_types():
    knobs = parse_options(Knobs, ["k1=1.5", "top=7", "exact=true", "field=description"])
    assert knobs == Knobs(k1=1.5, top=7, exact=True, field="description")
    assert parse_options(Knobs, ["field=none"]).field is None
    assert parse_options(Knobs, None) == Knobs()


@pytest.mark.parametrize("pair, message", [("k1=abc", "not a valid float"), ("top=1.5", "not a valid int"),
                                           ("exact=maybe", "not a valid bool"), ("colour=red", "KEY one of"),
                                           ("k1", "KEY=VALUE")])
def test_bad_options_name_the_pair(pair, message):
    with pytest.raises(OptionError, match=message):
        parse_options(Knobs, [pair])


def test_describe_lists_defaults():
    assert describe(Knobs) == "k1=1.2, top=3, exact=False, field=None"
