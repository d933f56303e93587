"""No commit is reported before it is on disk: the embedded server keeps PostgreSQL's synchronous
commit, including data directories tuned by earlier versions (which set it off server-wide), and a
load still commits whole.
"""

from __future__ import annotations

import os
import time

import psycopg
import pytest

from loaders.synthetic import SyntheticSource
from stark_pg.skb.store import load_skb

pytestmark = pytest.mark.skipif(bool(os.environ.get("STARK_PG_TEST_DSN")), reason="the embedded server only")


def synchronous_commit(url: str) -> str:
    """The setting a new connection gets (a fresh session: no SET of ours in it)."""
    with psycopg.connect(url) as c:
        return c.execute("show synchronous_commit").fetchone()[0]


def eventually(url: str, expected: str, seconds: float = 10) -> str:
    """The setting once a configuration reload has reached new sessions (it is asynchronous)."""
    deadline = time.monotonic() + seconds
    while (value := synchronous_commit(url)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


def test_the_embedded_server_commits_synchronously(server_url):
    assert synchronous_commit(server_url) == "on"


def test_a_data_directory_tuned_before_gets_synchronous_commit_back_on_start(server_url):
    from stark_pg.db import embedded

    with psycopg.connect(server_url, autocommit=True) as c:  # what earlier versions wrote on first start
        c.execute("alter system set synchronous_commit = off")
        c.execute("select pg_reload_conf()")
    try:
        assert eventually(server_url, "off") == "off"
        embedded.start()  # the server is running: this is what every later command does
        assert eventually(server_url, "on") == "on"
        assert "synchronous_commit" not in (embedded.pgdata_dir() / "postgresql.auto.conf").read_text()
    finally:
        with psycopg.connect(server_url, autocommit=True) as c:
            c.execute("alter system reset synchronous_commit")
            c.execute("select pg_reload_conf()")


def test_a_load_commits_whole_with_synchronous_commit(conn, db_url):
    summary = load_skb(conn, SyntheticSource(nodes=300, seed=1, edges_per_node=4))
    assert conn.execute("show synchronous_commit").fetchone()[0] == "on"
    with psycopg.connect(db_url) as other:
        assert other.execute("select nodes, edges from stark.skb_summary").fetchone() == (300, summary.edges)
