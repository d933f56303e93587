"""The README's psql examples run, as written, against the real slice."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg

README = Path(__file__).resolve().parents[1] / "README.md"


def sql_examples() -> list[str]:
    blocks = re.findall(r"```sql\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    return [s.strip() for block in blocks for s in block.split(";") if s.strip() and
            not all(line.startswith("--") for line in s.strip().splitlines())]


def test_every_sql_example_in_the_readme_returns_rows(ibd_indexed_url):
    conn = psycopg.connect(ibd_indexed_url, autocommit=True)
    examples = sql_examples()
    assert len(examples) >= 5
    for statement in examples:
        rows = conn.execute(statement).fetchall()
        assert rows, f"README example returned nothing:\n{statement}"
    conn.close()
