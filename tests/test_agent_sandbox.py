"""The agent's sandbox, both walls: hostile programs are rejected by the validator (sqlglot), and the
same statements sent straight to the database as the agent role are refused there too (or, for the
few a role cannot refuse, have no lasting effect). Valid programs run, slots are bound as literals,
and the toolkit is scoped to one SKB."""

from __future__ import annotations

import pytest

from loaders.synthetic import SyntheticSource
from stark_pg.retrieve.agent import sandbox
from stark_pg.retrieve.agent.toolkit import SEED, describe

SKB = "synthetic-agent-sandbox"
OTHER = "synthetic-agent-other"

# (program, words the validator's reason must contain)
HOSTILE = [
    ("insert into agent.node values (1, 'x', 'y')", "INSERT"),
    ("update agent.node set name = 'x'", "UPDATE"),
    ("delete from agent.edge", "DELETE"),
    ("drop table stark.query", "DROP"),
    ("create table agent.t (x int)", "CREATE"),
    ("alter table stark.node add column x int", "ALTER"),
    ("truncate stark.llm_cache", "only a SELECT"),
    ("select * from stark.llm_cache", "stark.llm_cache"),
    ("select answer_ids from stark.query", "stark.query"),
    ("select node_id, 1 from agent.node where node_id in (select unnest(answer_ids) from stark.query)", "stark.query"),
    ("select run_id, 1 from stark.eval_result", "stark.eval_result"),
    ('select node_id, 1 from "stark"."query"', "stark.query"),
    ("select node_id, 1 from stark . query", "stark.query"),
    ("select * from pg_catalog.pg_authid", "pg_catalog.pg_authid"),
    ("select pg_read_file('/etc/passwd'), 1", "pg_read_file"),
    ("select pg_ls_dir('.'), 1", "pg_ls_dir"),
    ("select pg_sleep(60), 1", "pg_sleep"),
    ("select node_id, 1 from agent.edge e join lateral (select pg_sleep(10)) s on true", "pg_sleep"),
    ("select set_config('role', 'postgres', false), 1", "set_config"),
    ("select current_setting('data_directory'), 1", "current_setting"),
    ("select pg_reload_conf(), 1", "pg_reload_conf"),
    ("select * from dblink('dbname=postgres', 'select 1') as t(x int)", "dblink"),
    ("select lo_import('/etc/passwd'), 1", "lo_import"),
    ("select query_to_xml('select * from stark.query', true, true, ''), 1", "query_to_xml"),
    ("select stark.bm25('stark-prime-ibd', 'x'), 1", "stark.bm25"),
    ("copy stark.query to stdout", "COPY"),
    ("copy (select 1) to program 'id'", "COPY"),
    ("select node_id, 1 from agent.node for update", "FOR UPDATE"),
    ("with x as (delete from agent.node returning node_id) select node_id, 1 from x", "DELETE"),
    ("with x as (insert into stark.skb (name) values ('x') returning skb_id) select skb_id, 1 from x", "INSERT"),
    ("select node_id, 1 from agent.node; drop table stark.skb", "one statement"),
    ("select node_id, 1 from agent.node where name = ''; delete from stark.skb; --'", "one statement"),
    ("select node_id, 1 from agent.node /* hide */ ; /* */ drop table stark.skb", "one statement"),
    ("select node_id, 1 from agent.node where name = $$x$$; drop table stark.skb; select $$y$$", "one statement"),
    ("select node_id, 1 from agent.node; commit; drop table stark.skb", "one statement"),
    ("with recursive r(n) as (select 1 union all select n + 1 from r) select count(*), 1 from r", "recursive"),
    ("lock table stark.query", "only a SELECT"),
    ("grant all on stark.query to stark_agent", "only a SELECT"),
    ("set role postgres", "SET"),
    ("select agent.drop_everything(), 1", "agent.drop_everything"),
    ("select node_id, 1 from agent.llm_cache", "agent.llm_cache"),
    ("select node_id, 1 from agent.node where name = :answers", "unknown slot"),
    ("select * from information_schema.tables", "information_schema.tables"),
    ("select * from pg_catalog.pg_class", "pg_catalog.pg_class"),
]
# What a role cannot refuse, checked for having no effect that outlives the program instead.
NO_LASTING_EFFECT = {"select set_config('statement_timeout', '0', false), 1"}
READABLE_CATALOGUE = {"select * from information_schema.tables", "select * from pg_catalog.pg_class"}


