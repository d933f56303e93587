"""docs/scale-out.md against the live schema: the invariants a Citus distribution of stark-pg needs.

Citus cannot be installed here, so the plan is checked where it can be: on a freshly migrated test
database with an SKB loaded (so an edge partition exists) and an embedding model registered (so the
per-model vector tables exist), the doc's lists of distributed, reference and coordinator-local tables
are parsed and compared with the catalog:
- every table of the schema `stark` (partitions aside: they follow their parent) is classified, once,
  and every table the doc names exists;
- a distributed table has its distribution column, in its primary key and in every unique key
  (Citus enforces uniqueness only per shard), and tables of one co-location group have distribution
  columns of one type;
- no foreign key joins two distributed tables unless it maps one's distribution column to the other's,
  and no reference or coordinator-local table references a distributed one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loaders.synthetic import SyntheticSource
from stark_pg.index.dense import ModelTables, statement
from stark_pg.index.lexical import build_lexical
from stark_pg.resources import queries
from stark_pg.skb.store import load_skb

DOC = Path(__file__).resolve().parents[1] / "docs" / "scale-out.md"


def section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/scale-out.md has no section '## {heading}'"
    return match.group(1)


def pattern(name: str) -> re.Pattern:
    """`stark.emb_doc_<model_id>` -> a regex matching emb_doc_1, emb_doc_27, ...; a `<hash>` is hex digits."""
    return re.compile("".join((r"[0-9a-f]+" if part == "<hash>" else r"[0-9]+") if part.startswith("<")
                              else re.escape(part) for part in re.split(r"(<[^>]+>)", name)) + "$")


def parse_doc() -> tuple[dict[str, tuple[str, str]], list[str], list[str]]:
    """({table: (distribution column, co-location group)}, reference tables, coordinator-local tables)."""
    text = DOC.read_text(encoding="utf-8")
    distributed = {}
    for line in section(text, "Distributed tables").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`stark."):
            group = cells[2].split(" (")[0].strip()
            distributed[cells[0].strip("`").removeprefix("stark.")] = (cells[1].strip("`"), group)

    def bullets(heading):
        return [m.group(1) for m in re.finditer(r"^- `stark\.([^`]+)`\s*$", section(text, heading), re.M)]

    return distributed, bullets("Reference tables"), bullets("Coordinator-local tables")


@pytest.fixture
def schema(conn):
    """The live schema with its dynamic tables present: {table: info} of the schema `stark`."""
    load_skb(conn, SyntheticSource(nodes=100, seed=1, queries=5, edges_per_node=2), name="scale")
    build_lexical(conn, "scale", textsearch=True)        # the per-(SKB, scope) pg_textsearch tables
    row = queries().register_model(conn, name="scale-out-test", dim=8)
    conn.execute(statement("create_tables", ModelTables(row[0], "scale-out-test", *row[1:])))
    tables = {}
    for name, kind, is_partition in conn.execute(
            "select relname, relkind, relispartition from pg_class "
            "where relnamespace = 'stark'::regnamespace and relkind in ('r', 'p')"):
        columns = {r[0]: r[1] for r in conn.execute(
            "select attname, format_type(atttypid, atttypmod) from pg_attribute "
            "where attrelid = %s::regclass and attnum > 0 and not attisdropped", (f"stark.{name}",))}
        keys = [set(r[0]) for r in conn.execute(     # primary key, unique constraints and unique indexes
            "select array(select a.attname from unnest(x.indkey) k join pg_attribute a "
            "             on a.attrelid = x.indrelid and a.attnum = k) "
            "from pg_index x where x.indrelid = %s::regclass and x.indisunique", (f"stark.{name}",))]
        primary = conn.execute("select count(*) from pg_index where indrelid = %s::regclass and indisprimary",
                               (f"stark.{name}",)).fetchone()[0]
        tables[name] = {"partition": is_partition, "columns": columns, "keys": keys, "has_primary": primary > 0}
    foreign = conn.execute(
        "select c.conrelid::regclass::text, c.confrelid::regclass::text, "
        "       array(select a.attname from unnest(c.conkey) k join pg_attribute a on a.attrelid = c.conrelid "
        "             and a.attnum = k order by array_position(c.conkey, k)), "
        "       array(select a.attname from unnest(c.confkey) k join pg_attribute a on a.attrelid = c.confrelid "
        "             and a.attnum = k order by array_position(c.confkey, k)) "
        "from pg_constraint c where c.contype = 'f' and c.connamespace = 'stark'::regnamespace").fetchall()
    return tables, [(a.removeprefix("stark."), b.removeprefix("stark."), list(ca), list(cb))
                    for a, b, ca, cb in foreign]


def classify(tables: dict, distributed: dict, reference: list, local: list) -> dict[str, tuple[str, str]]:
    """{live table: (kind, doc entry)}; fails on tables classified twice or not at all."""
    entries = ([("distributed", d) for d in distributed] + [("reference", r) for r in reference]
               + [("local", c) for c in local])
    found = {}
    for name, info in tables.items():
        if info["partition"]:
            continue
        matches = [(kind, entry) for kind, entry in entries if pattern(entry).match(name)]
        assert len(matches) == 1, f"stark.{name} is classified {len(matches)} times in docs/scale-out.md: {matches}"
        found[name] = matches[0]
    return found


def test_the_doc_classifies_every_table_of_the_live_schema_once(schema):
    tables, _ = schema
    distributed, reference, local = parse_doc()
    assert distributed and reference and local
    found = classify(tables, distributed, reference, local)
    named = set(distributed) | set(reference) | set(local)
    assert named == {entry for _, entry in found.values()}, "docs/scale-out.md names tables that do not exist"
    assert any(t.startswith("edge__skb") and info["partition"] for t, info in tables.items())   # partitions seen
    assert {"emb_doc_<model_id>", "emb_chunk_<model_id>", "lexbm25_<hash>__skb<id>"} <= {e for _, e in found.values()}


def test_distributed_tables_carry_their_column_in_every_key(schema):
    tables, _ = schema
    distributed, reference, local = parse_doc()
    found = classify(tables, distributed, reference, local)
    group_types: dict[str, set] = {}
    for name, (kind, entry) in found.items():
        if kind != "distributed":
            continue
        column, group = distributed[entry]
        info = tables[name]
        assert column in info["columns"], f"stark.{name} has no distribution column {column}"
        for key in info["keys"]:
            assert column in key, f"stark.{name}: unique key {sorted(key)} lacks the distribution column {column}"
        # every table leads with skb_id, except a per-SKB table, whose name carries it (`..__skb<id>`)
        assert "skb_id" in info["columns"] or re.search(r"__skb[0-9]+$", name), f"stark.{name} has no skb_id"
        group_types.setdefault(group, set()).add(info["columns"][column])
    for group, types in group_types.items():
        assert len(types) == 1, f"co-location group {group} mixes distribution column types {types}"


def test_no_foreign_key_crosses_distributed_tables_off_their_columns(schema):
    tables, foreign = schema
    distributed, reference, local = parse_doc()
    found = classify(tables, distributed, reference, local)
    for child, parent, child_cols, parent_cols in foreign:
        child_kind, child_entry = found.get(child, ("partition", None))
        parent_kind, parent_entry = found.get(parent, ("partition", None))
        if parent_kind == "local":
            assert child_kind == "local", f"{child} ({child_kind}) references the coordinator-local {parent}"
        if parent_kind == "distributed":
            assert child_kind == "distributed", f"{child} ({child_kind}) references the distributed {parent}"
            child_col, child_group = distributed[child_entry]
            parent_col, parent_group = distributed[parent_entry]
            assert child_group == parent_group, f"{child} -> {parent} joins two co-location groups"
            assert (child_col, parent_col) in zip(child_cols, parent_cols), (
                f"{child} -> {parent} is not on the distribution columns ({child_col} -> {parent_col})")


def test_the_parsed_lists_are_what_the_doc_says():
    """A guard on the parser itself: a few entries read back as written."""
    distributed, reference, local = parse_doc()
    assert distributed["node"] == ("node_id", "nodes")
    assert distributed["edge"] == ("src", "nodes")
    assert distributed["emb_doc_<model_id>"] == ("node_id", "nodes")
    assert "skb" in reference and local == ["llm_cache", "sql_install"]
    assert pattern("emb_doc_<model_id>").match("emb_doc_12") and not pattern("emb_doc_<model_id>").match("emb_doc_x")
