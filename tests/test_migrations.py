"""The schema's two kinds of SQL: a baseline migration for tables, and functions installed as code.

- A database that stark-pg 0.1.0 brought to revision 0040 (its 40-step chain; a dump of one, with a
  small SKB, its BM25 index and an evaluation run, is `tests/data/stark-pg-0.1.0-at-0040.sql.gz`) is
  upgraded in place: its data intact, and afterwards every object of the schemas `stark` and `agent`,
  functions and their grants included, as a fresh install makes it.
- The functions are installed when their files changed, and only then; a function no file defines any
  more is dropped; a change `create or replace` cannot make (a result type) is installed all the same.
- Concurrent upgrades of a new database both succeed; a database older than the baseline or newer than
  this stark-pg is refused in one line; `stark-pg db downgrade` has nothing to undo below the baseline.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pytest_postgresql.janitor import DatabaseJanitor

from conftest import _server_params
from stark_pg.db import functions
from stark_pg.db.migrate import NewerSchema, OlderSchema, head_revision, upgrade

DUMP = Path(__file__).parent / "data" / "stark-pg-0.1.0-at-0040.sql.gz"

# What PostgreSQL says the schemas are: one (kind, name) -> definition entry per object.
SNAPSHOT = """
select 'function', p.oid::regprocedure::text,
       pg_get_functiondef(p.oid) || coalesce(obj_description(p.oid, 'pg_proc'), '') || coalesce(p.proacl::text, '')
from pg_proc p join pg_namespace n on n.oid = p.pronamespace
where n.nspname in ('stark', 'agent') and p.prokind in ('f', 'p')
union all
select 'relation', c.relname, c.relkind::text || coalesce(obj_description(c.oid, 'pg_class'), '')
       || coalesce(c.relacl::text, '')
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where n.nspname in ('stark', 'agent') and c.relname !~ '__skb[0-9]+' and c.relname !~ '^emb_'
union all
select 'column', c.relname || '.' || a.attname,
       format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' ' || a.attgenerated::text || ' '
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || coalesce(col_description(c.oid, a.attnum), '')
from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
where n.nspname in ('stark', 'agent') and a.attnum > 0 and not a.attisdropped and c.relkind in ('r', 'v', 'm', 'p', 'c')
  and c.relname !~ '__skb[0-9]+' and c.relname !~ '^emb_'
union all
select 'index', indexname, indexdef from pg_indexes
where schemaname in ('stark', 'agent') and indexname !~ '__skb[0-9]+' and tablename !~ '__skb[0-9]+'
  and tablename !~ '^emb_'
union all
select 'constraint', c.conrelid::regclass::text || '.' || c.conname, pg_get_constraintdef(c.oid)
from pg_constraint c join pg_namespace n on n.oid = c.connamespace
where n.nspname in ('stark', 'agent') and c.conrelid::regclass::text !~ '__skb[0-9]+'
union all
select 'type', t.typname, t.typtype::text
from pg_type t join pg_namespace n on n.oid = t.typnamespace
where n.nspname in ('stark', 'agent') and t.typtype in ('d', 'e', 'c')
  and (t.typtype <> 'c' or exists (select 1 from pg_class c where c.oid = t.typrelid and c.relkind = 'c'))