@pytest.fixture(scope="module")
def sandbox_url(server_url, template_db):
    from conftest import cloned_database
    from stark_pg.db import connect
    from stark_pg.skb.store import load_skb

    with cloned_database(server_url, template_db, "stark_agent_sandbox") as url:
        with connect(url) as conn:
            load_skb(conn, SyntheticSource(nodes=200, seed=1, edges_per_node=4), SKB)
            load_skb(conn, SyntheticSource(nodes=120, seed=2, edges_per_node=4), OTHER)
        yield url


@pytest.fixture
def conn(sandbox_url):
    from stark_pg.db import connect

    with connect(sandbox_url) as connection:
        yield connection


def test_at_least_thirty_hostile_programs_are_rejected_with_a_reason():
    assert len(HOSTILE) >= 30
    for program, reason in HOSTILE:
        with pytest.raises(sandbox.Rejected) as caught:
            sandbox.validate(program)
        assert reason.lower() in str(caught.value).lower(), (program, str(caught.value))


@pytest.mark.parametrize("program", [p for p, _ in HOSTILE if p not in READABLE_CATALOGUE])
def test_the_role_refuses_what_the_validator_rejects(conn, program):
    """Sent past the validator, straight to the database as stark_agent: an error, and nothing changed."""
    before = conn.execute("select (select count(*) from stark.skb), (select count(*) from stark.query), "
                          "(select count(*) from stark.node)").fetchone()
    with pytest.raises(sandbox.ProgramFailed):
        sandbox.run(conn, SKB, program, timeout_ms=300)
    after = conn.execute("select (select count(*) from stark.skb), (select count(*) from stark.query), "
                         "(select count(*) from stark.node)").fetchone()
    assert after == before
    assert conn.execute("select to_regclass('agent.t')").fetchone()[0] is None


def test_catalogue_reads_past_the_validator_show_nothing_private(conn):
    """A role cannot be kept from PostgreSQL's catalogue, but it shows no table it may not read."""
    visible = sandbox.run(conn, SKB, "select count(*), 1 from information_schema.tables where table_schema = 'stark'",
                          timeout_ms=2000)
    assert visible == [(0, 1.0)]
    mine = sandbox.run(conn, SKB, "select count(*), 1 from information_schema.tables where table_schema = 'agent'",
                       timeout_ms=2000)
    assert mine == [(3, 1.0)]  # the toolkit's three views


def test_settings_changed_by_a_program_do_not_outlive_it(conn):
    for program in NO_LASTING_EFFECT:
        with pytest.raises(sandbox.Rejected):
            sandbox.validate(program)
        sandbox.run(conn, SKB, program, timeout_ms=2000)
    agent = sandbox.agent_connection(conn)
    assert agent.execute("show statement_timeout").fetchone()[0] != "0"
    with pytest.raises(sandbox.ProgramFailed, match="longer than"):
        sandbox.run(conn, SKB, "select pg_sleep(5), 1", timeout_ms=200)


def test_the_agent_role_cannot_become_anyone_else(conn):
    with pytest.raises(sandbox.ProgramFailed, match="permission denied"):
        sandbox.run(conn, SKB, "select set_config('role', 'postgres', false), 1", timeout_ms=2000)
    agent = sandbox.agent_connection(conn)
    row = agent.execute("select session_user, current_user, usesuper from pg_user where usename = current_user"
                        ).fetchone()
    assert row == ("stark_agent", "stark_agent", False)


def test_the_seed_program_is_valid_and_uses_only_cheap_slots():
    program = sandbox.validate(SEED)
    assert set(program.slots) == {"query", "query_vector", "answer_type"}
    assert not program.uses_entities


def test_the_toolkit_prompt_names_exactly_what_the_sandbox_allows():
    text = describe("(structure)")
    for view in sandbox.TOOLKIT_VIEWS:
        assert f"agent.{view}(" in text
    for function in sandbox.TOOLKIT_FUNCTIONS:
        assert f"agent.{function}(" in text
    for slot in sandbox.SLOTS:
        assert f":{slot}" in text


def test_views_see_only_the_chosen_skb(conn):
    for name in (SKB, OTHER):
        expected = conn.execute("select count(*) from stark.node where skb_id = stark.skb_id(%s)", (name,)).fetchone()[0]
        rows = sandbox.run(conn, name, "select count(*), 1 from agent.node", timeout_ms=2000)
        assert rows == [(expected, 1.0)]
        edges = conn.execute("select count(*) from stark.edge where skb_id = stark.skb_id(%s)", (name,)).fetchone()[0]
        assert sandbox.run(conn, name, "select count(*), 1 from agent.edge", timeout_ms=2000) == [(edges, 1.0)]


