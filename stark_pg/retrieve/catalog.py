"""What each registered retrieval method is, read from its own module: the registry (METHODS) is the
one list of methods, so `stark-pg methods`, the help of `search` and `eval` and the README's checks
cannot drift from what `get_method` accepts when a method is added."""

from __future__ import annotations

import typing
from dataclasses import dataclass

from stark_pg.options import defaults
from stark_pg.retrieve import METHODS, get_method

KNOWN_NEEDS = ("llm", "training")
"""What a method may need beyond an SKB and its indexes (each method module's `NEEDS`)."""


@dataclass(frozen=True)
class Setting:
    name: str
    type: str
    default: object
    limits: tuple | None = None       # (low, high) from the Options' LIMITS; None on a side is unbounded
    choices: tuple | None = None      # the allowed values from the Options' CHOICES

    def to_dict(self) -> dict:
        return {"name": self.name, "type": self.type, "default": self.default} | (
            {"limits": list(self.limits)} if self.limits else {}) | (
            {"choices": list(self.choices)} if self.choices else {})


@dataclass(frozen=True)
class MethodInfo:
    name: str
    module: str
    summary: str
    needs: tuple[str, ...]
    settings: tuple[Setting, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "module": self.module, "summary": self.summary, "needs": list(self.needs),
                "settings": [s.to_dict() for s in self.settings]}


def names() -> list[str]:
    """Every method's CLI name, in the registry's order (simple ones first)."""
    return list(METHODS)


def describe_method(name: str) -> MethodInfo:
    """A method's name, summary (its module docstring's first paragraph, on one line), needs and settings."""
    module = get_method(name)
    needs = tuple(module.NEEDS)
    unknown = [n for n in needs if n not in KNOWN_NEEDS]
    if unknown:     # a programming error in the method module, not a user's: fail loudly
        raise ValueError(f"{module.__name__}.NEEDS: {unknown} not among {KNOWN_NEEDS}")
    return MethodInfo(name=name, module=module.__name__, summary=summary(module.__doc__ or ""), needs=needs,
                      settings=settings(module.Options))


def all_methods() -> list[MethodInfo]:
    return [describe_method(name) for name in METHODS]


def summary(docstring: str) -> str:
    """The first paragraph of a docstring as one line."""
    first = docstring.strip().split("\n\n", 1)[0]
    return " ".join(first.split())


def settings(options_class) -> tuple[Setting, ...]:
    hints = typing.get_type_hints(options_class)
    limits, choices = getattr(options_class, "LIMITS", {}), getattr(options_class, "CHOICES", {})
    return tuple(Setting(name, _type_name(hints[name]), value, limits.get(name), choices.get(name))
                 for name, value in defaults(options_class).items())


def _type_name(hint) -> str:
    """`int`, `str | None`: as the annotation reads, without `typing.` prefixes."""
    args = typing.get_args(hint)
    if args and type(None) in args:
        return " | ".join(_type_name(a) for a in args)
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint).replace("typing.", ""))


def method_help(separator: str) -> str:
    """Every method name joined by `separator`, for --help. Names only: reading each module's NEEDS
    would import every method (a second) on every command, since typer builds all help at start."""
    return separator.join(METHODS) + " (`stark-pg methods`: what each does, needs and takes)"
