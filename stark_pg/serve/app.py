"""The web application of `stark-pg serve`: pages and a JSON API over one database, read-only.

Every view is one function returning plain data (a dict); a page renders it with its template, the API
route under /api returns it as JSON, so the two never disagree. Searches go through
stark_pg.retrieve.results (configure, search_described), as `stark-pg search` does: the same ranking, and
the reply shaped as `stark-pg search --json`. Everything else reads sql/queries/serve.sql.

`POST /v1/embeddings` (stark_pg/serve/embeddings.py) answers OpenAI's embeddings protocol with the
vectors `stark-pg search` computes: the endpoint `stark.embed` calls from inside the database.

Errors a user causes (an unknown SKB, node or run, a bad method or setting, a missing index) are a
status code and one line: `{"error": ...}` from the API, an error page otherwise.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from stark_pg.resources import queries as sql
from stark_pg.serve.embeddings import embeddings_route

TEMPLATES = Path(__file__).resolve().parent / "templates"
TOP = 20                  # ranked nodes shown per run when a query of a diff is opened
NEIGHBOURS = 50           # neighbours shown per relation and direction on a node page
DIFF_FILTERS = ("all", "wins", "losses", "ties")
DIFF_SORTS = ("query_id", "rank_a", "rank_b", "change", "query")


class Problem(Exception):
    """A request that cannot be answered, with the HTTP status to answer it with and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = " ".join(message.split())


class JSON(JSONResponse):
    """JSON as `stark-pg ... --json` prints it: values JSON cannot hold (dates, decimals) as text."""

    def render(self, content) -> bytes:
        return json.dumps(content, default=str, ensure_ascii=False).encode("utf-8")


# ---------------------------------------------------------------------------------------------- database

class Store:
    """Read-only connections to one database, one per request.

    Read-only by the connection string: `options=-c default_transaction_read_only=on`, so that every
    connection made from it is too, including the side connections code opens from `conn.info.dsn`
    (the LLM cache writes its answers on one). The schema is brought up to date once, on an ordinary
    connection, as every command does. A DSN naming a primary and standbys sends the requests to a
    standby (`target_session_attrs=prefer-standby`, as `stark-pg search` reads): serving only reads."""

    def __init__(self, dsn: str | None):
        self.dsn = dsn
        self._url: str | None = None

    def url(self) -> str:
        if self._url is None:
            from psycopg.conninfo import conninfo_to_dict, make_conninfo

            from stark_pg.db import connect
            from stark_pg.db.connection import read_dsn, resolve_dsn

            base = resolve_dsn(self.dsn)
            connect(base).close()
            options = conninfo_to_dict(base).get("options") or ""
            self._url = make_conninfo(read_dsn(base), options=f"{options} -c default_transaction_read_only=on".strip())
        return self._url

    @contextmanager
    def connect(self):
        import psycopg
        from pgvector.psycopg import register_vector

        from stark_pg.db.connection import DatabaseError, redact_dsn

        url = self.url()
        try:
            conn = psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError as exc:
            raise DatabaseError(f"cannot connect to PostgreSQL at {redact_dsn(url)}: {exc}") from exc
        try:
            register_vector(conn)
            yield conn
        finally:
            conn.close()


def _rows(result) -> list[dict]:
    return [row[0] for row in result]


def _skb_id(conn, name: str) -> int:
    from stark_pg.skb.catalog import require_skb

    return require_skb(conn, name)


def _run(conn, run_id: int) -> dict:
    run = sql().serve_run(conn, run_id=run_id)
    if run is None:
        raise Problem(404, f"no evaluation run {run_id} (/api/runs lists the stored runs)")
    return run


# ---------------------------------------------------------------------------------------------- views

def skbs_view(store: Store) -> dict:
    with store.connect() as conn:
        return {"skbs": _rows(sql().serve_skbs(conn))}


@cache
def method_catalogue() -> list[dict]:
    """Every method with its summary, needs and settings (what `stark-pg methods --json` lists)."""
    from stark_pg.retrieve.catalog import all_methods

    return [m.to_dict() for m in all_methods()]


