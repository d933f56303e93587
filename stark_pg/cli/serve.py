"""`stark-pg serve`: the read-only web view and JSON API (stark_pg/serve/) on a local port."""

from __future__ import annotations

import errno
import socket

import typer

from stark_pg.cli.common import err, fail, state

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def register(app: typer.Typer) -> None:
    app.command()(serve)


def serve(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on. The default answers this machine "
                                                         "only; 0.0.0.0 lets anyone who reaches it read the "
                                                         "database."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
) -> None:
    """Serve a read-only web view of the database and a JSON API: the SKBs, a node with its neighbours,
    a search box over every method with its settings and trace, the stored evaluation runs, and a diff of
    two runs query by query (docs/serve.md).

    Pages at http://HOST:PORT/, JSON under /api (/api/search, /api/skbs, /api/nodes/SKB/ID, /api/runs,
    /api/runs/A/diff/B; the OpenAPI schema at /api/openapi.json). POST /v1/embeddings answers OpenAI's
    embeddings protocol with the query vectors `stark-pg search` computes, for the models the database
    uses: the endpoint `stark.embed` calls from SQL (`stark-pg db embedding-endpoint`). Every connection is
    read-only: nothing served changes the database. Stops with Ctrl-C.
    """
    if not 1 <= port <= 65535:
        fail(f"--port {port}: must be between 1 and 65535")
    check_port(host, port)
    import uvicorn

    from stark_pg.serve import create_app

    dsn = state(ctx).dsn
    with state(ctx).connect():      # fail now, in one line, if the database cannot be reached
        pass
    if host not in LOOPBACK:
        err.print(f"warning: listening on {host}: anyone who can reach this machine on port {port} can read "
                  "the database", highlight=False, soft_wrap=True)
    shown = f"[{host}]" if ":" in host else host
    err.print(f"stark-pg serve: http://{shown}:{port}/ (read-only; Ctrl-C stops it)", highlight=False)
    uvicorn.run(create_app(dsn), host=host, port=port, log_level="warning")


def check_port(host: str, port: int) -> None:
    """One clear line when the address cannot be listened on (in use, not this machine's, not allowed),
    before the server starts, instead of uvicorn's log and exit."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        fail(f"--host {host}: not an address this machine can listen on ({exc.strerror})")
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                fail(f"port {port} on {host} is in use (another server?): choose another with --port")
            if exc.errno == errno.EACCES:
                fail(f"port {port} on {host}: not allowed (ports below 1024 need privileges): choose another "
                     "with --port")
            fail(f"cannot listen on {host} port {port}: {exc.strerror or exc}")
