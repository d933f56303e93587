"""Bring a database to the newest stark-pg schema: alembic migrations for tables, then the functions.

Runs on first use of every DSN and on `stark-pg db upgrade`. Two kinds of SQL, each changed its own way:
- tables, indexes, types, roles: numbered alembic migrations (`migrations/versions/`), each run once.
  The first is a baseline (revision 0040) that creates what the 40 revisions before it left; a
  migration executes SQL files from `sql/schema/`, so the schema is readable as plain SQL.
- functions and views of the SQL API: `sql/functions/`, installed whole whenever its text differs from
  what the database holds (stark_pg/db/functions.py). A function change is an edit to its file.

A process holds an advisory lock while it migrates and installs, so commands started together on a new
database wait for the first instead of racing it. A database a newer stark-pg migrated (a revision
this one does not know) is refused in one line; so is one at a revision older than the baseline.
`stark-pg db downgrade` undoes migrations newer than a revision (none yet past the baseline) and leaves
the functions to the stark-pg that connects next.
"""

from __future__ import annotations

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from stark_pg.db.errors import DatabaseError
from stark_pg.resources import migrations_dir

VERSION_TABLE = "stark_pg_alembic_version"


def sqlalchemy_url(dsn: str) -> str:
    """A libpq URL turned into SQLAlchemy's psycopg 3 dialect URL (key=value DSNs are accepted too)."""
    if "://" not in dsn:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(dsn)
        from sqlalchemy.engine import URL

        return URL.create(
            "postgresql+psycopg",
            username=params.pop("user", None),
            password=params.pop("password", None),
            host=params.pop("host", None) if "/" not in str(params.get("host", "")) else None,
            port=int(params.pop("port")) if "port" in params else None,
            database=params.pop("dbname", None),
            query={k: str(v) for k, v in params.items()},
        ).render_as_string(hide_password=False)
    url = make_url(dsn)
    return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def alembic_config(dsn: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    cfg.attributes["version_table"] = VERSION_TABLE
    return cfg


def _scripts() -> ScriptDirectory:
    """The migrations this stark-pg ships (read from disk: build it once per question, not per call)."""
    return ScriptDirectory.from_config(alembic_config("postgresql://"))


def head_revision() -> str:
    return _scripts().get_current_head()


def current_revision(dsn: str) -> str | None:
    engine = create_engine(sqlalchemy_url(dsn))
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()
    finally:
        engine.dispose()


class NewerSchema(DatabaseError):
    """The database was migrated by a newer stark-pg: this one does not know its revision."""


class OlderSchema(DatabaseError):
    """The database is at a revision of the migration chain the baseline replaced, older than it."""


def upgrade(dsn: str, revision: str = "head") -> None:
    """Migrate to `revision` (default the newest), then install the functions if they changed. Costs two
    small queries when there is nothing to do."""
    from stark_pg.db import functions

    scripts = _scripts()
    head = scripts.get_current_head()
    with psycopg.connect(dsn, autocommit=True) as conn:
        if revision == "head" and _revision(conn) == head and functions.is_current(conn):
            return
        conn.execute("select pg_advisory_lock(%s)", (functions.LOCK_KEY,))
        try:
            current = _revision(conn)               # again: another process may have migrated meanwhile
            if current is not None:
                _require_known(scripts, current, f" (head {head}): upgrade stark-pg, or use a database it created")
            if current != head or revision != "head":
                command.upgrade(alembic_config(dsn), revision)
            functions.install(conn)
        finally:
            conn.execute("select pg_advisory_unlock(%s)", (functions.LOCK_KEY,))


def _revision(conn: psycopg.Connection) -> str | None:
    """The database's schema revision, read with the connection at hand (None: no stark-pg schema)."""
    if conn.execute("select to_regclass(%s)", (f"public.{VERSION_TABLE}",)).fetchone()[0] is None:
        return None
    row = conn.execute(f"select version_num from public.{VERSION_TABLE}").fetchone()
    return row[0] if row else None


class BadRevision(DatabaseError):
    """A downgrade's target is not a revision this stark-pg knows, or not older than the database's."""


def downgrade_steps(dsn: str, revision: str) -> list[tuple[str, str]]:
    """The migrations a downgrade to `revision` would undo, newest first, each with the first line of what
    it did; empty when the database is at `revision`. Refuses a revision this stark-pg does not know or
    one newer than the database's."""
    scripts = _scripts()
    current = current_revision(dsn)
    if current is None:
        raise BadRevision("the database has no stark-pg schema to downgrade")
    _require_known(scripts, current, ": downgrade it with the stark-pg that created it")
    if not _known(scripts, revision) or revision in ("head", "base") or revision.startswith(("-", "+")):
        raise BadRevision(f"no schema revision {revision!r}: stark-pg's run from "
                          f"{_first_revision(scripts)} to {scripts.get_current_head()}")
    steps = []
    for script in scripts.iterate_revisions(current, "base"):
        if script.revision == revision:
            return steps
        steps.append((script.revision, " ".join(script.doc.split())))
    raise BadRevision(f"revision {revision} is not older than the database's {current}: "
                      "`stark-pg db upgrade` goes forward")


def downgrade(dsn: str, revision: str) -> None:
    """Take the schema back to `revision` (see downgrade_steps), so that an older stark-pg can use the
    database. Every downgrade in between runs in one transaction: a failure leaves the schema as it was.
    The stored functions' checksum is cleared, so the stark-pg that connects next installs its own. This
    stark-pg upgrades the database again the next time it connects, as any database behind its head."""
    from stark_pg.db import functions

    if not downgrade_steps(dsn, revision):
        return
    try:
        command.downgrade(alembic_config(dsn), revision)
        with psycopg.connect(dsn, autocommit=True) as conn:
            functions.forget(conn)
    except (RuntimeError, DBAPIError, psycopg.Error) as exc:
        # a downgrade that refuses (0035 while bagged fusion models are stored) or that the server
        # refuses (0011's role still used by another database): the transaction rolled back
        reason = exc.orig if isinstance(exc, DBAPIError) else exc
        raise DatabaseError(f"the downgrade to {revision} failed and changed nothing: {reason}") from exc


def _require_known(scripts: ScriptDirectory, current: str, advice: str) -> None:
    """Refuse a database a newer stark-pg migrated (alembic would raise "Can't locate revision" from deep
    inside): say what happened, then `advice`, what to do. A revision of the chain the baseline replaced
    (numbered below it) is older, not newer: it says how to bring it up."""
    if _known(scripts, current):
        return
    first = _first_revision(scripts)
    if current.isdigit() and first.isdigit() and int(current) < int(first):
        raise OlderSchema(f"the database's stark-pg schema is revision {current}, older than this stark-pg's "
                          f"baseline {first}: bring it to {first} with stark-pg 0.1.0 "
                          "(`stark-pg db upgrade`), then use this one")
    raise NewerSchema(f"the database's stark-pg schema is revision {current}, newer than this stark-pg knows"
                      f"{advice}")


def _first_revision(scripts: ScriptDirectory) -> str:
    return list(scripts.walk_revisions())[-1].revision


def _known(scripts: ScriptDirectory, revision: str) -> bool:
    from alembic.util.exc import CommandError

    try:
        return scripts.get_revision(revision) is not None
    except CommandError:
        return False


def run_sql_file(relative: str) -> None:
    """Execute one file from `sql/schema/` inside the running migration, as psql would: verbatim, all statements.

    The text goes straight to psycopg (no SQLAlchemy bind-parameter parsing), so `:=`, `%` and
    dollar-quoted function bodies reach PostgreSQL untouched.
    """
    from alembic import op

    from stark_pg.resources import sql_text

    op.get_bind().connection.driver_connection.execute(sql_text(relative))
