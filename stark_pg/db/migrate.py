"""Bring a database to the newest stark-pg schema with alembic (`migrations/`).

Migrations run on first use of every DSN and on `stark-pg db upgrade`; each migration executes
SQL files from `sql/`, so the schema and the SQL API are readable as plain SQL. A migration that
changes functions re-runs their file under `sql/functions/`; its downgrade runs
`sql/downgrade/<the migration's file name>.sql`, which holds the text they had before, verbatim
(copied there when the migration is written). `stark-pg db downgrade` runs the downgrades.
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

from stark_pg.db.connection import DatabaseError
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


def upgrade(dsn: str, revision: str = "head") -> None:
    current = current_revision(dsn)
    scripts = _scripts()
    head = scripts.get_current_head()
    if current == head and revision == "head":
        return
    if current is not None:
        _require_known(scripts, current, f" (head {head}): upgrade stark-pg, or use a database it created")
    command.upgrade(alembic_config(dsn), revision)


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
    This stark-pg upgrades the database again the next time it connects, as any database behind its head."""
    if not downgrade_steps(dsn, revision):
        return
    try:
        command.downgrade(alembic_config(dsn), revision)
    except (RuntimeError, DBAPIError, psycopg.Error) as exc:
        # a downgrade that refuses (0035 while bagged fusion models are stored) or that the server
        # refuses (0011's role still used by another database): the transaction rolled back
        reason = exc.orig if isinstance(exc, DBAPIError) else exc
        raise DatabaseError(f"the downgrade to {revision} failed and changed nothing: {reason}") from exc


def _require_known(scripts: ScriptDirectory, current: str, advice: str) -> None:
    """Refuse a database a newer stark-pg migrated (alembic would raise "Can't locate revision" from deep
    inside): say what happened, then `advice`, what to do."""
    if not _known(scripts, current):
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
    """Execute one file from `sql/` inside the running migration, as psql would: verbatim, all statements.

    The text goes straight to psycopg (no SQLAlchemy bind-parameter parsing), so `:=`, `%` and
    dollar-quoted function bodies reach PostgreSQL untouched.
    """
    from alembic import op

    from stark_pg.resources import sql_text

    op.get_bind().connection.driver_connection.execute(sql_text(relative))
