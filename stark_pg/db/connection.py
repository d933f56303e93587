"""One way to get a connection: the DSN given, else STARK_PG_DSN, else the embedded server.

Every connection is checked for pgvector and brought to the newest schema on first use, so a
newcomer never runs a separate set-up step.
"""

from __future__ import annotations

from contextlib import contextmanager

import psycopg
from pgvector.psycopg import register_vector

from stark_pg.config import configured_dsn
from stark_pg.db.errors import DatabaseError

__all__ = ["DatabaseError", "connect", "one_snapshot", "redact_dsn", "resolve_dsn"]


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN the CLI uses: explicit argument, then STARK_PG_DSN, then the embedded server."""
    if dsn:
        return dsn
    env = configured_dsn()
    if env:
        return env
    import subprocess

    from stark_pg.db import embedded

    try:
        return embedded.start().uri
    except embedded.DataDirectoryVersionError as exc:   # already one line naming the directory and what to do
        raise DatabaseError(str(exc)) from exc
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:   # pg_ctl failed, timed out, port taken...
        raise DatabaseError(f"the embedded PostgreSQL server in {embedded.pgdata_dir()} did not start: {exc} "
                            "(see its log there; or pass --dsn to use another server)") from exc


_migrated: set[str] = set()


def connect(dsn: str | None = None, *, migrate: bool = True, autocommit: bool = True) -> psycopg.Connection:
    """Open a connection with pgvector types registered, upgrading the schema once per DSN.

    Autocommit by default: every `with conn.transaction():` block is then a real transaction that
    commits when it ends (not a savepoint inside an implicit transaction left open until close).
    """
    url = resolve_dsn(dsn)
    try:
        conn = psycopg.connect(url, autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"cannot connect to PostgreSQL at {redact_dsn(url)}: {exc}") from exc
    if migrate and url not in _migrated:
        from stark_pg.db.migrate import upgrade

        upgrade(url)
        _migrated.add(url)
    if migrate:
        register_vector(conn)
    return conn


def connect_like(conn: psycopg.Connection) -> psycopg.Connection:
    """Another autocommit connection to `conn`'s database, as `connect` makes them: for a worker
    thread, since one connection must not serve two threads' transactions at once."""
    from psycopg.conninfo import make_conninfo

    password = conn.pgconn.password        # conn.info.dsn leaves it out; libpq still knows it
    params = {"password": password.decode()} if password else {}
    try:
        other = psycopg.connect(make_conninfo(conn.info.dsn, **params), autocommit=True)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"cannot open another connection for a worker: {exc}") from exc
    register_vector(other)
    return other


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
