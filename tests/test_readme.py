"""The README's psql examples run, as written, against the real slice."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import IBD
from loaders.bundle import BundleSource
from stark_pg.index.lexical import build_lexical
from stark_pg.skb.store import load_skb

README = Path(__file__).resolve().parents[1] / "README.md"


def sql_examples() -> list[str]:
    blocks = re.findall(r"```sql\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    return [s.strip() for block in blocks for s in block.split(";") if s.strip() and
            not all(line.startswith("--") for line in s.strip().splitlines())]


@pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")
def test_every_sql_example_in_the_readme_returns_rows(conn):
    load_skb(conn, BundleSource(IBD))
    build_lexical(conn, "stark-prime-ibd")
    examples = sql_examples()
    assert len(examples) >= 5
    for statement in examples:
        rows = conn.execute(statement).fetchall()
        assert rows, f"README example returned nothing:\n{statement}"
