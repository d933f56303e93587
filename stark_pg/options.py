"""`--option key=value` pairs from the command line into a method's Options dataclass, typed and checked.

A method declares everything about its settings on its Options class: each setting's type and default
(the dataclass fields), numeric bounds (`LIMITS`), allowed values (`CHOICES`) and any rule that joins
settings (`check`, run whenever an Options is made). The command line (`-o`), the Python API and a
direct `module.search(..., Options(...))` therefore refuse the same values with the same message, and
before a search starts, not from inside it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing


class OptionError(ValueError):
    pass


def did_you_mean(word: str, known) -> str:
    """"did you mean 'X'? " for the known name closest to a mistyped one (difflib), else ""."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


class MethodOptions:
    """Base of every method's Options dataclass: `check` runs when an instance is made, so no search
    function checks its settings itself. A subclass overrides `check` (calling super().check()) with
    the rules LIMITS and CHOICES cannot state, raising OptionError."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        pass


@dataclasses.dataclass
class LLMOptions(MethodOptions):
    """The LLM settings of every method that calls one at query time (NEEDS has "llm"); None falls back
    to the environment (stark_pg.llm.settings)."""

    llm: str | None = None        # PROVIDER:MODEL, e.g. openai:gpt-4o-mini (None: STARK_PG_LLM)
    base_url: str | None = None   # OpenAI/Anthropic-compatible server (None: STARK_PG_LLM_BASE_URL)
    cache: str | None = None      # use | only | refresh (None: STARK_PG_LLM_CACHE, else use)


LLM_SETTINGS = tuple(f.name for f in dataclasses.fields(LLMOptions))


def parse_options(options_class, pairs: list[str] | None):
    """An instance of `options_class` with the given `key=value` pairs applied (types from the annotations)."""
    hints = typing.get_type_hints(options_class)
    names = {f.name for f in dataclasses.fields(options_class)}
    values = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names:
            raise OptionError(f"--option {pair!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(names))}")
        values[key] = _checked(options_class, key, _convert(raw, hints[key], pair), pair)
    return given(options_class(**values), values)


def options_from_values(options_class, values: dict | None):
    """An instance of `options_class` from Python values (the API's `search(..., k1=1.5)`): each checked
    as a command-line value would be. A string is parsed as on the command line; a list of strings
    (mFAR's mask) is joined with commas; anything else must already have the annotated type."""
    hints = typing.get_type_hints(options_class)
    names = {f.name for f in dataclasses.fields(options_class)}
    checked = {}
    for key, value in (values or {}).items():
        pair = f"{key}={value}"
        if key not in names:
            raise OptionError(f"setting {key!r}: expected one of {', '.join(sorted(names))}")
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if isinstance(value, str):
            value = _convert(value, hints[key], pair, label="setting")
        else:
            value = _typed(value, hints[key], pair)
        checked[key] = _checked(options_class, key, value, pair, label="setting")
    return given(options_class(**checked), checked)


def given(options, values) -> object:
    """`options`, marked with the names of the settings its caller gave (`options._given`): a method
    whose defaults depend on the SKB (hybrid's tuned ones) keeps what was given and fills in the rest.
    Options made directly in code carry no mark and are taken as they are."""
    object.__setattr__(options, "_given", frozenset(values))
    return options


def _typed(value, hint, pair: str):
    """`value` if it is of a type the annotation allows (an int passes for a float, a bool for nothing else)."""
    kinds = [t for t in typing.get_args(hint) if t is not type(None)] or [hint]
    if value is None and type(None) in typing.get_args(hint):
        return None
    kind = kinds[0]
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    raise OptionError(f"setting {pair!r}: {value!r} is not a valid {getattr(kind, '__name__', kind)}")


def _checked(options_class, key: str, value, pair: str, label: str = "--option"):
    """Every method's numbers must be finite (nan or inf only turn into NaN scores), and within the
    bounds its Options class declares in an optional `LIMITS = {name: (low, high)}` class attribute;
    a text option one of the values its optional `CHOICES = {name: (value, ...)}` lists."""
    if isinstance(value, float) and not math.isfinite(value):
        raise OptionError(f"{label} {pair!r}: must be a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
        raise OptionError(f"{label} {pair!r}: must be between {INT_MIN} and {INT_MAX}")
    low, high = getattr(options_class, "LIMITS", {}).get(key, (None, None))
    if value is not None and ((low is not None and value < low) or (high is not None and value > high)):
        raise OptionError(f"{label} {pair!r}: must be between {low} and {high}")
    choices = getattr(options_class, "CHOICES", {}).get(key)
    if choices is not None and value not in choices:
        raise OptionError(f"{label} {pair!r}: must be one of {', '.join(choices)}")
    return value


# Numbers as people write them: ASCII digits, no `1_000` (Python's int() and float() also take underscores
# and other scripts' digits); nan and inf are numbers here, which _checked refuses as not finite.
_INT = re.compile(r"[+-]?[0-9]{1,20}")
_FLOAT = re.compile(r"[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|nan|inf|infinity)", re.IGNORECASE)
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
"""Integer options go to PostgreSQL `integer` parameters: no function would take a value beyond these."""


def _convert(raw: str, hint, pair: str, label: str = "--option"):
    kinds = [t for t in typing.get_args(hint) if t is not type(None)] or [hint]
    if raw.lower() in ("none", "null", "") and type(None) in typing.get_args(hint):
        return None
    kind = kinds[0]
    if kind is str:
        return _text(raw, pair, label)
    try:
        if kind is bool:
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1", "yes")
        if (kind is int and not _INT.fullmatch(raw.strip())) or (kind is float and not _FLOAT.fullmatch(raw.strip())):
            raise ValueError(raw)
        return kind(raw)
    except (TypeError, ValueError):
        raise OptionError(f"{label} {pair!r}: {raw!r} is not a valid {getattr(kind, '__name__', kind)}") from None


def _text(raw: str, pair: str, label: str = "--option") -> str:
    """Text PostgreSQL can hold: no NUL character, no lone surrogate (Python's stand-in for command-line
    bytes that are not UTF-8)."""
    if "\x00" in raw:
        raise OptionError(f"{label} {pair!r}: contains a NUL character")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise OptionError(f"{label} {pair!r}: is not valid UTF-8") from None
    return raw


def defaults(options_class) -> dict:
    """Each setting's default, in declaration order (a `default_factory` is called, so a list default
    shows as the list, not as dataclasses' MISSING marker)."""
    return {f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default
            for f in dataclasses.fields(options_class)}


def describe(options_class) -> str:
    """'k1=1.2, b=0.75, field=None' — the knobs of a method and their defaults, for --help and errors."""
    return ", ".join(f"{name}={value!r}" for name, value in defaults(options_class).items())
