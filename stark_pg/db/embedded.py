"""The private PostgreSQL server (pgserver: PostgreSQL 16 with pgvector) used when no DSN is given.

The server is left running when the CLI exits (cleanup_mode=None) so that every command after
the first connects in milliseconds; `stark-pg db stop` stops it.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from stark_pg.config import home_dir

# pgserver warns on every start where XDG_RUNTIME_DIR is unset (containers, CI): noise for our users
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
logging.getLogger("pgserver").setLevel(logging.WARNING)

# Settings applied once to a new cluster: bulk loads and index builds want more WAL and memory
# than PostgreSQL's defaults, and HNSW indexes of a million vectors (1.5 GB) must fit in shared
# buffers to answer in milliseconds. shared_buffers takes effect on the restart that follows.
# Not synchronous_commit = off: it let a commit (a whole load) be reported before it was on disk.
_TUNING = {
    "max_wal_size": "4GB",
    "maintenance_work_mem": "512MB",
    "work_mem": "64MB",
    "checkpoint_timeout": "15min",
}


@dataclass(frozen=True)
class EmbeddedServer:
    pgdata: Path
    uri: str
    pid: int | None


def pgdata_dir() -> Path:
    return home_dir() / "pgdata"


def start() -> EmbeddedServer:
    """Start (or reuse) the embedded server and return how to reach it."""
    import pgserver

    pgdata = pgdata_dir()
    # pgserver needs the parent directory to exist; the data directory it creates itself.
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    fresh = not (pgdata / "PG_VERSION").exists()
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    if fresh:
        _tune(server.get_uri())
        _restart(server)
    else:
        _untune_async_commit(pgdata, server.get_uri())
    _make_private(pgdata, server.get_uri())
    return EmbeddedServer(pgdata=pgdata, uri=server.get_uri(), pid=server.get_pid())


_HBA = """# Written by stark-pg (stark_pg/db/embedded.py) at every start: only the OS user who runs stark-pg
# may connect, over the Unix socket, as the roles of the map `stark` (pg_ident.conf); no TCP.
local all all peer map=stark
"""


def _make_private(pgdata: Path, uri: str) -> None:
    """Peer authentication instead of pgserver's `trust`: with trust, any local user who reaches the
    socket is superuser, and with a long data path pgserver puts the socket in a world-writable
    directory (/tmp/runtime-UID/python_PostgresServer/...). Peer authentication checks the connecting
    process's OS user whatever the directory, and maps only ours to the roles stark-pg uses."""
    import pwd

    owner = pwd.getpwuid(os.geteuid()).pw_name
    ident = (f"# Written by stark-pg: the OS user {owner} may connect as these roles.\n"
             f"stark {owner} postgres\nstark {owner} stark_agent\n")
    changed = _write_if_different(pgdata / "pg_hba.conf", _HBA)
    changed = _write_if_different(pgdata / "pg_ident.conf", ident) or changed
    if changed:  # the rules in force until the reload still let us in
        import psycopg

        from stark_pg.resources import queries

        with psycopg.connect(uri, autocommit=True) as conn:
            queries().reload_configuration(conn)


def _write_if_different(path: Path, text: str) -> bool:
    """Rewrite a server file in place (owner and mode kept: the server may run as another user)."""
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    with open(path, "w") as handle:
        handle.write(text)
    return True


def _shared_buffers() -> str:
    """A quarter of the machine's memory, between PostgreSQL's default 128 MB and 8 GB."""
    import psutil

    quarter_mb = psutil.virtual_memory().total // 4 // (1 << 20)
    return f"{max(128, min(quarter_mb, 8192))}MB"


def _tune(uri: str) -> None:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        for name, value in (_TUNING | {"shared_buffers": _shared_buffers()}).items():
            conn.execute(f"alter system set {name} = '{value}'")


def _untune_async_commit(pgdata: Path, uri: str) -> None:
    """Clusters tuned by earlier versions committed asynchronously server-wide; put them back to
    PostgreSQL's synchronous default. Reading the settings file first keeps the check free for the rest."""
    try:
        settings = (pgdata / "postgresql.auto.conf").read_text()
    except OSError:
        return
    if not re.search(r"^\s*synchronous_commit\s*=", settings, re.MULTILINE):
        return
    import psycopg

    from stark_pg.resources import queries

    with psycopg.connect(uri, autocommit=True) as conn:
        queries().reset_synchronous_commit(conn)
        queries().reload_configuration(conn)


def _restart(server) -> None:
    """pg_ctl restart reuses the options the server was started with (postmaster.opts)."""
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-l", str(server.log), "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60)
    server._postmaster_info = None
    server.ensure_postgres_running()


def running_pid() -> int | None:
    """The postmaster's pid if the embedded server is running, without starting it."""
    pid_file = pgdata_dir() / "postmaster.pid"
    if not pid_file.exists():
        return None
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError, PermissionError):
        return None
    return pid


def stop() -> bool:
    """Stop the embedded server; False if it was not running."""
    if running_pid() is None:
        return False
    import pgserver

    server = pgserver.get_server(pgdata_dir(), cleanup_mode="stop")
    server.cleanup()
    return True
