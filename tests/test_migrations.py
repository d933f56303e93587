"""Migrations both ways: every downgrade runs, and what it undoes the upgrade after it restores exactly;
`stark-pg db downgrade` lists, asks, undoes in one transaction, and refuses what it cannot do.

A downgrade that gives back earlier SQL functions runs a file under `sql/downgrade/` holding their text
verbatim; others drop what their upgrade added. Comparing each step with the schema before its upgrade
is not possible on a database built from scratch: earlier migrations re-run today's `sql/functions/`
files, so the chain never holds an earlier migration's functions as they were. What can be compared
is the round trip: the newest schema, down to 0011, and up again, object for object as PostgreSQL
describes it (every function's definition and comment, tables' columns, indexes, constraints, types,
views, triggers).
"""

from __future__ import annotations

import json

import psycopg
import pytest
from alembic import command

from stark_pg.db.migrate import alembic_config, upgrade
from stark_pg.resources import migrations_dir

# What PostgreSQL says the `stark` schema is: one (kind, name) -> definition entry per object.
SNAPSHOT = """
select 'function', p.oid::regprocedure::text,
       pg_get_functiondef(p.oid) || coalesce(obj_description(p.oid, 'pg_proc'), '')
from pg_proc p join pg_namespace n on n.oid = p.pronamespace
where n.nspname = 'stark' and p.prokind in ('f', 'p')
union all
select 'aggregate', p.oid::regprocedure::text, coalesce(obj_description(p.oid, 'pg_proc'), '')
from pg_proc p join pg_namespace n on n.oid = p.pronamespace
where n.nspname = 'stark' and p.prokind = 'a'
union all
select 'relation', c.relname, c.relkind::text || coalesce(obj_description(c.oid, 'pg_class'), '')
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'stark'
union all
select 'column', c.relname || '.' || a.attname,
       format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' '
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || coalesce(col_description(c.oid, a.attnum), '')
from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
where n.nspname = 'stark' and a.attnum > 0 and not a.attisdropped and c.relkind in ('r', 'v', 'm', 'p', 'c')
union all
select 'index', indexname, indexdef from pg_indexes where schemaname = 'stark'
union all
select 'constraint', c.conrelid::regclass::text || '.' || c.conname, pg_get_constraintdef(c.oid)
from pg_constraint c join pg_namespace n on n.oid = c.connamespace where n.nspname = 'stark'
union all
select 'type', t.typname, t.typtype::text || coalesce(format_type(t.typbasetype, t.typtypmod), '')
       || coalesce((select string_agg(e.enumlabel, ',' order by e.enumsortorder) from pg_enum e
                    where e.enumtypid = t.oid), '')
from pg_type t join pg_namespace n on n.oid = t.typnamespace
where n.nspname = 'stark' and t.typtype in ('d', 'e') or (n.nspname = 'stark' and t.typtype = 'c'
      and exists (select 1 from pg_class c where c.oid = t.typrelid and c.relkind = 'c'))
union all
select 'view', viewname, definition from pg_views where schemaname = 'stark'
union all
select 'trigger', tgrelid::regclass::text || '.' || tgname, pg_get_triggerdef(oid)
from pg_trigger where not tgisinternal and tgrelid::regclass::text like 'stark.%'
"""

# 0011 creates the role stark_agent, which belongs to the server, not the database: the template every
# test database is cloned from has objects granted to it, so going below 0011 would mean dropping a role
# other databases use. The round trip starts there.
FIRST = "0011"


def snapshot(url: str) -> dict[tuple[str, str], str]:
    with psycopg.connect(url) as conn:
        return {(kind, name): definition for kind, name, definition in conn.execute(SNAPSHOT)}


def differences(before: dict, after: dict) -> list[str]:
    lines = [f"missing {k}" for k in before.keys() - after.keys()]
    lines += [f"left behind {k}" for k in after.keys() - before.keys()]
    lines += [f"changed {k}" for k in before.keys() & after.keys() if before[k] != after[k]]
    return sorted(lines)


