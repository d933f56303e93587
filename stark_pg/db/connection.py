"""One way to get a connection: the DSN given, else STARK_PG_DSN, else the embedded server.

Every connection is checked for pgvector and brought to the newest schema on first use, so a
newcomer never runs a separate set-up step.

A DSN naming several hosts (libpq's multi-host form: `host=a,b port=5432,5433`, or
`postgresql://a:5432,b:5433/db`) is a primary with hot standbys: a connection for reading (`read=True`:
searches, the ranking half of an evaluation) asks libpq for `target_session_attrs=prefer-standby`
(unless the DSN chose its own) and one for writing for `read-write`, which only the primary is; the
DSN's `load_balance_hosts=random` spreads the reads over the standbys. Migrations run on the primary.
A read connection remembers the writing DSN (`write_dsn_for`), so that what a search must store (an
LLM's answer in the cache) goes to the primary over a connection of its own.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

import psycopg
from pgvector.psycopg import register_vector

from stark_pg.config import configured_dsn
from stark_pg.db.errors import DatabaseError

__all__ = ["DatabaseError", "connect", "one_snapshot", "redact_dsn", "resolve_dsn"]


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN the CLI uses: explicit argument, then STARK_PG_DSN, then the embedded server (whose
    standbys are started with it when it was down: stark_pg/db/replica.py)."""
    if dsn:
        return dsn
    env = configured_dsn()
    if env:
        return env
    import subprocess

    from stark_pg.db import embedded

    try:
        server = embedded.start()
    except embedded.DataDirectoryVersionError as exc:   # already one line naming the directory and what to do
        raise DatabaseError(str(exc)) from exc
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:   # pg_ctl failed, timed out, port taken...
        raise DatabaseError(f"the embedded PostgreSQL server in {embedded.pgdata_dir()} did not start: {exc} "
                            "(see its log there; or pass --dsn to use another server)") from exc
    if server.started:
        from stark_pg.db import replica

        replica.start_all()
    return server.uri


READ_ATTRS = "prefer-standby"
WRITE_ATTRS = "read-write"


def several_hosts(url: str) -> bool:
    """Whether a DSN names more than one server (libpq tries them in turn)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return False
    return any("," in str(params.get(key) or "") for key in ("host", "hostaddr"))


def read_dsn(url: str) -> str:
    """The DSN for searching: a standby if the DSN names several hosts and one answers."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    if not several_hosts(url) or conninfo_to_dict(url).get("target_session_attrs"):
        return url
    return make_conninfo(url, target_session_attrs=READ_ATTRS)


def write_dsn(url: str) -> str:
    """The DSN for writing: the primary among the DSN's hosts."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(url, target_session_attrs=WRITE_ATTRS) if several_hosts(url) else url


def primary_dsn(url: str) -> str:
    """A multi-host DSN narrowed to the one host that is its primary now (for what takes one host:
    alembic through SQLAlchemy); any other DSN as it is."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    if not several_hosts(url):
        return url
    try:
        with psycopg.connect(write_dsn(url), autocommit=True) as conn:
            host, port = conn.info.host, conn.info.port
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"no primary (read-write server) among the hosts of {redact_dsn(url)}: {exc}") from exc
    params = {k: v for k, v in conninfo_to_dict(url).items()
              if k not in ("host", "hostaddr", "port", "target_session_attrs", "load_balance_hosts")}
    return make_conninfo(**params, host=host, port=str(port))


_writers: "weakref.WeakKeyDictionary[psycopg.Connection, str]" = weakref.WeakKeyDictionary()


def write_dsn_for(conn: psycopg.Connection) -> str | None:
    """For a connection opened with `connect(..., read=True)` on a multi-host DSN (or `connect_like` of
    one): the DSN that reaches the primary. None for any other connection: it writes where it reads."""
    return _writers.get(conn)


_migrated: set[str] = set()


def connect(dsn: str | None = None, *, migrate: bool = True, autocommit: bool = True,
            read: bool = False) -> psycopg.Connection:
    """Open a connection with pgvector types registered, upgrading the schema once per DSN.

    Autocommit by default: every `with conn.transaction():` block is then a real transaction that
    commits when it ends (not a savepoint inside an implicit transaction left open until close).
    `read=True`: a connection for reading only, on a standby where a multi-host DSN names one.
    """
    url = resolve_dsn(dsn)
    target = read_dsn(url) if read else write_dsn(url)
    try:
        conn = psycopg.connect(target, autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"cannot connect to PostgreSQL at {redact_dsn(url)}: {exc}") from exc
    if migrate and url not in _migrated:
        from stark_pg.db.migrate import upgrade

        upgrade(primary_dsn(url))
        _migrated.add(url)
    if read and several_hosts(url):
        _writers[conn] = write_dsn(url)
    if migrate:
        register_vector(conn)
    return conn


def connect_like(conn: psycopg.Connection) -> psycopg.Connection:
    """Another autocommit connection to `conn`'s database, as `connect` makes them: for a worker
    thread, since one connection must not serve two threads' transactions at once."""
    try:
        other = psycopg.connect(conninfo_of(conn), autocommit=True)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"cannot open another connection for a worker: {exc}") from exc
    if conn in _writers:
        _writers[other] = _writers[conn]
    register_vector(other)
    return other


def conninfo_of(conn: psycopg.Connection) -> str:
    """A conninfo string that opens another connection like `conn` (its password included)."""
    from psycopg.conninfo import make_conninfo

    password = conn.pgconn.password        # conn.info.dsn leaves it out; libpq still knows it
    params = {"password": password.decode()} if password else {}
    return make_conninfo(conn.info.dsn, **params)


def redact_dsn(url: str) -> str:
    """The DSN without its password, for error messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<dsn>"


@contextmanager
def one_snapshot(conn: psycopg.Connection):
    """Run the block's statements on one snapshot (a repeatable-read transaction), so that a search made
    of several statements (the SKB's id, its indexed scopes, the ranking) reads one version of the SKB
    even while a replace commits between two of them. Inside a transaction already, nothing changes:
    the caller chose its own."""
    if not conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        yield
        return
    with conn.transaction():
        conn.execute("set transaction isolation level repeatable read")
        yield
