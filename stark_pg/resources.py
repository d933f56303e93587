"""Where the project's SQL files and alembic migrations live.

In a source checkout (and an editable install) they are the top-level `sql/` and
`migrations/` folders; a wheel carries them inside the package under `_resources/`.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _resource_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "_resources" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"stark-pg is installed without its {name}/ folder (looked beside {_PACKAGE})")


def sql_dir() -> Path:
    return _resource_dir("sql")


def migrations_dir() -> Path:
    return _resource_dir("migrations")


def sql_text(relative: str) -> str:
    """The text of one file under `sql/`, e.g. `sql_text("schema/0001_core.sql")`."""
    return (sql_dir() / relative).read_text(encoding="utf-8")


@cache
def template_sections(relative: str) -> dict[str, str]:
    """The sections of a file under `sql/templates/`, by the name on their `-- name:` line: SQL whose
    identifiers or expressions differ per model, filled in with psycopg.sql by the caller."""
    parts = re.split(r"^-- name: (\w+)[^\n]*\n", sql_text(f"templates/{relative}"), flags=re.M)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2])}


@cache
def queries():
    """Named SQL statements from `sql/queries/*.sql`, loaded once with aiosql (psycopg 3 driver)."""
    import aiosql

    return aiosql.from_path(sql_dir() / "queries", "psycopg")