def search_view(store: Store, skb: str, query: str, method: str = "hybrid", k: int = 10,
                options: list[str] | None = None, explain: bool = False) -> dict:
    """The search `stark-pg search SKB QUERY -m METHOD -k K -o ... [--explain] --json` runs, and its reply."""
    from stark_pg.retrieve.results import check_k, configure, search_described

    check_k(k, "k")
    module, settings = configure(method, list(options or []), explain=explain)
    with store.connect() as conn:
        _skb_id(conn, skb)
        hits, ranking = search_described(conn, skb, query, module, settings, k)
    document = {"skb": skb, "query": query, "method": method, "results": [h.to_dict() for h in hits],
                "trace": ranking.trace}
    if explain:
        document["explain"] = ranking.trace.get("explain")
    return document


def node_view(store: Store, skb: str, node_id: int) -> dict:
    with store.connect() as conn:
        skb_id = _skb_id(conn, skb)
        node = sql().serve_node(conn, skb_id=skb_id, node_id=node_id)
        if node is None:
            raise Problem(404, f"no node {node_id} in {skb}")
        groups: dict[tuple[str, str], dict] = {}
        for row in _rows(sql().serve_neighbours(conn, skb_id=skb_id, node_id=node_id, per_relation=NEIGHBOURS)):
            group = groups.setdefault((row["direction"], row["relation"]),
                                      {"direction": row["direction"], "relation": row["relation"],
                                       "total": row["total"], "nodes": []})
            group["nodes"].append({"node_id": row["node_id"], "type": row["type"], "name": row["name"]})
    return {"skb": skb, **node, "neighbours": list(groups.values())}


def runs_view(store: Store, skb: str | None = None) -> dict:
    with store.connect() as conn:
        if skb:
            _skb_id(conn, skb)
        return {"skb": skb, "runs": _rows(sql().serve_runs(conn, skb=skb))}


def run_view(store: Store, run_id: int) -> dict:
    with store.connect() as conn:
        return _run(conn, run_id)


def _missing_rank(depth: int) -> int:
    return depth + 1


def diff_view(store: Store, a: int, b: int, show: str = "all", sort: str = "query_id",
              order: str = "asc") -> dict:
    """Two runs over one SKB's queries, query by query: the rank of the first answer in each, whether B
    ranks it higher than A (a win), lower (a loss) or the same (a tie; also when neither finds one)."""
    if show not in DIFF_FILTERS:
        raise Problem(400, f"show={show!r}: one of {', '.join(DIFF_FILTERS)}")
    if sort not in DIFF_SORTS:
        raise Problem(400, f"sort={sort!r}: one of {', '.join(DIFF_SORTS)}")
    if order not in ("asc", "desc"):
        raise Problem(400, f"order={order!r}: asc or desc")
    with store.connect() as conn:
        run_a, run_b = _run(conn, a), _run(conn, b)
        if run_a["skb_id"] != run_b["skb_id"]:
            raise Problem(400, f"runs {a} and {b} are on different SKBs ({run_a['skb']}, {run_b['skb']}): "
                               "a diff pairs the queries of one SKB")
        rows = _rows(sql().serve_run_diff(conn, skb_id=run_a["skb_id"], run_a=a, run_b=b))
    missing = _missing_rank(max(run_a["depth"], run_b["depth"]))
    counts = dict.fromkeys(DIFF_FILTERS[1:], 0)
    for row in rows:
        ra, rb = row["rank_a"] or missing, row["rank_b"] or missing
        row["outcome"] = "wins" if rb < ra else "losses" if rb > ra else "ties"
        row["change"] = ra - rb         # how many places B moved the first answer up (negative: down)
        counts[row["outcome"]] += 1
    counts["all"] = len(rows)
    plot = rank_plot(rows, missing, f"A: run {a} ({run_a['method']})", f"B: run {b} ({run_b['method']})")
    shown = [r for r in rows if show == "all" or r["outcome"] == show]

    def key(row):
        value = row[sort]
        if sort in ("rank_a", "rank_b") and value is None:
            value = missing
        return (value if value is not None else "", row["query_id"])

    shown.sort(key=key, reverse=order == "desc")
    for run in (run_a, run_b):
        run.pop("skb_id", None)
    return {"skb": run_a["skb"], "a": run_a, "b": run_b, "show": show, "sort": sort, "order": order,
            "counts": counts, "unranked": missing, "queries": shown, "plot": plot}


