"""Hot standbys of the embedded server: read-only copies that follow it by streaming replication.

`stark-pg db replica add` copies the running primary with the PostgreSQL binaries pgserver ships
(`pg_basebackup -R -X stream -C -S SLOT`) into STARK_PG_HOME/replicas/PORT/pgdata and starts it as a
hot standby. It is private as the primary is: the copy carries the primary's pg_hba.conf and
pg_ident.conf (peer authentication mapped to our OS user, no TCP), its data directory is 0700 and its
socket directory 0700, owned by the server's OS user. The standby reaches the primary over the
primary's Unix socket, as a replication connection the primary's rules admit for the same OS users
(embedded._HBA); each standby has a physical replication slot, so the primary keeps the WAL a stopped
standby has not received yet (bounded by max_slot_wal_keep_size, past which the slot is lost and the
standby must be added again).

A standby is named by its port (the name of its socket: there is no TCP listener). Standbys are
started again whenever the embedded primary is (stark_pg.db.connection.resolve_dsn starts them after
a primary that was down) and on demand with `stark-pg db replica start`; `stark-pg db stop` stops
them with the primary.

The first standby switches the primary from wal_level minimal (what a new cluster gets: a load's new
tables then write no WAL) to replica, which takes a restart of the primary, once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from stark_pg.config import home_dir
from stark_pg.db import embedded

FIRST_PORT = 5433
"""The port `replica add` picks without --port: the lowest free one from here."""

SOCKET_PATH_MAX = 104
"""A Unix socket's path must be shorter than this (sun_path: 108 bytes on Linux, 104 on macOS)."""

SLOT_PREFIX = "stark_standby_"
"""Replication slots and application names of the embedded server's standbys: SLOT_PREFIX + port."""


class ReplicaError(RuntimeError):
    """A standby cannot be added, found, started or removed; the message says why, in one line."""


@dataclass(frozen=True)
class Replica:
    port: int
    pgdata: Path
    socket_dir: Path

    @property
    def name(self) -> str:
        return f"{SLOT_PREFIX}{self.port}"

    @property
    def url(self) -> str:
        return f"postgresql://postgres:@/postgres?host={self.socket_dir}&port={self.port}"

    @property
    def pid(self) -> int | None:
        process = embedded._postmaster(self.pgdata)
        return process.pid if process is not None else None

    def as_dict(self) -> dict:
        return {"port": self.port, "name": self.name, "url": self.url, "pgdata": str(self.pgdata),
                "running": self.pid is not None, "pid": self.pid}


def replicas_dir() -> Path:
    return home_dir() / "replicas"


def replicas() -> list[Replica]:
    """The standbys added in this STARK_PG_HOME, by port."""
    found = []
    for record in sorted(replicas_dir().glob("*/replica.json")):
        try:
            data = json.loads(record.read_text())
            found.append(Replica(int(data["port"]), record.parent / "pgdata", Path(data["socket_dir"])))
        except (OSError, ValueError, KeyError):
            continue        # a half-made standby (add was killed): `replica remove PORT` clears it
    return sorted(found, key=lambda r: r.port)


def find(port: int) -> Replica:
    for replica in replicas():
        if replica.port == port:
            return replica
    known = ", ".join(str(r.port) for r in replicas()) or "none"
    raise ReplicaError(f"no standby on port {port} (standbys: {known}; `stark-pg db replica list` shows them)")


