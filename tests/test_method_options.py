"""Every method declares its settings one way: on its Options class (fields, LIMITS, CHOICES, `check`),
never in its search function, and the LLM settings through the one LLMOptions base. A bad value is
then refused with the same message by the command line's `-o`, the Python API and a direct Options."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap

import pytest

from stark_pg.options import LLM_SETTINGS, LLMOptions, MethodOptions, OptionError, options_from_values, parse_options
from stark_pg.retrieve import METHODS, get_method
from stark_pg.retrieve.results import configure


@pytest.mark.parametrize("name", list(METHODS))
def test_options_are_declared_on_the_options_class(name):
    module = get_method(name)
    assert issubclass(module.Options, MethodOptions)
    assert issubclass(module.Options, LLMOptions) == ("llm" in module.NEEDS)
    for cls in module.Options.__mro__:
        if cls is not LLMOptions:
            assert not set(LLM_SETTINGS) & set(vars(cls).get("__annotations__", {})), cls


@pytest.mark.parametrize("name", list(METHODS))
def test_no_search_function_checks_its_settings_itself(name):
    """A `raise OptionError` in search would fire only once a search runs: after an evaluation has
    started, and never for `stark-pg methods` or an API call that only builds the options."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(get_method(name).search)))
    raised = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Raise) and node.exc is not None
              and "OptionError" in ast.unparse(node.exc)]
    assert raised == []


CASES = [
    ("kar", "hops", "0", 0, "kar hops must be positive, not 0"),
    ("kar", "anchors", "graph", "graph", "kar anchors must be entities or retrieved, not 'graph'"),
    ("prf", "n", "0", 0, "prf n and doc_chars must be positive, not 0, 300"),
    ("hyde", "retriever", "sparse", "sparse", "retriever must be one of vss, bm25, hybrid, not 'sparse'"),
    ("hybrid", "fusion", "sum", "sum", "hybrid fusion must be rrf or weighted, not 'sum'"),
    ("multivss", "agg", "min", "min", "multivss agg must be max or mean, not 'min'"),
    ("vss+rerank", "k_max", "0", 0, "vss+rerank k_max must be positive, not 0"),
    ("4stepfocus", "llm_type_share", "2", 2.0, "4stepfocus llm_type_share must be between 0 and 1, not 2.0"),
    ("agent", "fallback", "agent", "agent", "agent fallback must be another method"),
    ("qagnn", "first_stage", "bm25", "bm25", "qagnn first_stage must be one of vss, hybrid, not 'bm25'"),
]


@pytest.mark.parametrize("method,key,raw,value,message", CASES)
def test_a_bad_setting_gets_one_message_everywhere(method, key, raw, value, message):
    options_class = get_method(method).Options
    for make in (lambda: options_class(**{key: value}),                      # Python: module.search(..., Options())
                 lambda: parse_options(options_class, [f"{key}={raw}"]),      # the command line's -o
                 lambda: options_from_values(options_class, {key: value}),   # the API's search(..., key=value)
                 lambda: configure(method, [f"{key}={raw}"])):               # `stark-pg search`, naming the settings
        with pytest.raises(OptionError) as caught:
            make()
        assert str(caught.value).startswith(message)


def test_good_settings_pass():
    for name in METHODS:
        options = get_method(name).Options()
        assert dataclasses.asdict(options) == dataclasses.asdict(get_method(name).Options(**dataclasses.asdict(options)))


def test_stark_pg_methods_shows_the_declared_limits_and_choices():
    from stark_pg.retrieve.catalog import describe_method

    settings = {s.name: s.to_dict() for s in describe_method("bm25").settings}
    assert settings["b"]["limits"] == [0.0, 1.0] and settings["engine"]["choices"] == ["auto", "textsearch", "sql"]
    assert "limits" not in settings["field"] and "choices" not in settings["field"]