def diff_query_view(store: Store, a: int, b: int, query_id: int, top: int = TOP) -> dict:
    """One query of two runs: both rankings side by side (answers marked), the answers' ranks, both traces."""
    if not 1 <= top <= 1000:
        raise Problem(400, f"top={top}: between 1 and 1000")
    with store.connect() as conn:
        run_a, run_b = _run(conn, a), _run(conn, b)
        if run_a["skb_id"] != run_b["skb_id"]:
            raise Problem(400, f"runs {a} and {b} are on different SKBs ({run_a['skb']}, {run_b['skb']})")
        sides = [sql().serve_run_query(conn, skb_id=run["skb_id"], run_id=run["run_id"], query_id=query_id, top=top)
                 for run in (run_a, run_b)]
    if sides[0] is None and sides[1] is None:
        raise Problem(404, f"neither run {a} nor run {b} has query {query_id}")
    first = sides[0] or sides[1]
    ranks = [{n["node_id"]: n["rank"] for n in side["answer_nodes"]} if side else {} for side in sides]
    answers = [{"node_id": n["node_id"], "type": n["type"], "name": n["name"],
                "rank_a": ranks[0].get(n["node_id"]), "rank_b": ranks[1].get(n["node_id"])}
               for n in first["answer_nodes"]]
    for run in (run_a, run_b):
        run.pop("skb_id", None)
    return {"skb": run_a["skb"], "query_id": query_id, "query": first["query"], "top": top, "answers": answers,
            "a": {"run": run_a, "result": sides[0]}, "b": {"run": run_b, "result": sides[1]}}


# ---------------------------------------------------------------------------------------------- the plot

PLOT_SIZE, PLOT_MARGIN, PLOT_GAP = 360, 48, 30


def rank_plot(rows: list[dict], missing: int, label_a: str, label_b: str) -> dict:
    """Per-query first-answer ranks, A across and B up, on log axes (rank 1 at the origin, 'none' a gap
    past the deepest rank): one circle per distinct (A, B) pair, its area the number of queries there.
    The template draws it as inline SVG; the data is plain so the API can return it too."""
    depth = missing - 1
    span = PLOT_SIZE - 2 * PLOT_MARGIN
    ranked = span - PLOT_GAP         # ranks 1 to depth, log scale; "none" a gap beyond

    def position(rank: int | None) -> float:
        if rank is None or rank > depth:
            return float(span)
        return round(ranked * math.log10(rank) / math.log10(depth), 1) if depth > 1 else 0.0

    cells: dict[tuple, list[int]] = {}
    for row in rows:
        cells.setdefault((row["rank_a"], row["rank_b"]), []).append(row["query_id"])
    points = []
    for (ra, rb), ids in sorted(cells.items(), key=lambda c: -len(c[1])):
        ea, eb = ra or missing, rb or missing
        points.append({"rank_a": ra, "rank_b": rb, "queries": len(ids), "query_ids": ids[:10],
                       "x": PLOT_MARGIN + position(ra), "y": PLOT_SIZE - PLOT_MARGIN - position(rb),
                       "r": round(3 + 2.5 * math.sqrt(len(ids) - 1), 1),
                       "outcome": "wins" if eb < ea else "losses" if eb > ea else "ties"})
    ticks = [t for t in (1, 10, 100, 1000, 10000, 100000) if t <= depth]
    axis = [{"label": str(t), "at": position(t)} for t in ticks] + [{"label": "none", "at": position(None)}]
    return {"size": PLOT_SIZE, "margin": PLOT_MARGIN, "span": span, "axis": axis, "points": points,
            "label_a": label_a, "label_b": label_b}


