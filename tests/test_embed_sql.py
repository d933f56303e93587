"""Text in, ranking out, in SQL (issue 51, item 1): `stark-pg serve`'s /v1/embeddings, stark.embed through
the http extension, stark.search against the Python methods, and the security of the http door.

Against the real embedded PostgreSQL and the real MiniLM: a generated 60-node SKB (tests/test_mfar.py's
pharma bundle: fields, relations, chunks) with small mFAR and fusion models, and `stark-pg serve`'s
application on a loopback port in a thread, counting the requests it answers.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import psycopg
import pytest

from stark_pg.db import connect
from stark_pg.embed import encode_query

SKB = "pharma"
QUESTION = "Which drugs target GENE3?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`stark-pg serve`'s application under uvicorn on a free loopback port, in a thread; `requests`
    counts the POSTs to /v1/embeddings it received."""

    def __init__(self, dsn: str):
        import uvicorn

        from stark_pg.serve import create_app

        app = create_app(dsn)
        self.requests = 0

        async def counting(scope, receive, send):
            if scope["type"] == "http" and scope["path"] == "/v1/embeddings":
                self.requests += 1
            await app(scope, receive, send)

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(counting, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def post(self, payload) -> tuple[int, dict]:
        request = urllib.request.Request(self.url + "/v1/embeddings", data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def trained_url(server_url, template_db, tmp_path_factory):
    """The pharma SKB indexed (BM25 per field, document and chunk vectors) with an mFAR and a fusion model."""
    from conftest import cloned_database
    from loaders.bundle import BundleSource
    from stark_pg.index.dense import build_dense
    from stark_pg.index.lexical import build_lexical, relation_scopes
    from stark_pg.models.fusion import FusionSettings
    from stark_pg.skb.store import load_skb
    from stark_pg.train.fusion import train_fusion
    from stark_pg.train.mfar import TrainSettings, train_mfar
    from test_mfar import write_pharma_bundle

    with cloned_database(server_url, template_db, "stark_embed") as url:
        with connect(url) as conn:
            load_skb(conn, BundleSource(write_pharma_bundle(tmp_path_factory.mktemp("pharma") / "pharma")))
            build_lexical(conn, SKB, extra_scopes=relation_scopes(conn, SKB))
            build_dense(conn, SKB)
            train_mfar(conn, SKB, TrainSettings(variant="all", epochs=3, patience=3, negatives=8))
            train_fusion(conn, SKB, FusionSettings(rounds=[5], folds=2, min_data_in_leaf=[2], bag=1))
        yield url


@pytest.fixture(scope="module")
def served(trained_url):
    with Served(trained_url) as server:
        yield server


@pytest.fixture(scope="module")
def endpoint_url(trained_url, served):
    """The database with its embedding endpoint set to the served application."""
    from conftest import cli_runner

    done = cli_runner(trained_url)("db", "embedding-endpoint", served.url, "--timeout", "60")
    assert f"{served.url}/v1/embeddings" in done.stdout
    return trained_url


# ---------------------------------------------------------------------------------------------- /v1/embeddings

def test_the_endpoint_answers_with_the_vectors_search_uses(served):
    status, body = served.post({"model": "all-MiniLM-L6-v2", "input": QUESTION})
    assert status == 200
    assert body["object"] == "list" and body["model"] == "all-MiniLM-L6-v2"
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"]
    assert np.array_equal(np.asarray(body["data"][0]["embedding"], dtype=np.float32), encode_query(QUESTION))

    status, body = served.post({"model": "default", "input": [QUESTION, "kinase inhibitor"],
                                "encoding_format": "base64"})
    assert status == 200 and [d["index"] for d in body["data"]] == [0, 1]
    import base64

    second = np.frombuffer(base64.b64decode(body["data"][1]["embedding"]), dtype="<f4")
    assert np.array_equal(second, encode_query("kinase inhibitor"))
    with urllib.request.urlopen(served.url + "/api/openapi.json", timeout=10) as reply:
        assert "post" in json.loads(reply.read())["paths"]["/v1/embeddings"]


def test_the_endpoint_refuses_as_openai_does(served):
    status, body = served.post({"model": "sentence-transformers/some-other-model", "input": "x"})
    assert status == 404 and body["error"]["code"] == "model_not_found" and body["error"]["param"] == "model"
    assert "all-MiniLM-L6-v2" in body["error"]["message"]
    status, body = served.post({"input": "x"})
    assert status == 400 and body["error"]["param"] == "model"
    status, body = served.post({"model": "all-MiniLM-L6-v2", "input": [1, 2, 3]})
    assert status == 400 and body["error"]["param"] == "input" and body["error"]["type"] == "invalid_request_error"
    with pytest.raises(urllib.error.HTTPError) as got:
        urllib.request.urlopen(served.url + "/v1/embeddings", timeout=10)
    assert got.value.code == 405


# ---------------------------------------------------------------------------------------------- stark.embed

def test_embed_equals_encode_query_and_is_cached(endpoint_url, served):
    text = "drugs for colitis that bind a membrane channel"
    with connect(endpoint_url) as conn:
        before = served.requests
        first = conn.execute("select stark.embed(%s)", (text,)).fetchone()[0]
        assert served.requests == before + 1
        assert np.array_equal(first.to_numpy(), encode_query(text))
        again = conn.execute("select stark.embed(%s, 'all-minilm-l6-v2')", (text,)).fetchone()[0]
        assert served.requests == before + 1                    # the cache answered
        assert np.array_equal(again.to_numpy(), first.to_numpy())
        assert conn.execute("select count(*) from stark_embed.cache where body = %s", (text,)).fetchone()[0] == 1


def test_embed_without_an_endpoint_says_how_to_set_one(endpoint_url):
    with connect(endpoint_url, autocommit=False) as conn:
        conn.execute("delete from stark_embed.endpoint")       # in a transaction rolled back below
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as got:
            conn.execute("select stark.embed('a question never asked before')")
        assert "no embedding endpoint" in got.value.diag.message_primary
        assert "stark-pg db embedding-endpoint" in got.value.diag.message_hint
        conn.rollback()


def test_the_endpoint_command_shows_the_setting_and_refuses_a_bad_url_in_one_line(endpoint_url, served):
    from conftest import cli_runner

    run = cli_runner(endpoint_url)
    shown = json.loads(run("db", "embedding-endpoint", "--json").stdout)
    assert shown["url"] == served.url and shown["api_key"] is False and shown["http_schema"] == "stark_http"
    for args, expected in ((["ftp://example.com"], "url must be http://HOST[:PORT][/PATH]"),
                           ([served.url, "--timeout", "0"], "--timeout 0.0: must be more than 0"),
                           ([served.url, "--api-key-env", "STARK_PG_NO_SUCH_VARIABLE"], "is not set")):
        done = run("db", "embedding-endpoint", *args, expect=1)
        assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert json.loads(run("db", "embedding-endpoint", "--json").stdout)["url"] == served.url


# ---------------------------------------------------------------------------------------------- stark.search

@pytest.mark.parametrize("method, options", [
    ("bm25", {}), ("bm25", {"field": "description", "k1": 1.5}),
    ("vss", {}), ("vss", {"exact": True}),
    ("multivss", {}), ("multivss", {"agg": "mean", "top": 2}),
    ("hybrid", {}), ("hybrid", {"fusion": "weighted", "weight": 0.3}),
    ("mfar", {}), ("mfar", {"mask": "description:dense"}),
    ("fusion", {}),
])
def test_search_ranks_as_the_python_method(endpoint_url, method, options):
    from stark_pg.retrieve import get_method

    module = get_method(method)
    with connect(endpoint_url) as conn:
        for question in (QUESTION, "colitis tablet kinase inhibitor"):
            python = module.search(conn, SKB, question, 10, module.Options(**options)).hits
            rows = conn.execute("select node_id, type, name, score from stark.search(%s, %s, %s, 10, %s::jsonb)",
                                (SKB, question, method, json.dumps(options))).fetchall()
            assert [r[0] for r in rows] == [h.node_id for h in python], (method, question)
            assert [r[3] for r in rows] == pytest.approx([h.score for h in python], rel=1e-9, abs=1e-12)
            names = dict(conn.execute("select node_id, name from stark.node where skb_id = stark.skb_id(%s)",
                                      (SKB,)).fetchall())
            assert [r[2] for r in rows] == [names[r[0]] for r in rows]


def test_search_errors_are_one_clear_line(endpoint_url):
    cases = [
        (("nope", QUESTION, "bm25", 10, "{}"), "no SKB named 'nope'"),
        ((SKB, QUESTION, "rerank", 10, "{}"), "search method must be one of bm25, vss, multivss, hybrid, mfar, fusion"),
        ((SKB, QUESTION, "hybrid", 10, '{"depth": 3}'), "search hybrid has no option depth"),
        ((SKB, QUESTION, "hybrid", 10, '{"weight": "lots"}'), "search hybrid option weight must be a number"),
        ((SKB, QUESTION, "mfar", 10, '{"name": "nope"}'), "no mFAR model 'nope' for SKB 'pharma' (trained: all)"),
        ((SKB, QUESTION, "fusion", 10, '{"name": "nope"}'), "no fusion model 'nope' for SKB 'pharma'"),
        ((SKB, QUESTION, "mfar", 10, '{"mask": "colour"}'), "mask 'colour': model 'all' has no such pair"),
        ((SKB, QUESTION, "bm25", -1, "{}"), "search k must be"),
    ]
    with connect(endpoint_url) as conn:
        for args, expected in cases:
            with pytest.raises(psycopg.Error) as got:
                conn.execute("select * from stark.search(%s, %s, %s, %s, %s::jsonb)", args)
            message = got.value.diag.message_primary
            assert expected in message and "\n" not in message, (args, message)


def test_a_fusion_model_with_fold_encoders_is_refused_in_one_line(endpoint_url):
    with connect(endpoint_url) as conn:
        with conn.transaction():
            conn.execute("insert into stark.fusion_model (skb_id, name, embed_model, features, boosters, score_sql, "
                         "settings, metrics, importance) select skb_id, 'xf', embed_model, features, boosters, "
                         "score_sql, settings || '{\"dense\": \"dense-xf\"}', metrics, importance "
                         "from stark.fusion_model where name = 'default'")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as got:
            conn.execute("select * from stark.search(%s, %s, 'fusion', 10, '{\"name\": \"xf\"}')", (SKB, QUESTION))
        assert "trained with --dense" in got.value.diag.message_primary


# ---------------------------------------------------------------------------------------------- the http door

@pytest.fixture
def unprivileged(endpoint_url):
    """A login role that may search (usage on schema stark, select on its tables) and nothing more."""
    role = "stark_embed_tester"
    with psycopg.connect(endpoint_url, autocommit=True) as admin:
        admin.execute(f"drop role if exists {role}")
        admin.execute(f"create role {role} login")
        admin.execute(f"grant usage on schema stark to {role}")
        admin.execute(f"grant select on all tables in schema stark to {role}")
    try:
        yield role
    finally:
        with psycopg.connect(endpoint_url, autocommit=True) as admin:
            admin.execute(f"drop owned by {role}")
            admin.execute(f"drop role {role}")


def test_only_stark_embed_reaches_the_network(endpoint_url, unprivileged, served):
    with psycopg.connect(endpoint_url, autocommit=True) as conn:
        conn.execute(f"set role {unprivileged}")
        # it may search: stark.embed goes out with its owner's rights, to the owner's endpoint
        rows = conn.execute("select node_id from stark.search(%s, 'a question for the unprivileged', 'vss', 3)",
                            (SKB,)).fetchall()
        assert len(rows) == 3
        for statement in ("select stark_http.http_get('http://127.0.0.1:1/')",
                          "select stark_http.http_post('http://example.com/', 'x', 'text/plain')",
                          "select stark_http.http_set_curlopt('CURLOPT_TIMEOUT_MS', '1')",
                          "select stark.embed_endpoint_set('http://evil.example/')",
                          "update stark_embed.endpoint set url = 'http://evil.example/'",
                          "select url from stark_embed.endpoint",
                          "insert into stark_embed.cache values ('m', md5('q'), 'q', '[1,2,3]')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as got:
                conn.execute(statement)
            assert "permission denied" in got.value.diag.message_primary, statement
        # the agent's role neither
        conn.execute("reset role")
        conn.execute("set role stark_agent")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select stark_http.http_get('http://127.0.0.1:1/')")
    with psycopg.connect(endpoint_url) as conn:
        privileges = conn.execute(
            "select p.oid::regprocedure::text from pg_proc p join pg_depend d on d.objid = p.oid and d.deptype = 'e' "
            "join pg_extension e on e.oid = d.refobjid and e.extname = 'http' "
            "where has_function_privilege('public', p.oid, 'execute') "
            "   or has_function_privilege('stark_agent', p.oid, 'execute')").fetchall()
        assert privileges == []


class Sleepy(http.server.BaseHTTPRequestHandler):
    """An endpoint that takes its time."""

    def do_POST(self):
        time.sleep(3)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def test_the_timeout_is_honoured(endpoint_url, served):
    slow = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sleepy)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    try:
        with connect(endpoint_url) as conn:
            conn.execute("select stark.embed_endpoint_set(%s, null, 300)", (f"http://127.0.0.1:{slow.server_port}",))
            started = time.monotonic()
            with pytest.raises(psycopg.errors.ConnectionFailure) as got:
                conn.execute("select stark.embed('a question the slow endpoint never answers')")
            assert time.monotonic() - started < 2.5
            assert "did not answer within 300 ms" in got.value.diag.message_primary
    finally:
        slow.shutdown()
        with connect(endpoint_url) as conn:
            conn.execute("select stark.embed_endpoint_set(%s, null, 60000)", (served.url,))


# ---------------------------------------------------------------------------------------------- the real slice

def test_search_on_the_real_slice_gives_stark_pg_searchs_ranking(server_url, ibd_indexed_url):
    """Issue 51's check: in SQL, with `stark-pg serve` answering, the ranking `stark-pg search` prints, for
    the question of the README and a fusion model (a small one), on a copy of the slice: training writes
    query vectors, and the session's indexed slice is for tests that only read it."""
    from psycopg.conninfo import conninfo_to_dict

    from conftest import cloned_database

    with cloned_database(server_url, conninfo_to_dict(ibd_indexed_url)["dbname"], "stark_ibd_embed") as url:
        check_the_slice(url)


def check_the_slice(ibd_indexed_url: str) -> None:
    from conftest import cli_runner
    from stark_pg.models.fusion import FusionSettings
    from stark_pg.retrieve import get_method
    from stark_pg.train.fusion import train_fusion

    skb, question = "stark-prime-ibd", "drugs that target PPARG"
    with connect(ibd_indexed_url) as conn:
        train_fusion(conn, skb, FusionSettings(name="embed-test", limit=30, rounds=[5], folds=2,
                                               min_data_in_leaf=[5], bag=1))
    try:
        with Served(ibd_indexed_url) as server:
            run = cli_runner(ibd_indexed_url)
            run("db", "embedding-endpoint", server.url, "--timeout", "60")
            printed = json.loads(run("search", skb, question, "-m", "fusion", "-o", "name=embed-test", "-k", "10",
                                     "--json").stdout)
            with connect(ibd_indexed_url) as conn:
                rows = conn.execute("select * from stark.search(%s, %s, 'fusion', 10, '{\"name\": \"embed-test\"}')",
                                    (skb, question)).fetchall()
                assert [(r[0], r[1], r[2]) for r in rows] == [(r["node_id"], r["type"], r["name"])
                                                              for r in printed["results"]]
                assert [r[3] for r in rows] == pytest.approx([r["score"] for r in printed["results"]], rel=1e-6)
                for method in ("bm25", "vss", "hybrid"):
                    python = [h.node_id for h in get_method(method).search(conn, skb, question, 10).hits]
                    sql = [r[0] for r in conn.execute("select node_id from stark.search(%s, %s, %s, 10)",
                                                      (skb, question, method))]
                    assert sql == python, method
    finally:
        with connect(ibd_indexed_url) as conn:
            conn.execute("delete from stark.fusion_model where name = 'embed-test'")
            conn.execute("delete from stark_embed.endpoint")
