"""The SQL examples of the README and of the docs pages run, as written, against the real slice.

Every ```sql block must return rows there; an example that needs state the slice fixture lacks (a
trained model) is fenced ```postgresql instead, and is not run."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]   # docs/history/ too


def sql_examples(page: Path) -> list[str]:
    blocks = re.findall(r"```sql\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    return [s.strip() for block in blocks for s in block.split(";") if s.strip() and
            not all(line.startswith("--") for line in s.strip().splitlines())]


def test_the_pages_hold_sql_examples():
    assert len(sql_examples(ROOT / "README.md")) >= 1
    assert sum(len(sql_examples(page)) for page in PAGES) >= 10


@pytest.mark.parametrize("page", [p for p in PAGES if sql_examples(p)], ids=lambda p: p.name)
def test_every_sql_example_returns_rows(ibd_indexed_url, page):
    conn = psycopg.connect(ibd_indexed_url, autocommit=True)
    for statement in sql_examples(page):
        rows = conn.execute(statement).fetchall()
        assert rows, f"{page.name}: example returned nothing:\n{statement}"
    conn.close()


def test_relative_links_point_at_files_that_exist():
    """A link to another page (or a figure) still resolves after pages moved into docs/."""
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "broken links: " + ", ".join(broken)


def test_anchor_links_point_at_headings():
    def anchors(page: Path) -> set[str]:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#{1,6} (.*)$", text, flags=re.M)}

    broken = []
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text(encoding="utf-8")):
            linked = page if not target else page.parent / target
            if linked.suffix == ".md" and linked.exists() and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)} -> {target}#{anchor}")
    assert not broken, "links to missing headings: " + ", ".join(broken)
