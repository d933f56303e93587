"""Faults of the embedded server (issue 15, items 9-11), each on a private server in a temporary
STARK_PG_HOME: a crash is recovered from, `stop` stops the server whatever pgserver's list of client
processes says, and a stale postmaster.pid naming an unrelated live process is explained, never
killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import psycopg
import pytest


@pytest.fixture
def embedded(tmp_path, monkeypatch):
    from stark_pg.db import embedded as module

    monkeypatch.setenv("STARK_PG_HOME", str(tmp_path / "home"))
    yield module
    module.stop()


def crash_and_restart(embedded, server):
    """kill -9 the postmaster, wait until it is gone, start again: a new server over the same data."""
    os.kill(server.pid, signal.SIGKILL)
    psutil.Process(server.pid).wait(10) if psutil.pid_exists(server.pid) else None
    again = embedded.start()
    assert again.pid != server.pid
    return again


def test_stop_stops_the_server_even_with_dead_clients_on_pgservers_list(embedded):
    server = embedded.start()
    pid = embedded.running_pid()
    assert pid == server.pid
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (server.pgdata / ".handle_pids.json").write_text(json.dumps([dead.pid, os.getpid()]))
    assert embedded.stop() is True
    assert not psutil.pid_exists(pid) and embedded.running_pid() is None
    assert embedded.stop() is False


def test_a_stale_pid_file_naming_another_process_is_explained_and_that_process_left_alone(embedded):
    server = embedded.start()
    embedded.stop()
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        pid_file = server.pgdata / "postmaster.pid"
        pid_file.write_text(f"{stranger.pid}\n{server.pgdata}\n0\n5432\n\n\n\nready\n")
        assert embedded.running_pid() is None
        assert embedded.stop() is False
        with pytest.raises(embedded.EmbeddedServerError, match="postmaster.pid names process .* delete that file"):
            embedded.start()
        assert stranger.poll() is None                   # still alive: not ours to kill
        pid_file.unlink()
        with psycopg.connect(embedded.start().uri) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
    finally:
        stranger.kill()


def test_the_server_comes_back_after_a_crash_with_its_committed_data(embedded):
    server = embedded.start()
    with psycopg.connect(server.uri, autocommit=True) as conn:
        conn.execute("create table survivor (x int)")
        conn.execute("insert into survivor select generate_series(1, 1000)")
    again = crash_and_restart(embedded, server)
    with psycopg.connect(again.uri) as conn:
        assert conn.execute("select count(*) from survivor").fetchone() == (1000,)


def test_a_committed_load_survives_a_crash_although_its_edges_wrote_no_wal(embedded):
    """The embedded server runs with wal_level minimal, so a load's new edge partition and its indexes
    (created in the load's transaction) skip WAL and are fsynced at the commit instead. A kill -9 right
    after the commit must lose nothing: every edge is back, and the indexes answer the same as a scan."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.skb.store import load_skb

    server = embedded.start()
    with psycopg.connect(server.uri) as conn:
        assert conn.execute("show wal_level").fetchone() == ("minimal",)
    with connect(server.uri) as conn:            # migrates the fresh database, then loads
        summary = load_skb(conn, SyntheticSource(nodes=6000, seed=5, edges_per_node=20), "crashed")
    assert summary.edges > 100_000               # a partition beyond wal_skip_threshold (2 MB): fsynced, not logged
    again = crash_and_restart(embedded, server)
    with psycopg.connect(again.uri) as conn:
        skb = conn.execute("select skb_id from stark.skb where name = 'crashed'").fetchone()[0]
        conn.execute("set enable_indexscan = off; set enable_indexonlyscan = off; set enable_bitmapscan = off")
        scanned = conn.execute("select count(*), sum(src * 7 + dst) from stark.edge where skb_id = %s", (skb,)).fetchone()
        conn.execute("reset enable_indexscan; reset enable_indexonlyscan; reset enable_bitmapscan; set enable_seqscan = off")
        by_out = conn.execute("select count(*), sum(src * 7 + dst) from stark.edge where skb_id = %s and src >= 0",
                              (skb,)).fetchone()
        by_in = conn.execute("select count(*), sum(src * 7 + dst) from stark.edge where skb_id = %s and dst >= 0",
                             (skb,)).fetchone()
    assert scanned[0] == summary.edges and by_out == scanned and by_in == scanned


def test_a_killed_server_not_yet_reaped_is_waited_for(embedded, monkeypatch):
    """A postmaster killed with -9 stays a zombie until its parent reaps it, and PostgreSQL will not start
    while that pid exists: start() waits for it (and says who must reap it if it never goes)."""
    import threading
    import time

    server = embedded.start()
    embedded.stop()
    pid_file = server.pgdata / "postmaster.pid"

    def zombie() -> subprocess.Popen:
        child = subprocess.Popen(["true"])               # exits at once; this process has not reaped it
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.05)
        pid_file.write_text(f"{child.pid}\n{server.pgdata}\n0\n5432\n\n\n\nready\n")
        return child

    child = zombie()
    monkeypatch.setattr(embedded, "ZOMBIE_WAIT_S", 0.5)
    with pytest.raises(embedded.EmbeddedServerError, match=f"process {child.pid}.* still a zombie.*parent process "
                                                           f"\\(pid {os.getpid()}\\)"):
        embedded._check_pid_file(server.pgdata)
    child.wait()

    child = zombie()
    reaper = threading.Timer(1.0, child.wait)            # reaped a second later, as pid 1 eventually does
    reaper.start()
    monkeypatch.setattr(embedded, "ZOMBIE_WAIT_S", 60.0)
    with psycopg.connect(embedded.start().uri) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    reaper.join()


