"""`stark-pg db psql ARGS...` hands psql's own arguments to psql, on the database stark-pg uses."""

from __future__ import annotations


def test_psql_runs_a_command(cli):
    done = cli("db", "psql", "-c", "select 41+1")
    assert "42" in done.stdout.split()


def test_psql_takes_combined_flags_and_sees_the_schema(cli):
    done = cli("db", "psql", "-tA", "-c", "select count(*) from stark.skb")
    assert done.stdout.strip() == "0"


def test_psql_failure_is_psqls_exit_code(cli):
    done = cli("db", "psql", "-v", "ON_ERROR_STOP=1", "-c", "select * from no_such_table", expect=None)
    assert done.returncode != 0 and "no_such_table" in done.stderr
