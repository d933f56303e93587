"""The embedded server is private to the OS user who runs stark-pg, whatever its data path.

pgserver initialises clusters with `trust` authentication, and when the data directory's path is too
long for a Unix socket it puts the socket in a world-writable directory under /tmp: any local user
could then connect as superuser (and run commands as the server through COPY ... TO PROGRAM).
stark_pg.db.embedded rewrites the authentication rules at every start to peer authentication mapped
to our OS user only, and makes the socket's directory 0700, owned by the server's OS user (else any
local user could delete the socket in that world-writable directory and listen in its place). Checked
with the OS user `nobody`, which needs root to switch to.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                                reason="needs root and runuser to act as another OS user")


def psql_as_nobody(uri: str) -> subprocess.CompletedProcess:
    import pgserver

    psql = Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql"
    host = conninfo_to_dict(uri)["host"]
    return subprocess.run(["runuser", "-u", "nobody", "--", str(psql), "-h", host, "-U", "postgres", "-Atc",
                           "select usesuper from pg_user where usename = current_user", "postgres"],
                          capture_output=True, text=True, timeout=120)


def test_another_os_user_cannot_connect_even_when_the_socket_is_in_tmp(tmp_path, monkeypatch):
    from stark_pg.db import embedded

    home = tmp_path / ("d" * 90)            # too long a path for a socket inside the data directory
    monkeypatch.setenv("STARK_PG_HOME", str(home))
    server = embedded.start()
    try:
        socket_dir = conninfo_to_dict(server.uri)["host"]
        assert not socket_dir.startswith(str(home))               # the case of the hole: the socket is elsewhere
        with psycopg.connect(server.uri) as mine:                 # the owner still connects
            assert mine.execute("select 1").fetchone() == (1,)
        info = Path(socket_dir).stat()                           # the directory is the server user's alone
        assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == (home / "pgdata").stat().st_uid
        other = psql_as_nobody(server.uri)
        assert other.returncode != 0 and "Permission denied" in other.stderr, other.stdout + other.stderr
        Path(socket_dir).chmod(0o711)                             # and were it reachable, peer authentication
        try:                                                      # would still refuse another OS user
            other = psql_as_nobody(server.uri)
        finally:
            Path(socket_dir).chmod(0o700)
        assert other.returncode != 0 and "Peer authentication failed" in other.stderr, other.stdout + other.stderr
        hba = (home / "pgdata" / "pg_hba.conf").read_text()
        assert "trust" not in hba.replace("# ", "") and "peer map=stark" in hba
    finally:
        embedded.stop()


def test_the_test_server_is_private_too(server_url):
    if os.environ.get("STARK_PG_TEST_DSN"):
        pytest.skip("an external server: its authentication is its owner's business")
    other = psql_as_nobody(server_url)
    assert other.returncode != 0


def as_nobody(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", command], capture_output=True, text=True,
                          timeout=60)


def test_folders_above_the_home_stay_closed_to_other_os_users(tmp_path, monkeypatch):
    """Run as root, the server runs as its own OS user, which must pass through the folders above its
    data directory: it gets an ACL entry of its own there, and nobody else gains anything (pgserver's way
    made every folder above it 0755, opening a 0700 folder's files to every local user)."""
    from stark_pg.db import embedded

    private = tmp_path / "P"
    (private / "inner").mkdir(parents=True)
    secret = private / "inner" / "notes.txt"
    secret.write_text("private")
    secret.chmod(0o644)
    private.chmod(0o700)
    (private / "inner").chmod(0o700)
    tmp_path.chmod(0o700)
    before = {folder: stat.S_IMODE(folder.stat().st_mode) for folder in (tmp_path, private, private / "inner")}
    monkeypatch.setenv("STARK_PG_HOME", str(private / "inner" / "home"))
    server = embedded.start()
    try:
        with psycopg.connect(server.uri) as mine:
            assert mine.execute("select 1").fetchone() == (1,)
        for folder, mode in before.items():
            now = stat.S_IMODE(folder.stat().st_mode)
            assert now & 0o007 == 0 and now & 0o740 == mode & 0o740, (folder, oct(mode), oct(now))
        assert as_nobody(f"cat {secret}").returncode != 0
        assert as_nobody(f"ls {private}").returncode != 0
        assert as_nobody(f"ls {private / 'inner'}").returncode != 0
        # the server's own OS user passes through (it has to), and may list nothing on the way
        server_user = embedded.SERVER_OS_USER
        passes = subprocess.run(["runuser", "-u", server_user, "--", "sh", "-c",
                                 f"test -x {private} && test -x {private / 'inner'} && ls {private}"],
                                capture_output=True, text=True, timeout=60)
        assert passes.returncode != 0 and "Permission denied" in passes.stderr
    finally:
        embedded.stop()