def test_a_load_on_a_server_defaulting_to_repeatable_read_still_loads(db_url):
    """COPY ... FREEZE (the edges of a new partition) is refused after "prior transaction activity" (more
    than one registered snapshot, an open cursor); a load whose transaction is repeatable read, as on a
    server that defaults to it, holds its transaction snapshot from the first query on and must still load."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.skb.store import load_skb

    with connect(db_url) as conn:
        conn.execute("set default_transaction_isolation = 'repeatable read'")
        summary = load_skb(conn, SyntheticSource(nodes=300, seed=2, edges_per_node=5), "snapshotted")
        with conn.transaction():
            assert conn.execute("show transaction_isolation").fetchone() == ("repeatable read",)
            assert conn.execute("select count(*) from stark.edge e join stark.skb s using (skb_id) "
                                "where s.name = 'snapshotted'").fetchone() == (summary.edges,)
    assert summary.edges > 0


def test_a_slow_start_after_a_crash_is_one_line_and_a_large_log_is_rotated(embedded, monkeypatch, capfd):
    """After a kill -9 the server replays its WAL; when that outlasts pgserver's 10 s, pgserver logged the
    server's whole log (hundreds of lines, more after every crash): start() says one line and waits.
    A log past LOG_ROTATE_BYTES is moved to log.1 at the start."""
    import pgserver.postgres_server as postgres_server

    server = embedded.start()
    os.kill(server.pid, signal.SIGKILL)
    psutil.Process(server.pid).wait(10) if psutil.pid_exists(server.pid) else None
    log = embedded.pgdata_dir() / "log"
    with open(log, "ab") as handle:
        handle.write(b"an old server line\n" * (embedded.LOG_ROTATE_BYTES // 19 + 100))
    real = postgres_server.pg_ctl

    def impatient(args, **kwargs):         # pg_ctl gives up at once, as after 10 s of replay
        if args[-1] == "start":
            kwargs["timeout"] = 0.01
        return real(args, **kwargs)

    monkeypatch.setattr(postgres_server, "pg_ctl", impatient)
    capfd.readouterr()
    again = embedded.start()
    printed = capfd.readouterr()
    with psycopg.connect(again.uri) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    said = [line for line in (printed.out + printed.err).splitlines() if line.strip()]
    assert len(said) == 1 and "recovering from an unclean shutdown" in said[0], said
    assert (log.with_name("log.1")).stat().st_size > embedded.LOG_ROTATE_BYTES
    assert log.stat().st_size < 1 << 20