def add(port: int | None = None) -> Replica:
    """Make a hot standby of the embedded server on `port` (default: the lowest free from FIRST_PORT),
    start it and return it."""
    primary = embedded.start()
    primary_port = _primary_port(primary.pgdata)
    taken = {r.port: f"the standby in {r.pgdata}" for r in replicas()}
    taken[primary_port] = "the primary"
    if port is None:
        port = next(p for p in range(FIRST_PORT, 65536) if p not in taken)
    elif not 1024 <= port <= 65535:
        raise ReplicaError(f"--port {port}: must be between 1024 and 65535")
    elif port in taken:
        raise ReplicaError(f"port {port} is in use by {taken[port]}: choose another --port")
    home = replicas_dir() / str(port)
    if home.exists():
        raise ReplicaError(f"{home} exists but is no standby (a killed `replica add`?): "
                           f"remove it (stark-pg db replica remove {port}) and run the command again")
    _enable_replication(primary)
    server_uid = primary.pgdata.stat().st_uid
    home.mkdir(parents=True, mode=0o700)
    if os.geteuid() == 0 and server_uid != 0:
        from stark_pg.db.traverse import grant_traverse

        grant_traverse(home / "pgdata", server_uid)     # the folders above: passable by the server's user alone
        os.chown(home, server_uid, -1)
    replica = Replica(port, home / "pgdata", _socket_dir(home / "pgdata", port))
    slot = replica.name
    from pgserver._commands import POSTGRES_BIN_PATH

    try:
        done = subprocess.run([str(POSTGRES_BIN_PATH / "pg_basebackup"), "-D", str(replica.pgdata), "-R",
                               "-X", "stream", "-C", "-S", slot, "-c", "fast",
                               "-d", _primary_conninfo(primary.uri, primary_port, slot)],
                              user=_system_user(), capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise ReplicaError(f"pg_basebackup of the primary failed: {_last_line(done.stderr)}")
    except BaseException:
        _forget(home, slot, primary.uri)
        raise
    for leftover in ("log", "log.1", ".handle_pids.json"):     # the primary's, copied with its data directory
        (replica.pgdata / leftover).unlink(missing_ok=True)
    (home / "replica.json").write_text(json.dumps({"port": port, "socket_dir": str(replica.socket_dir)}) + "\n")
    start(replica)
    return replica


def start(replica: Replica) -> bool:
    """Start a stopped standby (False if it was running): it catches up from its slot on the primary."""
    from pgserver._commands import pg_ctl
    from pgserver.postgres_server import _preload_libraries_args

    if replica.pid is not None:
        return False
    primary = embedded.start()
    _write_settings(replica, _primary_conninfo(primary.uri, _primary_port(primary.pgdata), replica.name))
    replica.socket_dir.mkdir(parents=True, exist_ok=True)
    server_uid = replica.pgdata.stat().st_uid
    if os.geteuid() == 0 and server_uid != 0:
        from stark_pg.db.traverse import grant_traverse

        grant_traverse(replica.socket_dir / ".s.PGSQL", server_uid)
    embedded._lock_socket_dir(replica.pgdata, replica.socket_dir)
    embedded._rotate_log(replica.pgdata / "log")
    try:
        pg_ctl(["-w", "-t", "120", "-o", '-h ""', "-o", f"-k {replica.socket_dir}", "-o", f"-p {replica.port}",
                *_preload_libraries_args(), "-l", str(replica.pgdata / "log"), "start"],
               pgdata=replica.pgdata, user=_system_user(), timeout=180)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        raise ReplicaError(f"the standby on port {replica.port} did not start: "
                           f"{embedded._last_error(replica.pgdata / 'log')} (log: {replica.pgdata / 'log'})") from None
    return True


def start_all(*, quiet: bool = False) -> list[Replica]:
    """Start every stopped standby; one that cannot start is reported on stderr (unless quiet), not raised:
    the primary serves on without it."""
    started = []
    for replica in replicas():
        try:
            if start(replica):
                started.append(replica)
        except ReplicaError as exc:
            if not quiet:
                print(f"warning: {exc}", file=sys.stderr, flush=True)
    return started


def stop(replica: Replica) -> bool:
    """Stop a standby (False if it was not running)."""
    from pgserver._commands import pg_ctl

    process = embedded._postmaster(replica.pgdata)
    if process is None:
        return False
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=replica.pgdata, user=_system_user(), timeout=120)
    process.wait(30)
    return True


def stop_all() -> list[Replica]:
    return [r for r in replicas() if stop(r)]


def remove(port: int) -> Replica:
    """Stop a standby, drop its replication slot on the primary and delete its data directory. Also clears
    a half-made one (a killed `replica add`)."""
    home = replicas_dir() / str(port)
    try:
        replica = find(port)
    except ReplicaError:
        if not home.is_dir():
            raise
        replica = None
    if replica is not None:
        stop(replica)
    _forget(home, f"{SLOT_PREFIX}{port}", embedded.start().uri)
    if replica is not None and replica.socket_dir != replica.pgdata:
        shutil.rmtree(replica.socket_dir, ignore_errors=True)
    return replica or Replica(port, home / "pgdata", home / "pgdata")