def test_every_downgrade_runs_and_the_upgrade_after_it_restores_the_schema_exactly(db_url):
    """Down from the newest schema to 0011 (every downgrade from the newest back, each file under
    sql/downgrade/ among them) and up again: the same schema, object for object."""
    head = snapshot(db_url)
    assert sum(kind == "function" for kind, _ in head) > 50
    command.downgrade(alembic_config(db_url), FIRST)
    down = snapshot(db_url)
    assert ("relation", "query_link") not in {k[:2] for k in down}      # 0036's table went with its downgrade
    assert differences(head, down)
    upgrade(db_url)
    assert differences(head, snapshot(db_url)) == []


def test_db_downgrade_lists_what_it_undoes_asks_and_goes_back(cli, db_url):
    """`stark-pg db downgrade` (the real CLI): it lists the migrations newer than the target, does nothing
    unconfirmed, undoes them with --yes, and the next `db upgrade` goes forward again."""
    head = json.loads(cli("db", "status", "--json").stdout)["head_revision"]
    newer = [r for r in revisions() if r > "0036"]
    assert newer[:3] == ["0037", "0038", "0039"] and newer[-1] == head
    asked = cli("db", "downgrade", "0036", expect=1)                # no one to answer: aborted
    listed = [line.split()[0] for line in asked.stdout.splitlines() if line.startswith("  0")]
    assert listed == newer[::-1]
    assert "  0039  Learned fusion's search passes" in asked.stdout
    assert f"Undo these {len(newer)} migration(s), {head} -> 0036?" in asked.stdout
    assert revision(db_url) == head

    report = json.loads(cli("db", "downgrade", "0036", "--yes", "--json").stdout)
    assert report == {"before": head, "after": "0036", "undone": newer[::-1]}
    assert revision(db_url) == "0036"
    names = {k[1] for k in snapshot(db_url) if k[0] == "function"}
    assert not any(n.startswith("stark.fusion_features(") and n.endswith("text[],text[])") for n in names)
    assert "schema revision 0036 already" in cli("db", "downgrade", "0036").stdout

    assert json.loads(cli("db", "upgrade", "--json").stdout) == {"before": "0036", "after": head, "upgraded": True}


@pytest.mark.parametrize(("target", "message"), [
    ("0040x", "no schema revision '0040x': stark-pg's run from 0001 to "),
    ("head", "no schema revision 'head'"),
    ("+1", "no schema revision '+1'"),
    ("base", "no schema revision 'base'"),
])
def test_db_downgrade_refuses_what_is_not_a_revision(cli, db_url, target, message):
    done = cli("db", "downgrade", target, "--yes", expect=1)
    head = json.loads(cli("db", "status", "--json").stdout)["head_revision"]
    assert message in done.stderr and revision(db_url) == head


def test_db_downgrade_refuses_going_forward(cli, db_url):
    cli("db", "downgrade", "0037", "--yes")
    done = cli("db", "downgrade", "0038", "--yes", expect=1)
    assert "revision 0038 is not older than the database's 0037: `stark-pg db upgrade` goes forward" in done.stderr
    assert revision(db_url) == "0037"
    assert "--json needs --yes" in cli("db", "downgrade", "0036", "--json", expect=1).stderr
    assert revision(db_url) == "0037"


def revisions() -> list[str]:
    """Every revision stark-pg ships, oldest first."""
    return sorted(path.name[:4] for path in (migrations_dir() / "versions").glob("0*.py"))


def revision(url: str) -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("select version_num from stark_pg_alembic_version").fetchone()[0]


def test_a_downgrade_that_fails_changes_nothing(cli, db_url):
    """Below 0011 the role stark_agent goes, but the test template (another database of the server) has
    objects granted to it: the server refuses, and the downgrades before it are rolled back too."""
    before = snapshot(db_url)
    done = cli("db", "downgrade", "0010", "--yes", expect=1)
    assert "the downgrade to 0010 failed and changed nothing:" in done.stderr and "stark_agent" in done.stderr
    assert "Traceback" not in done.stderr
    assert revision(db_url) == json.loads(cli("db", "status", "--json").stdout)["head_revision"]
    assert snapshot(db_url) == before


def test_db_downgrade_refuses_a_database_a_newer_stark_pg_migrated(cli, db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("update stark_pg_alembic_version set version_num = '9999'")
    done = cli("db", "downgrade", "0036", "--yes", expect=1)
    assert ("schema is revision 9999, newer than this stark-pg knows: downgrade it with the stark-pg that "
            "created it") in done.stderr
    assert revision(db_url) == "9999"
