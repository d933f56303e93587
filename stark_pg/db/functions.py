"""The SQL API's functions, installed as code: `sql/functions/` is re-run whenever it changed.

Tables, indexes and types change through numbered migrations (`migrations/`), each run once. Functions
are different: their newest text is all a database needs, so they are not migrated but installed.
Every file of `sql/functions/` runs, in the order `sql/functions/ORDER` gives, in one transaction,
whenever a checksum of that SQL differs from the one stored in `stark.sql_install` (after a stark-pg
upgrade, or a downgrade to an older one); otherwise checking costs one query. Changing a function is
then one edit to one file.

The files use `create or replace`, so a function keeps its identity (and whatever depends on it: the
expression index over `stark.focus_compact`, the agent's grants) while its body changes. A function no
file defines any more (removed, renamed, or given other arguments) is dropped after the files ran: it is
one whose catalogue row this transaction did not write. When a file changes what `create or replace`
cannot (a function's result type), the install drops every function of the project first (with what
depends on them, which the files create again) and runs the files once more.

Concurrent installs wait for each other (an advisory lock), so commands started together on a new
database neither fail nor install twice.
"""

from __future__ import annotations

import hashlib
from functools import cache

import psycopg

from stark_pg.resources import sql_dir, sql_text

SCHEMAS = ("stark", "agent")
"""The schemas whose functions the files define."""

LOCK_KEY = 0x5374_6172_6B50_47      # pg_advisory_lock key of schema changes ("StarkPG")


@cache
def function_files() -> tuple[str, ...]:
    """The files of sql/functions/ in install order, as paths relative to sql/."""
    listed = [line.strip() for line in sql_text("functions/ORDER").splitlines()
              if line.strip() and not line.lstrip().startswith("#")]
    present = {path.name for path in (sql_dir() / "functions").glob("*.sql")}
    missing, unlisted = set(listed) - present, present - set(listed)
    if missing or unlisted:
        raise RuntimeError(f"sql/functions/ORDER and the files differ: listed but missing {sorted(missing)}, "
                           f"present but not listed {sorted(unlisted)}")
    return tuple(f"functions/{name}" for name in listed)


@cache
def shipped_checksum() -> str:
    """sha256 over the ordered files' names and texts: what this stark-pg installs."""
    digest = hashlib.sha256()
    for relative in function_files():
        digest.update(relative.encode() + b"\0" + sql_text(relative).encode() + b"\0")
    return digest.hexdigest()


def installed_checksum(conn: psycopg.Connection) -> str | None:
    """The checksum of the functions the database holds (None: never installed by this mechanism)."""
    if conn.execute("select to_regclass('stark.sql_install')").fetchone()[0] is None:
        return None
    row = conn.execute("select checksum from stark.sql_install").fetchone()
    return row[0] if row else None


def is_current(conn: psycopg.Connection) -> bool:
    return installed_checksum(conn) == shipped_checksum()


def install(conn: psycopg.Connection, *, force: bool = False) -> bool:
    """Install the functions unless the database already holds these (or `force`); True if it ran.
    `conn` must be in autocommit mode: the install is its own transaction."""
    if not force and is_current(conn):
        return False
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        if not force and is_current(conn):         # another process installed them while we waited
            return False
        before = _ours(conn)
        try:
            with conn.transaction():                # a savepoint: the fallback below starts clean
                _run_files(conn)
        except psycopg.errors.InvalidFunctionDefinition:
            # a file changed what create-or-replace cannot change (a result type): start from none
            _drop(conn, before, cascade=True)
            _run_files(conn)
        after = _ours(conn)
        # what the files did not (re)create: its catalogue row is the one it had before they ran
        _drop(conn, {sig: row for sig, row in after.items() if before.get(sig) == row}, cascade=False)
        _record(conn)
    return True


def forget(conn: psycopg.Connection) -> None:
    """Clear the stored checksum, so that the next stark-pg to connect installs its own functions (after
    a schema downgrade, for the older stark-pg that follows)."""
    if conn.execute("select to_regclass('stark.sql_install')").fetchone()[0] is not None:
        conn.execute("delete from stark.sql_install")


def _run_files(conn: psycopg.Connection) -> None:
    for relative in function_files():
        conn.execute(sql_text(relative))


_OURS = """
select p.oid::regprocedure::text, p.prokind, p.xmin::text, p.oid
from pg_proc p join pg_namespace n on n.oid = p.pronamespace
where n.nspname = any(%s)
  and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid
                  and d.deptype = 'e')
"""


def _ours(conn: psycopg.Connection) -> dict[str, tuple]:
    """The project's functions (not an extension's): signature -> (kind, row version, oid). A
    `create or replace` writes a new catalogue row, so the row version tells a re-created function from
    one left as it was."""
    return {sig: (kind, xmin, oid) for sig, kind, xmin, oid in conn.execute(_OURS, (list(SCHEMAS),))}


def _drop(conn: psycopg.Connection, functions: dict[str, tuple], *, cascade: bool) -> None:
    for signature, (kind, _, _) in functions.items():
        what = {"p": "procedure", "a": "aggregate"}.get(kind, "function")
        conn.execute(f"drop {what} if exists {signature}{' cascade' if cascade else ''}")


def _record(conn: psycopg.Connection) -> None:
    from stark_pg import __version__

    conn.execute("create table if not exists stark.sql_install ("
                 " checksum text not null, stark_pg_version text not null,"
                 " installed_at timestamptz not null default now())")
    conn.execute("comment on table stark.sql_install is 'The SQL functions installed from sql/functions/: the "
                 "checksum of their text, which stark-pg installed them and when (stark_pg/db/functions.py).'")
    conn.execute("delete from stark.sql_install")
    conn.execute("insert into stark.sql_install (checksum, stark_pg_version) values (%s, %s)",
                 (shipped_checksum(), __version__))