def _forget(home: Path, slot: str, primary_uri: str) -> None:
    import psycopg

    from stark_pg.resources import queries

    with psycopg.connect(primary_uri, autocommit=True) as conn:
        for attempt in range(100):
            try:
                queries().drop_replication_slot(conn, slot=slot)
                break
            except psycopg.errors.ObjectInUse:      # its WAL sender is still exiting
                if attempt == 99:
                    raise ReplicaError(f"the replication slot {slot} is still in use: is its standby running "
                                       "elsewhere? (stark-pg db replica list)") from None
                time.sleep(0.1)
    shutil.rmtree(home, ignore_errors=True)


def _enable_replication(primary: embedded.EmbeddedServer) -> None:
    """wal_level replica and WAL senders on the primary, restarting it once if they were off."""
    import psycopg

    from stark_pg.resources import queries

    with psycopg.connect(primary.uri, autocommit=True) as conn:
        wal_level, senders, slots = queries().replication_settings(conn)
        if wal_level != "minimal" and senders > 0 and slots > 0:
            return
        for statement in ("set_wal_level_replica", "set_max_wal_senders", "set_max_replication_slots",
                          "set_max_slot_wal_keep_size"):
            getattr(queries(), statement)(conn)
    print("restarting the embedded server once to let it feed standbys (wal_level replica)", file=sys.stderr,
          flush=True)
    embedded.restart()


def _write_settings(replica: Replica, primary_conninfo: str) -> None:
    """The standby's own settings, last in its postgresql.auto.conf (the last value of a name wins):
    where the primary is now (its socket directory may move), the standby's port, and hot_standby_feedback
    so that the primary's cleanup does not cancel a long search running on the standby."""
    path = replica.pgdata / "postgresql.auto.conf"
    ours = {"primary_conninfo": primary_conninfo, "primary_slot_name": replica.name,
            "hot_standby_feedback": "on", "port": str(replica.port)}
    kept = [line for line in path.read_text().splitlines()
            if line.split("=", 1)[0].strip() not in ours]
    text = "\n".join(kept + [f"{name} = '{value}'" for name, value in ours.items()]) + "\n"
    embedded._write_if_different(path, text)


def _primary_conninfo(uri: str, port: int, application_name: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(uri)
    return make_conninfo(host=params["host"], port=str(port), user=params.get("user") or "postgres",
                         application_name=application_name)


def _primary_port(pgdata: Path) -> int:
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return int(info.port) if info is not None and info.port else 5432


def _socket_dir(pgdata: Path, port: int) -> Path:
    """The standby's data directory when the socket's path fits there (as pgserver decides for the
    primary), else a directory of its own under the runtime directory pgserver uses."""
    if len(str((pgdata / f".s.PGSQL.{port}").absolute()).encode()) < SOCKET_PATH_MAX:
        return pgdata
    import hashlib

    import platformdirs

    digest = hashlib.sha256(str(pgdata.absolute()).encode()).hexdigest()[:10]
    return platformdirs.user_runtime_path("python_PostgresServer") / f"standby-{digest}"


def _system_user() -> str | None:
    return embedded.SERVER_OS_USER if os.geteuid() == 0 else None


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def routed_url(primary_uri: str, standbys: list[Replica]) -> str:
    """One multi-host URL for the primary and `standbys` (stark_pg/db/connection.py routes reads to a
    standby and writes to the primary over it); load_balance_hosts=random spreads reads over standbys."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    if not standbys:
        return primary_uri
    params = conninfo_to_dict(primary_uri)
    hosts = [params.pop("host")] + [str(r.socket_dir) for r in standbys]
    ports = [str(params.pop("port", None) or 5432)] + [str(r.port) for r in standbys]
    return make_conninfo(**params, host=",".join(hosts), port=",".join(ports), load_balance_hosts="random")


def wait_caught_up(replica: Replica, timeout: float = 60.0) -> None:
    """Wait until the standby has replayed everything the primary had written when this was called
    (a fresh load or index build is then visible on it)."""
    import psycopg

    from stark_pg.resources import queries

    deadline = time.monotonic() + timeout
    with psycopg.connect(embedded.start().uri, autocommit=True) as conn:
        while not queries().caught_up(conn, name=replica.name):
            if time.monotonic() > deadline:
                raise ReplicaError(f"the standby on port {replica.port} did not catch up within {timeout:.0f} s")
            time.sleep(0.1)