union all
select 'view', schemaname || '.' || viewname, definition from pg_views where schemaname in ('stark', 'agent')
union all
select 'trigger', tgrelid::regclass::text || '.' || tgname, pg_get_triggerdef(oid)
from pg_trigger where not tgisinternal and tgrelid::regclass::text like 'stark.%'
union all
select 'schema', nspname, coalesce(nspacl::text, '') from pg_namespace where nspname in ('stark', 'agent')
"""


def snapshot(url: str) -> dict[tuple[str, str], str]:
    with psycopg.connect(url) as conn:
        return {(kind, name): definition for kind, name, definition in conn.execute(SNAPSHOT)}


def differences(expected: dict, found: dict) -> list[str]:
    lines = [f"missing {k}" for k in expected.keys() - found.keys()]
    lines += [f"left behind {k}" for k in found.keys() - expected.keys()]
    lines += [f"changed {k}" for k in expected.keys() & found.keys() if expected[k] != found[k]]
    return sorted(lines)


@pytest.fixture
def empty_db(server_url):
    """A new database with no stark-pg schema at all."""
    name = f"stark_empty_{uuid.uuid4().hex[:8]}"
    janitor = DatabaseJanitor(dbname=name, **_server_params(server_url))
    janitor.init()
    yield make_conninfo(server_url, dbname=name)
    janitor.drop()


def psql(url: str, text: str) -> None:
    from pgserver._commands import POSTGRES_BIN_PATH

    done = subprocess.run([str(POSTGRES_BIN_PATH / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url],
                          input=text, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def revision(url: str) -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("select version_num from stark_pg_alembic_version").fetchone()[0]


def test_a_database_0_1_0_left_at_0040_upgrades_to_exactly_a_fresh_install(empty_db, db_url):
    psql(empty_db, gzip.decompress(DUMP.read_bytes()).decode())
    with psycopg.connect(empty_db) as conn:
        assert functions.installed_checksum(conn) is None
    upgrade(empty_db)
    assert revision(empty_db) == head_revision()
    assert differences(snapshot(db_url), snapshot(empty_db)) == []
    with psycopg.connect(empty_db) as conn:
        assert functions.is_current(conn)
        # the data is there and answers through the new functions, its pg_textsearch index included
        assert conn.execute("select count(*) from stark.node n join stark.skb s using (skb_id) "
                            "where s.name = 'tiny'").fetchone() == (5,)
        assert conn.execute("select count(*) from stark.eval_result").fetchone() == (1,)
        ranked = [r[0] for r in conn.execute("select node_id from stark.bm25('tiny', 'prostaglandin synthase two', 2, "
                                             "engine => 'textsearch')")]
        assert ranked[0] == 2
        assert [r[0] for r in conn.execute("select node_id from stark.neighbors('tiny', 4)")] == [2, 5]


def test_functions_are_installed_when_their_files_change_and_only_then(db_url, tmp_path, monkeypatch):
    with psycopg.connect(db_url, autocommit=True) as conn:
        stamp = conn.execute("select installed_at from stark.sql_install").fetchone()
        upgrade(db_url)
        assert conn.execute("select installed_at from stark.sql_install").fetchone() == stamp   # nothing to do

        # a copy of sql/ in which one function changes, one is gone and one is new
        copy = tmp_path / "sql"
        shutil.copytree(functions.sql_dir(), copy)
        graph = copy / "functions" / "graph.sql"
        text = graph.read_text()
        assert "select skb_id from stark.skb where name = skb_name" in text
        text = text.replace("select skb_id from stark.skb where name = skb_name",
                            "select skb_id from stark.skb where name = skb_name and skb_id >= 0")
        start = text.index("create or replace function stark.edge_both_ways(")
        end = text.index("comment on function stark.edge_both_ways(int)")
        end = text.index("';\n", end) + 2
        text = text[:start] + text[end:] + ("\ncreate or replace function stark.answer_of_everything() returns int "
                                            "language sql immutable as $$ select 42 $$;\n")
        graph.write_text(text)
        point_at(monkeypatch, copy)
        assert not functions.is_current(conn)
        upgrade(db_url)
        assert functions.is_current(conn)
        assert "skb_id >= 0" in conn.execute("select pg_get_functiondef('stark.skb_id(text)'::regprocedure)").fetchone()[0]
        assert conn.execute("select to_regprocedure('stark.edge_both_ways(int)')").fetchone() == (None,)
        assert conn.execute("select stark.answer_of_everything()").fetchone() == (42,)

        # what create-or-replace cannot change (the result type) is installed too, from scratch
        graph.write_text(graph.read_text().replace("returns int\nlanguage sql immutable as $$ select 42 $$",
                                                   "returns bigint language sql immutable as $$ select 42 $$")
                         .replace("returns int language sql immutable as $$ select 42 $$",
                                  "returns bigint language sql immutable as $$ select 42 $$"))
        point_at(monkeypatch, copy)
        upgrade(db_url)
        assert conn.execute("select pg_typeof(stark.answer_of_everything())::text").fetchone() == ("bigint",)
        # the expression index over stark.focus_compact and the agent's grants came back with the functions
        assert conn.execute("select to_regclass('stark.node_compact_name_idx')").fetchone()[0] is not None
        assert conn.execute("select has_function_privilege('stark_agent', 'agent.bm25(text, int, text)', "
                            "'execute')").fetchone() == (True,)


def point_at(monkeypatch, sql: Path) -> None:
    """Make the install read another copy of sql/ (its caches cleared)."""
    monkeypatch.setattr(functions, "sql_dir", lambda: sql)
    monkeypatch.setattr(functions, "sql_text", lambda relative: (sql / relative).read_text())
    functions.function_files.cache_clear()
    functions.shipped_checksum.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_caches():
    yield
    functions.function_files.cache_clear()
    functions.shipped_checksum.cache_clear()


def test_every_function_file_is_listed_in_order():
    listed = [relative.split("/")[1] for relative in functions.function_files()]
    assert sorted(listed) == sorted(p.name for p in (functions.sql_dir() / "functions").glob("*.sql"))
    assert listed[0] == "graph.sql"


def test_concurrent_upgrades_of_a_new_database_both_succeed(empty_db, db_url):
    errors = []

    def run():
        try:
            upgrade(empty_db)
        except Exception as exc:  # noqa: BLE001 - the test reports whatever went wrong
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert errors == []
    assert revision(empty_db) == head_revision()
    assert differences(snapshot(db_url), snapshot(empty_db)) == []


@pytest.mark.parametrize(("stored", "error", "message"), [
    ("0035", OlderSchema, "revision 0035, older than this stark-pg's baseline 0040: bring it to 0040 with "
                          "stark-pg 0.1.0"),
    ("9999", NewerSchema, "revision 9999, newer than this stark-pg knows (head "),
])
def test_a_database_older_than_the_baseline_or_newer_than_this_stark_pg_is_refused(db_url, stored, error, message):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("update stark_pg_alembic_version set version_num = %s", (stored,))
        conn.execute("delete from stark.sql_install")
    with pytest.raises(error, match=message.replace("(", r"\(")):
        upgrade(db_url)
    assert revision(db_url) == stored


def test_db_downgrade_has_nothing_below_the_baseline(cli, db_url):
    head = head_revision()
    status = json.loads(cli("db", "status", "--json").stdout)
    assert status["head_revision"] == status["schema_revision"] == head and status["functions"] == "current"
    done = cli("db", "downgrade", "0039", "--yes", expect=1)
    assert f"no schema revision '0039': stark-pg's run from 0040 to {head}" in done.stderr
    assert f"schema revision {head} already" in cli("db", "downgrade", head).stdout
    assert json.loads(cli("db", "upgrade", "--json").stdout) == {"before": head, "after": head, "upgraded": False}