def test_slots_are_bound_as_literals_so_values_cannot_inject(conn):
    name = conn.execute("select name from stark.node where skb_id = stark.skb_id(%s) order by node_id limit 1",
                        (SKB,)).fetchone()[0]
    program = sandbox.validate("select m.node_id, 1.0 as score from agent.match_name(:entity_1, 3) m "
                               "where :entity_2 is null or m.name <> :entity_2 order by m.node_id")
    hostile = "x'); drop table stark.skb; --"
    bound = sandbox.bind(program, {"entity_1": name, "entity_2": hostile})
    assert "'x''); drop table stark.skb; --'" in bound
    rows = sandbox.run(conn, SKB, bound, timeout_ms=2000)
    assert rows and conn.execute("select to_regclass('stark.skb')").fetchone()[0] is not None
    unbound = sandbox.bind(program, {})
    assert "(CAST(NULL AS TEXT), 3)" in unbound and "CAST(NULL AS TEXT) IS NULL" in unbound and ":entity" not in unbound
    typed = sandbox.bind(sandbox.validate("select dst, 1 from agent.neighbours(:entity_1_node, null)"), {})
    assert "CAST(NULL AS BIGINT)" in typed and sandbox.run(conn, SKB, typed) == []


def test_rows_are_limited_deduplicated_and_checked(conn):
    rows = sandbox.run(conn, SKB, "select node_id, 1.0 from agent.node order by node_id", row_limit=7)
    assert len(rows) == 7
    twice = sandbox.run(conn, SKB, "select node_id, 2.0 from agent.node where node_id < 3 union all "
                                   "select node_id, 1.0 from agent.node where node_id < 3 order by 2 desc, 1")
    assert twice == [(0, 2.0), (1, 2.0), (2, 2.0)]
    with pytest.raises(sandbox.ProgramFailed, match="node_id, score"):
        sandbox.run(conn, SKB, "select node_id from agent.node")
    with pytest.raises(sandbox.ProgramFailed, match="numbers"):
        sandbox.run(conn, SKB, "select name, 1 from agent.node")
    with pytest.raises(sandbox.ProgramFailed, match="division by zero"):
        sandbox.run(conn, SKB, "select node_id, 1 / 0 from agent.node")


def test_malformed_programs_get_a_reason():
    for text, reason in [("", "empty"), ("selec node_id from agent.node", "not valid PostgreSQL"),
                         ("select cast(node_id as regclass), 1 from agent.node", "cast"),
                         ("select bm25(:query), 1", "agent.bm25")]:
        with pytest.raises(sandbox.Rejected, match=reason):
            sandbox.validate(text)


def test_the_example_in_the_prompt_is_a_valid_program():
    text = describe("(structure)")
    example = text.split("Correct pieces to build from:\n")[1].split("  -- functions that return rows")[0]
    program = sandbox.validate(example)
    assert set(program.slots) == {"entity_1_node", "query_vector"} and program.uses_entities


def _vm(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def test_a_program_cannot_take_more_memory_than_the_bound(conn, monkeypatch):
    """An accepted program that doubles strings under array_agg would grow its backend by gigabytes
    inside the timeout; the backend's address space is bounded MEMORY_MB above where it started, the
    program fails with a reason, and the next program runs."""
    monkeypatch.setattr(sandbox, "MEMORY_MB", 128)
    levels = [f"d{i} as (select s || s as s from d{i - 1})" for i in range(1, 21)]
    hungry = (f"with d0 as (select name as s from agent.node), {', '.join(levels)} "
              "select count(*), cardinality(array_agg(s)) from d20")     # every name 2**20 times over
    sandbox.validate(hungry)                                   # the validator has no objection
    agent = sandbox.agent_connection(conn)
    assert sandbox.memory_bounded(agent)
    pid = agent.info.backend_pid
    start = sandbox._bounds[agent][0]
    with pytest.raises(sandbox.ProgramFailed, match="more than 128 MB of memory"):
        sandbox.run(conn, SKB, hungry, timeout_ms=60000)
    assert _vm(pid, "VmPeak") <= start + 128 * 1024 * 1024
    assert sandbox.run(conn, SKB, "select node_id, 1.0 from agent.node order by node_id", row_limit=3)