# ---------------------------------------------------------------------------------------------- HTTP

def _int(request: Request, name: str, default: int | None = None, *, path: bool = False) -> int:
    raw = (request.path_params if path else request.query_params).get(name)
    if raw is None or raw == "":
        if default is None:
            raise Problem(400, f"{name}: required")
        return default
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise Problem(400 if not path else 404, f"{name}={raw!r}: not a whole number") from None


def _text(request: Request, name: str, default: str | None = None) -> str:
    value = request.query_params.get(name)
    if value is None or value.strip() == "":
        if default is None:
            raise Problem(400, f"{name}: required")
        return default
    return value


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("1", "true", "yes", "on")


def _options(request: Request) -> list[str]:
    """Method settings: `o=KEY=VALUE`, repeatable (as -o on the command line), and the search form's
    `options` box, one KEY=VALUE a line."""
    pairs = list(request.query_params.getlist("o"))
    for line in request.query_params.get("options", "").splitlines():
        if line.strip():
            pairs.append(line.strip())
    return pairs


def _problem_of(exc: Exception) -> Problem | None:
    """An expected failure as a status and its one-line message (None: a bug, left to raise)."""
    import psycopg

    from stark_pg.db.connection import DatabaseError
    from stark_pg.embed import DeviceError, ModelUnavailable
    from stark_pg.llm.errors import LLMError
    from stark_pg.options import OptionError
    from stark_pg.retrieve import MissingIndex, UnknownMethod
    from stark_pg.retrieve.vss import MissingQueryVector
    from stark_pg.skb.records import LoadError

    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, LoadError):
        return Problem(404, str(exc))
    if isinstance(exc, (UnknownMethod, OptionError, DeviceError, psycopg.errors.DataError,
                        psycopg.errors.RaiseException)):
        return Problem(400, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    if isinstance(exc, (MissingIndex, MissingQueryVector)):
        return Problem(409, str(exc))
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return Problem(403, "this search would write to the database (an LLM's answers to its cache) and "
                            "stark-pg serve only reads: add the setting cache=only to replay cached answers, "
                            "or run the search once with `stark-pg search` to cache them")
    if isinstance(exc, (ModelUnavailable, LLMError, DatabaseError, psycopg.OperationalError)):
        return Problem(503, str(exc))
    return None


def endpoint(view, template: str | None = None):
    """A route handler: `view(request)` gives the data; as JSON under /api, else rendered with `template`.
    Sync, so Starlette runs it in its thread pool (psycopg and the embedding models block)."""

    def handle(request: Request) -> Response:
        api = template is None
        try:
            data = view(request)
        except Exception as exc:
            problem = _problem_of(exc)
            if problem is None:
                raise
            if api:
                return JSON({"error": problem.message, "status": problem.status}, status_code=problem.status)
            return render(request, "error.html", {"status": problem.status, "message": problem.message},
                          problem.status)
        if isinstance(data, Response):
            return data
        return JSON(data) if api else render(request, template, data)

    return handle


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(("html",), default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson_pretty"] = lambda value: json.dumps(value, indent=2, default=str, ensure_ascii=False)
    env.filters["metric"] = lambda value: "" if value is None else f"{value:.3f}"
    env.filters["settings"] = lambda value: ", ".join(f"{k}={v}" for k, v in (value or {}).items()) or "defaults"
    env.globals["qs"] = lambda **params: urlencode({k: v for k, v in params.items() if v not in (None, "")},
                                                   doseq=True)
    return env


ENV = _environment()


def render(request: Request, template: str, data: dict, status: int = 200) -> HTMLResponse:
    body = ENV.get_template(template).render(**data, request=request, path=request.url.path)
    return HTMLResponse(body, status_code=status)


def create_app(dsn: str | None = None) -> Starlette:
    store = Store(dsn)

    def skbs(request):
        return skbs_view(store)

    def search(request):
        return search_view(store, _text(request, "skb"), _text(request, "q"), _text(request, "method", "hybrid"),
                           _int(request, "k", 10), _options(request), _flag(request, "explain"))

    def search_page(request):
        data = {"skbs": [s["name"] for s in skbs_view(store)["skbs"]], "methods": method_catalogue(),
                "skb": request.query_params.get("skb", ""), "q": request.query_params.get("q", ""),
                "method": request.query_params.get("method") or "hybrid", "k": _int(request, "k", 10),
                "options": "\n".join(_options(request)), "explain": _flag(request, "explain"),
                "reply": None, "error": None}
        if data["skb"] and data["q"].strip():
            try:
                data["reply"] = search(request)
            except Exception as exc:
                problem = _problem_of(exc)
                if problem is None:
                    raise
                data["error"] = problem.message
        return data

    def methods(request):
        return {"methods": method_catalogue()}

    def node(request):
        return node_view(store, request.path_params["skb"], _int(request, "node_id", path=True))

    def runs(request):
        return runs_view(store, request.query_params.get("skb") or None)

    def run(request):
        return run_view(store, _int(request, "a", path=True))

    def diff(request):
        return diff_view(store, _int(request, "a", path=True), _int(request, "b", path=True),
                         request.query_params.get("show", "all"), request.query_params.get("sort", "query_id"),
                         request.query_params.get("order", "asc"))

    def diff_pick(request):
        return RedirectResponse(f"/runs/{_int(request, 'a')}/diff/{_int(request, 'b')}", status_code=303)

    def diff_query(request):
        return diff_query_view(store, _int(request, "a", path=True), _int(request, "b", path=True),
                               _int(request, "query_id", path=True), _int(request, "top", TOP))

    def not_found(request):
        raise Problem(404, f"no page {request.url.path}")

    def openapi(request):
        return openapi_schema()

    routes = [
        Route("/", endpoint(skbs, "skbs.html")),
        Route("/skbs", endpoint(skbs, "skbs.html")),
        Route("/search", endpoint(search_page, "search.html")),
        Route("/nodes/{skb}/{node_id}", endpoint(node, "node.html")),
        Route("/runs", endpoint(runs, "runs.html")),
        Route("/runs/diff", endpoint(diff_pick, "error.html")),
        Route("/runs/{a}/diff/{b}", endpoint(diff, "diff.html")),
        Route("/runs/{a}/diff/{b}/queries/{query_id}", endpoint(diff_query, "diff_query.html")),
        Route("/api/skbs", endpoint(skbs)),
        Route("/api/methods", endpoint(methods)),
        Route("/api/search", endpoint(search)),
        Route("/api/nodes/{skb}/{node_id}", endpoint(node)),
        Route("/api/runs", endpoint(runs)),
        Route("/api/runs/{a}", endpoint(run)),
        Route("/api/runs/{a}/diff/{b}", endpoint(diff)),
        Route("/api/runs/{a}/diff/{b}/queries/{query_id}", endpoint(diff_query)),
        Route("/api/openapi.json", endpoint(openapi)),
        Route("/api/{rest:path}", endpoint(not_found)),
        Route("/v1/embeddings", embeddings_route(store, _problem_of), methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.store = store

    async def page_not_found(request, exc):
        message = f"no page {request.url.path}"
        if request.url.path.startswith("/api/"):
            return JSON({"error": message, "status": 404}, status_code=404)
        return render(request, "error.html", {"status": 404, "message": message}, 404)

    async def method_not_allowed(request, exc):
        allowed = "POST" if request.url.path == "/v1/embeddings" else "GET"
        return JSON({"error": f"{request.method} {request.url.path}: read-only, only {allowed}", "status": 405},
                    status_code=405)

    app.add_exception_handler(404, page_not_found)
    app.add_exception_handler(405, method_not_allowed)
    return app


# ---------------------------------------------------------------------------------------------- OpenAPI

def _parameter(name: str, where: str, kind: str, about: str, required: bool = False, array: bool = False) -> dict:
    schema = {"type": "array", "items": {"type": kind}} if array else {"type": kind}
    return {"name": name, "in": where, "required": required or where == "path", "description": about,
            "schema": schema}


def openapi_schema() -> dict:
    """The JSON API as OpenAPI 3.1: paths, parameters and what each returns."""
    skb = _parameter("skb", "path", "string", "The SKB's name.")
    a, b = (_parameter(n, "path", "integer", f"Run {n.upper()}'s id (/api/runs).") for n in ("a", "b"))
    error = {"description": "A one-line error", "content": {"application/json": {"schema": {
        "type": "object", "properties": {"error": {"type": "string"}, "status": {"type": "integer"}}}}}}

    def get(summary: str, parameters: list, *errors: int) -> dict:
        return {"get": {"summary": summary, "parameters": parameters,
                        "responses": {"200": {"description": "JSON"}, **{str(e): error for e in errors}}}}

    return {
        "openapi": "3.1.0",
        "info": {"title": "stark-pg serve", "version": _version(),
                 "description": "Read-only JSON over the SKBs, searches and stored evaluation runs."},
        "paths": {
            "/api/skbs": get("Loaded SKBs with their sizes and run counts", []),
            "/api/methods": get("Every retrieval method, its needs and settings", []),
            "/api/search": get("Rank an SKB's nodes for a question, as `stark-pg search --json`", [
                _parameter("skb", "query", "string", "The SKB to search.", True),
                _parameter("q", "query", "string", "The question.", True),
                _parameter("method", "query", "string", "The method (default hybrid; /api/methods)."),
                _parameter("k", "query", "integer", "Number of results (default 10)."),
                _parameter("o", "query", "string", "A method setting KEY=VALUE, repeatable.", array=True),
                _parameter("explain", "query", "boolean", "Also the method's step-by-step explanation."),
            ], 400, 404, 409, 503),
            "/api/nodes/{skb}/{node_id}": get("A node: its fields and neighbours by relation", [
                skb, _parameter("node_id", "path", "integer", "The node's id.")], 404),
            "/api/runs": get("Stored evaluation runs with their settings and metrics", [
                _parameter("skb", "query", "string", "Only this SKB's runs.")], 404),
            "/api/runs/{a}": get("One stored run", [a], 404),
            "/api/runs/{a}/diff/{b}": get("Two runs query by query: the first answer's rank in each", [
                a, b, _parameter("show", "query", "string", f"One of {', '.join(DIFF_FILTERS)}."),
                _parameter("sort", "query", "string", f"One of {', '.join(DIFF_SORTS)}."),
                _parameter("order", "query", "string", "asc or desc.")], 400, 404),
            "/api/runs/{a}/diff/{b}/queries/{query_id}": get("One query's rankings in both runs, answers marked", [
                a, b, _parameter("query_id", "path", "integer", "The query's id."),
                _parameter("top", "query", "integer", f"Ranked nodes per run (default {TOP}).")], 400, 404),
            "/v1/embeddings": {"post": {
                "summary": "Query vectors as `stark-pg search` computes them (OpenAI's embeddings protocol)",
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["model", "input"],
                    "properties": {"model": {"type": "string"},
                                   "input": {"oneOf": [{"type": "string"},
                                                       {"type": "array", "items": {"type": "string"}}]},
                                   "encoding_format": {"type": "string", "enum": ["float", "base64"]}}}}}},
                "responses": {"200": {"description": "JSON: data[].embedding, model, usage"},
                              "400": {"description": "OpenAI's error object: a malformed request"},
                              "404": {"description": "OpenAI's error object: model_not_found"},
                              "503": {"description": "OpenAI's error object: the database or the model is out "
                                                     "of reach"}}}},
        },
    }


def _version() -> str:
    from stark_pg import __version__

    return __version__
