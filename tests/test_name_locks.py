"""One writer per SKB name, with real `stark-pg` processes: loads and index builds of one name queue
behind each other, saying so on stderr, instead of failing on each other's rows.

The test first holds the name's lock itself (as another process would), starts the commands, waits
until PostgreSQL shows every one of them waiting for that lock, and lets go: from then on they contend
with each other for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psycopg
import pytest

from stark_pg.db import connect
from stark_pg.resources import queries as sql
from stark_pg.skb.locks import lock_skb_name, skb_name_locked

NAME = "synthetic-300"
SYNTHETIC = ("load", "synthetic", "--nodes", "300", "--edges-per-node", "4", "--seed", "3")
WAITING = "waiting for another process loading, indexing, dropping or linking 'synthetic-300'"


def advisory_locks(url: str, *, granted: bool, pid: int | None = None) -> int:
    """Advisory locks in this test's database (the server is shared by other databases)."""
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute("select count(*) from pg_locks where locktype = 'advisory' and granted = %s "
                         "and database = (select oid from pg_database where datname = current_database()) "
                         "and (%s::int is null or pid = %s)", (granted, pid, pid)).fetchone()[0]


def start(db_url: str, *args: str) -> subprocess.Popen:
    """The real command in a process of its own, as the `cli` fixture runs it."""
    env = os.environ | {"STARK_PG_DSN": db_url, "COLUMNS": "160"}
    return subprocess.Popen([sys.executable, "-m", "stark_pg", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def wait_until_waiting(db_url: str, processes: list[subprocess.Popen], timeout: float = 180) -> None:
    """Until every process waits for an advisory lock (none may finish first: they must queue)."""
    deadline = time.monotonic() + timeout
    while advisory_locks(db_url, granted=False) < len(processes):
        for process in processes:
            if process.poll() is not None:
                out, err = process.communicate()
                pytest.fail(f"{process.args[3:]} ended (exit {process.returncode}) instead of waiting:\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"not every process came to wait for the name's lock within {timeout} s")
        time.sleep(0.2)


def finish(processes: list[subprocess.Popen]) -> list[tuple[str, str]]:
    results = [process.communicate(timeout=600) for process in processes]
    for process, (out, err) in zip(processes, results):
        assert process.returncode == 0, f"{process.args[3:]} exit {process.returncode}\n{out}\n{err}"
        assert WAITING in err and "Traceback" not in err, err
    return results


def test_the_name_and_model_locks_are_taken_for_real(conn, db_url):
    """The named statements as the code runs them show in pg_locks while held, and are gone after."""
    me = conn.info.backend_pid
    with conn.transaction():
        sql().lock_skb_name(conn, name=NAME)
        assert advisory_locks(db_url, granted=True, pid=me) == 1
    assert advisory_locks(db_url, granted=True, pid=me) == 0
    with conn.transaction():
        sql().lock_model(conn, name="all-MiniLM-L6-v2")
        assert advisory_locks(db_url, granted=True, pid=me) == 1
    assert advisory_locks(db_url, granted=True, pid=me) == 0
    with skb_name_locked(conn, NAME):  # index builds: held across their many transactions
        conn.execute("select 1")
        assert advisory_locks(db_url, granted=True, pid=me) == 1
    assert advisory_locks(db_url, granted=True, pid=me) == 0


def test_a_name_lock_held_elsewhere_is_seen_and_a_free_one_taken_silently(conn, db_url, capfd):
    with psycopg.connect(db_url, autocommit=True) as other, other.transaction():
        assert sql().try_lock_skb_name(other, name=NAME) is True
        with conn.transaction():
            assert sql().try_lock_skb_name(conn, name=NAME) is False
    with conn.transaction():  # free again: taken at once, and nothing said
        lock_skb_name(conn, NAME)
    assert WAITING not in capfd.readouterr().err


def test_three_loads_of_one_name_at_once_all_succeed_and_leave_it_loaded_once(db_url):
    with connect(db_url) as holder, holder.transaction():
        lock_skb_name(holder, NAME)
        loads = [start(db_url, *SYNTHETIC, "--json") for _ in range(3)]
        wait_until_waiting(db_url, loads)
    summaries = [json.loads(out) for out, _ in finish(loads)]
    assert sorted(s["status"] for s in summaries) == ["loaded", "replaced", "replaced"]
    assert len({(s["nodes"], s["edges"], s["queries"]) for s in summaries}) == 1
    with psycopg.connect(db_url) as c:
        assert c.execute("select name, nodes, edges, queries from stark.skb_summary").fetchall() == [
            (NAME, 300, summaries[0]["edges"], summaries[0]["queries"])]
        # the replaced loads left nothing behind
        assert c.execute("select count(*) from stark.node").fetchone()[0] == 300
        assert c.execute("select count(*) from stark.edge").fetchone()[0] == summaries[0]["edges"]


def test_two_index_builds_of_one_name_at_once_both_succeed(cli, db_url):
    cli(*SYNTHETIC)
    with connect(db_url) as holder, skb_name_locked(holder, NAME):  # as a load or another build would
        builds = [start(db_url, "index", NAME, "--no-dense", "--json") for _ in range(2)]
        wait_until_waiting(db_url, builds)
    reports = [json.loads(out)["lexical"]["reindexed"] for out, _ in finish(builds)]
    documents = sorted(sum(report.values()) for report in reports)
    assert documents[0] == 0 < documents[1], reports  # the second found the first's work done
    with psycopg.connect(db_url) as c:
        assert c.execute("select n_docs from stark.lex_stats where scope = '*'").fetchall() == [(300,)]
        assert c.execute("select count(*) from stark.lex_doc where scope = '*'").fetchone()[0] == 300
    cli("drop", NAME, "-y")  # drops take the same lock, in their transaction
    assert "no SKBs loaded yet" in cli("info").stdout


LINK = ("import sys; from stark_pg.db import connect; from stark_pg.train.fusion import prepare_training_split\n"
        "with connect() as conn:\n"
        "    prepare_training_split(conn, sys.argv[1], 'all-MiniLM-L6-v2')\n")


def test_two_trainings_linking_the_same_new_questions_both_succeed(cli, db_url):
    """`train fusion` stores each new training question's name matches (stark.query_link) before it fits:
    two of one SKB at once queue on the name's lock rather than insert the same rows twice."""
    cli(*SYNTHETIC)
    cli("index", NAME, "--no-dense", "-q")
    env = os.environ | {"STARK_PG_DSN": db_url}
    with connect(db_url) as holder, holder.transaction():
        lock_skb_name(holder, NAME)
        links = [subprocess.Popen([sys.executable, "-c", LINK, NAME], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env) for _ in range(2)]
        wait_until_waiting(db_url, links)
    for out, err in [link.communicate(timeout=600) for link in links]:
        assert WAITING in err and "Traceback" not in err, err
    assert [link.returncode for link in links] == [0, 0]
    with psycopg.connect(db_url) as c:
        linked, rows = c.execute("select count(distinct query_id), count(*) from stark.query_link").fetchone()
        train = c.execute("select count(*) from stark.query where split = 'train'").fetchone()[0]
    assert 0 < linked <= train and rows > linked
