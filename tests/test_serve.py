"""`stark-pg serve` against a real database: the JSON API (shaped and ranked as `stark-pg search --json`,
nodes, runs, the run diff), the pages, escaping of hostile text, read-only connections, clear errors, the
command itself; and, in a real headless Chromium, a click through search -> node -> run diff.

The real slice (stark-prime-ibd, with its bm25, vss and hybrid runs over the 171 val questions) is the
session's shared read-only database; a tiny bundle whose node names and questions are HTML (`<script>...`)
is loaded into a database of its own. Browser tests need Playwright and a Chromium (Debian's `chromium`,
or STARK_PG_CHROMIUM=PATH); without them they are skipped, saying which is missing. With
STARK_PG_SERVE_SCREENSHOTS=DIR they keep a screenshot of every page there (docs/serve/ holds those).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psycopg
import pytest

from conftest import cli_runner, cloned_database

SKB = "stark-prime-ibd"
EVIL = "<script>alert(1)</script>"
EVIL_QUERY = "Which drug <img src=x onerror=alert(2)> targets PPARG?"


# ---------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def ibd_client(ibd_indexed_url):
    from starlette.testclient import TestClient

    from stark_pg.serve import create_app

    with TestClient(create_app(ibd_indexed_url)) as client:
        yield client


@pytest.fixture(scope="module")
def runs(ibd_client) -> dict[str, int]:
    """The slice's stored runs by method (bm25, vss, hybrid over val)."""
    listed = ibd_client.get("/api/runs", params={"skb": SKB}).json()["runs"]
    return {r["method"]: r["run_id"] for r in listed if r["query_set"] == "split:val"}


def write_evil_bundle(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nodes = [
        {"id": 1, "type": "drug", "name": EVIL,
         "fields": {"description": "<img src=x onerror=alert(3)> binds the PPARG receptor & more"}},
        {"id": 2, "type": "gene/protein", "name": "PPARG <b>bold</b>",
         "fields": {"description": "peroxisome proliferator activated receptor gamma, a target"}},
        {"id": 3, "type": "drug", "name": "Rosiglitazone", "fields": {"description": "an agonist of PPARG"}},
    ]
    (folder / "nodes.jsonl").write_text("".join(json.dumps(n) + "\n" for n in nodes), encoding="utf-8")
    (folder / "edges.tsv").write_text("src\trelation\tdst\n1\ttarget\t2\n2\ttarget\t1\n3\ttarget\t2\n2\ttarget\t3\n",
                                      encoding="utf-8")
    (folder / "queries.csv").write_text(f'id,query,answer_ids,split\n10,"{EVIL_QUERY}","[1]",val\n'
                                        '11,"Which drug is an agonist of PPARG?","[3]",val\n', encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def evil_url(server_url, template_db, tmp_path_factory):
    """A database with a three-node SKB named `evil` whose texts are HTML, BM25-indexed, with two runs."""
    with cloned_database(server_url, template_db, "stark_serve_evil") as url:
        cli = cli_runner(url)
        cli("load", write_evil_bundle(tmp_path_factory.mktemp("evil") / "evil"), "--name", "evil")
        cli("index", "evil", "--no-dense")
        cli("eval", "evil", "-m", "bm25", "--split", "val")
        cli("eval", "evil", "-m", "bm25", "-o", "k1=0.5", "--split", "val")
        cli("load", write_evil_bundle(tmp_path_factory.mktemp("evil") / "copy"), "--name", "evil-copy")
        cli("index", "evil-copy", "--no-dense")
        cli("eval", "evil-copy", "-m", "bm25", "--split", "val")
        yield url


@pytest.fixture(scope="module")
def evil_client(evil_url):
    from starlette.testclient import TestClient

    from stark_pg.serve import create_app

    with TestClient(create_app(evil_url)) as client:
        yield client


def first_answer_ranks(url: str, run_id: int) -> dict[int, int | None]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("select query_id, answer_ranks from stark.eval_result where run_id = %s", (run_id,))
        return {q: min([r for r in ranks if r > 0], default=None) for q, ranks in rows}


# ---------------------------------------------------------------------------------------------- JSON API

def test_skbs_lists_the_slice_with_its_sizes(ibd_client):
    skbs = {s["name"]: s for s in ibd_client.get("/api/skbs").json()["skbs"]}
    assert skbs[SKB]["nodes"] == 3426 and skbs[SKB]["edges"] == 12752
    assert skbs[SKB]["queries"] == {"train": 435, "val": 171} and skbs[SKB]["runs"] >= 3


@pytest.mark.parametrize("method, options", [("bm25", []), ("hybrid", ["fusion=weighted", "weight=0.6"])])
def test_search_replies_and_ranks_as_the_cli_search_json(ibd_client, ibd_indexed_url, method, options):
    query = "drugs that target PPARG"
    reply = ibd_client.get("/api/search", params={"skb": SKB, "q": query, "method": method, "k": 7,
                                                  "o": options})
    assert reply.status_code == 200, reply.text
    got = reply.json()
    flags = [arg for pair in options for arg in ("-o", pair)]
    printed = json.loads(cli_runner(ibd_indexed_url)("search", SKB, query, "-m", method, "-k", "7", *flags,
                                                     "--json").stdout)
    assert set(got) == set(printed) == {"skb", "query", "method", "results", "trace"}
    assert [r["node_id"] for r in got["results"]] == [r["node_id"] for r in printed["results"]]
    assert [r["score"] for r in got["results"]] == pytest.approx([r["score"] for r in printed["results"]])
    assert got["results"][0].keys() == {"rank", "node_id", "type", "name", "score"}


def test_search_with_explain_carries_the_trace_and_the_explanation(ibd_client):
    got = ibd_client.get("/api/search", params={"skb": SKB, "q": "PPARG", "method": "bm25", "k": 3,
                                                "explain": "1"}).json()
    assert "explain" in got and isinstance(got["trace"], dict) and len(got["results"]) == 3


@pytest.mark.parametrize("params, status, words", [
    ({"skb": "nope", "q": "x"}, 404, "no SKB named 'nope' (known:"),
    ({"skb": SKB, "q": "x", "method": "bogus"}, 400, "unknown method 'bogus'"),
    ({"skb": SKB, "q": "x", "method": "bm25", "o": "colour=red"}, 400, "bm25 settings: k1=1.2"),
    ({"skb": SKB, "q": "x", "method": "bm25", "k": "0"}, 400, "at least 1"),
    ({"skb": SKB, "q": "x", "k": "ten"}, 400, "not a whole number"),
    ({"skb": SKB}, 400, "q: required"),
])
def test_search_errors_are_a_status_and_one_line(ibd_client, params, status, words):
    reply = ibd_client.get("/api/search", params=params)
    assert reply.status_code == status
    body = reply.json()
    assert words in body["error"] and "\n" not in body["error"] and body["status"] == status


def test_a_missing_index_is_one_line_that_says_so(evil_client):
    """`evil` has BM25 and no vectors: vss is refused by its SQL function (400, its first line, no
    PL/pgSQL context); a method whose model is missing says so (409)."""
    reply = evil_client.get("/api/search", params={"skb": "evil", "q": "PPARG", "method": "vss"})
    assert reply.status_code == 400 and reply.json()["error"].startswith("no vectors of model 'all-MiniLM-L6-v2'")
    assert "\n" not in reply.json()["error"] and "CONTEXT" not in reply.json()["error"]
    reply = evil_client.get("/api/search", params={"skb": "evil", "q": "PPARG", "method": "fusion"})
    assert reply.status_code == 409 and "no fusion model" in reply.json()["error"]


def test_node_has_its_fields_and_neighbours_by_relation(ibd_client, ibd_indexed_url):
    node = ibd_client.get(f"/api/nodes/{SKB}/144").json()
    assert node["name"] == "SMAD3" and node["type"] == "gene/protein" and "SMAD" in node["fields"]["description"]
    with psycopg.connect(ibd_indexed_url) as conn:
        expected = dict(conn.execute("select relation, count(*) from stark.edge where src = 144 group by relation"))
    outgoing = {g["relation"]: g for g in node["neighbours"] if g["direction"] == "out"}
    assert {r: g["total"] for r, g in outgoing.items()} == expected
    for group in node["neighbours"]:
        assert len(group["nodes"]) == min(group["total"], 50)
        assert all({"node_id", "type", "name"} <= n.keys() for n in group["nodes"])


def test_unknown_nodes_and_skbs_are_404(ibd_client):
    assert ibd_client.get(f"/api/nodes/{SKB}/1").json() == {"error": f"no node 1 in {SKB}", "status": 404}
    assert ibd_client.get("/api/nodes/nope/1").status_code == 404
    assert ibd_client.get(f"/api/nodes/{SKB}/abc").status_code == 404
    assert ibd_client.get("/api/nothing").json()["status"] == 404


def test_runs_have_their_settings_and_metrics(ibd_client, runs):
    listed = {r["run_id"]: r for r in ibd_client.get("/api/runs").json()["runs"]}
    bm25 = listed[runs["bm25"]]
    assert bm25["queries"] == 171 and bm25["finished"] and bm25["options"]["k1"] == 1.2
    assert 0 < bm25["summary"]["metrics"]["mrr"] < 1
    assert ibd_client.get(f"/api/runs/{runs['vss']}").json()["method"] == "vss"
    assert ibd_client.get("/api/runs", params={"skb": "nope"}).status_code == 404
    assert ibd_client.get("/api/runs/999999").status_code == 404


def test_diff_gives_each_querys_first_answer_rank_in_both_runs(ibd_client, ibd_indexed_url, runs):
    a, b = runs["bm25"], runs["vss"]
    diff = ibd_client.get(f"/api/runs/{a}/diff/{b}").json()
    ranks_a, ranks_b = first_answer_ranks(ibd_indexed_url, a), first_answer_ranks(ibd_indexed_url, b)
    assert len(diff["queries"]) == diff["counts"]["all"] == 171
    assert diff["counts"]["wins"] + diff["counts"]["losses"] + diff["counts"]["ties"] == 171
    unranked = diff["unranked"]
    for q in diff["queries"]:
        assert (q["rank_a"], q["rank_b"]) == (ranks_a[q["query_id"]], ranks_b[q["query_id"]])
        ra, rb = q["rank_a"] or unranked, q["rank_b"] or unranked
        assert q["outcome"] == ("wins" if rb < ra else "losses" if rb > ra else "ties")
        assert q["query"]
    assert sum(p["queries"] for p in diff["plot"]["points"]) == 171


def test_diff_filters_and_sorts(ibd_client, runs):
    a, b = runs["bm25"], runs["hybrid"]
    wins = ibd_client.get(f"/api/runs/{a}/diff/{b}", params={"show": "wins", "sort": "change", "order": "desc"}).json()
    assert wins["queries"] and {q["outcome"] for q in wins["queries"]} == {"wins"}
    assert len(wins["queries"]) == wins["counts"]["wins"]
    changes = [q["change"] for q in wins["queries"]]
    assert changes == sorted(changes, reverse=True) and all(c > 0 for c in changes)
    by_rank = ibd_client.get(f"/api/runs/{a}/diff/{b}", params={"sort": "rank_a"}).json()["queries"]
    keys = [q["rank_a"] or 10**9 for q in by_rank]
    assert keys == sorted(keys)
    assert ibd_client.get(f"/api/runs/{a}/diff/{b}", params={"show": "best"}).status_code == 400


def test_diff_of_one_query_puts_both_rankings_side_by_side(ibd_client, runs, ibd_indexed_url):
    a, b = runs["bm25"], runs["vss"]
    query_id = next(q for q, r in first_answer_ranks(ibd_indexed_url, a).items() if r and r <= 5)
    got = ibd_client.get(f"/api/runs/{a}/diff/{b}/queries/{query_id}").json()
    side_a, side_b = got["a"]["result"], got["b"]["result"]
    assert len(side_a["ranking"]) == len(side_b["ranking"]) == 20
    assert [n["rank"] for n in side_a["ranking"]] == list(range(1, 21))
    marked = [n for n in side_a["ranking"] if n["answer"]]
    assert marked and marked[0]["rank"] == side_a["first_answer_rank"]
    assert {n["node_id"] for n in got["answers"]} == set(side_a["answer_ids"])
    assert got["a"]["run"]["method"] == "bm25" and got["b"]["run"]["method"] == "vss"
    assert ibd_client.get(f"/api/runs/{a}/diff/{b}/queries/987654321").status_code == 404


def test_runs_of_different_skbs_are_not_diffed(evil_client):
    listed = evil_client.get("/api/runs").json()["runs"]
    mine = next(r["run_id"] for r in listed if r["skb"] == "evil")
    other = next(r["run_id"] for r in listed if r["skb"] == "evil-copy")
    reply = evil_client.get(f"/api/runs/{mine}/diff/{other}")
    assert reply.status_code == 400 and "different SKBs (evil, evil-copy)" in reply.json()["error"]
    assert evil_client.get(f"/api/runs/{mine}/diff/999999").status_code == 404


def test_openapi_schema_lists_the_api(ibd_client):
    schema = ibd_client.get("/api/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    assert {"/api/search", "/api/skbs", "/api/nodes/{skb}/{node_id}", "/api/runs", "/api/runs/{a}/diff/{b}"} \
        <= schema["paths"].keys()


# ---------------------------------------------------------------------------------------------- read-only

def test_connections_are_read_only_and_nothing_but_get_is_served(ibd_client):
    store = ibd_client.app.state.store
    with store.connect() as conn:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("delete from stark.eval_run")
        # code that opens a side connection from the request's (the LLM cache writes on one) gets a read-only one
        with psycopg.connect(conn.info.dsn, autocommit=True) as side:
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                side.execute("delete from stark.eval_run")
    for path in ("/api/search", "/api/runs", "/search", "/runs/diff"):
        reply = ibd_client.post(path)
        assert reply.status_code == 405 and "read-only" in reply.json()["error"]


def test_an_llm_methods_answer_is_not_cached_by_the_server(ibd_client, ibd_indexed_url):
    """hyde asks an LLM (here a fake one) for a document and would cache the answer: the server refuses
    the write, says how to search instead, and the cache is as it was."""
    from fake_llm_server import FakeLLMServer

    def cached() -> int:
        with psycopg.connect(ibd_indexed_url) as conn:
            return conn.execute("select count(*) from stark.llm_cache").fetchone()[0]

    before, llm = cached(), FakeLLMServer().start()
    llm.responder = lambda kind, body: "PPARG agonists such as pioglitazone and rosiglitazone target PPARG."
    try:
        reply = ibd_client.get("/api/search", params={"skb": SKB, "q": "drugs that target PPARG", "method": "hyde",
                                                      "o": ["llm=openai:fake", f"base_url={llm.openai_url}"]})
    finally:
        llm.stop()
    assert llm.requests, "the LLM was not asked"
    assert reply.status_code == 403 and "cache=only" in reply.json()["error"]
    assert cached() == before


# ---------------------------------------------------------------------------------------------- pages

def test_pages_render(ibd_client, runs):
    a, b = runs["bm25"], runs["vss"]
    skbs = ibd_client.get("/")
    assert skbs.status_code == 200 and SKB in skbs.text and "3,426" in skbs.text
    runs_page = ibd_client.get("/runs")
    assert f"/runs/diff" in runs_page.text and "0.3" in runs_page.text
    picked = ibd_client.get("/runs/diff", params={"a": a, "b": b}, follow_redirects=False)
    assert picked.status_code == 303 and picked.headers["location"] == f"/runs/{a}/diff/{b}"
    diff = ibd_client.get(f"/runs/{a}/diff/{b}")
    assert diff.status_code == 200 and diff.text.count('<tr class="q ') == 171
    assert "<svg" in diff.text and diff.text.count("<circle") >= 2
    wins = ibd_client.get(f"/runs/{a}/diff/{b}", params={"show": "wins"}).text
    assert 'class="q losses"' not in wins and 'class="q ties"' not in wins and 'class="q wins"' in wins
    node = ibd_client.get(f"/nodes/{SKB}/144").text
    assert "<h1 id=\"name\">SMAD3</h1>" in node and f'href="/nodes/{SKB}/' in node
    search = ibd_client.get("/search", params={"skb": SKB, "q": "drugs that target PPARG", "method": "bm25",
                                               "options": "k1=0.9\nb=0.4", "explain": "1"})
    assert search.status_code == 200 and 'id="results"' in search.text and 'id="trace"' in search.text


def test_page_errors_are_pages_with_the_status(ibd_client):
    missing = ibd_client.get("/nodes/nope/1")
    assert missing.status_code == 404 and "no SKB named" in missing.text
    bad = ibd_client.get("/search", params={"skb": SKB, "q": "x", "method": "bogus"})
    assert bad.status_code == 200 and 'id="error"' in bad.text and "unknown method" in bad.text
    assert ibd_client.get("/no/such/page").status_code == 404


def test_hostile_text_is_shown_as_text(evil_client):
    node = evil_client.get("/nodes/evil/1").text
    assert EVIL not in node and "<img src=x" not in node
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in node and "&lt;img src=x onerror=alert(3)&gt;" in node
    assert "PPARG &lt;b&gt;bold&lt;/b&gt;" in evil_client.get("/nodes/evil/3").text   # as a neighbour's link
    assert evil_client.get("/api/nodes/evil/1").json()["name"] == EVIL             # JSON keeps the text as it is
    search = evil_client.get("/search", params={"skb": "evil", "q": "PPARG receptor", "method": "bm25"}).text
    assert EVIL not in search and "&lt;script&gt;alert(1)&lt;/script&gt;" in search
    run_ids = sorted(r["run_id"] for r in evil_client.get("/api/runs", params={"skb": "evil"}).json()["runs"])
    diff = evil_client.get(f"/runs/{run_ids[0]}/diff/{run_ids[1]}").text
    assert "<img src=x" not in diff and "Which drug &lt;img src=x onerror=alert(2)&gt; targets PPARG?" in diff
    one = evil_client.get(f"/runs/{run_ids[0]}/diff/{run_ids[1]}/queries/10").text
    assert EVIL not in one and "<img src=x" not in one
    unknown = evil_client.get("/nodes/" + "%3Cscript%3E" + "/1").text
    assert "<script>'" not in unknown and "&lt;script&gt;" in unknown


# ---------------------------------------------------------------------------------------------- the command

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command_answers_on_loopback_until_stopped(ibd_indexed_url):
    port = free_port()
    env = os.environ | {"STARK_PG_DSN": ibd_indexed_url}
    server = subprocess.Popen([sys.executable, "-m", "stark_pg", "serve", "--port", str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, body = time.monotonic() + 120, None
        while time.monotonic() < deadline and body is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/skbs", timeout=5) as reply:
                    body = json.loads(reply.read())
            except OSError:
                assert server.poll() is None, server.stderr.read()
                time.sleep(0.3)
        assert body and SKB in [s["name"] for s in body["skbs"]]
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}/" in stderr


def test_serve_says_in_one_line_when_the_port_is_taken(ibd_indexed_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli_runner(ibd_indexed_url)("serve", "--port", port, expect=1)
    assert done.stderr.strip() == (f"error: port {port} on 127.0.0.1 is in use (another server?): "
                                   "choose another with --port")


def test_serve_refuses_a_bad_port(ibd_indexed_url):
    done = cli_runner(ibd_indexed_url)("serve", "--port", "70000", expect=1)
    assert done.stderr.strip() == "error: --port 70000: must be between 1 and 65535"


# ---------------------------------------------------------------------------------------------- a real browser

def chromium_path() -> str | None:
    return os.environ.get("STARK_PG_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "browser tests need playwright (pip install playwright)"
    if not chromium_path():
        return "browser tests need Chromium: apt-get install chromium (or STARK_PG_CHROMIUM=PATH)"
    return None


needs_browser = pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.dialogs = dialogs
    yield page
    context.close()


def live_server(url: str):
    """`stark-pg serve`'s application on a free loopback port, in a thread of this process."""
    import uvicorn

    from stark_pg.serve import create_app

    server = uvicorn.Server(uvicorn.Config(create_app(url), host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{server.config.port}"


@pytest.fixture(scope="module")
def ibd_site(ibd_indexed_url):
    server, thread, base = live_server(ibd_indexed_url)
    yield base
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture(scope="module")
def evil_site(evil_url):
    server, thread, base = live_server(evil_url)
    yield base
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = os.environ.get("STARK_PG_SERVE_SCREENSHOTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def follow(page, selector) -> None:
    """Click `selector` and wait for the page it leads to."""
    with page.expect_navigation():
        page.locator(selector).first.click()


@needs_browser
def test_browser_search_then_node_then_run_diff(page, ibd_site, runs, shots):
    page.goto(ibd_site + "/")
    page.screenshot(path=shots / "skbs.png", full_page=True)
    follow(page, "#skbs a[href^='/search']")
    page.fill("#q", "drugs that target PPARG")
    page.select_option("#method", "hybrid")
    page.check("input[name=explain]")
    follow(page, "#go")
    rows = page.locator("#results a.node")
    assert rows.count() == 10
    page.screenshot(path=shots / "search.png", full_page=True)
    name = rows.first.inner_text()
    follow(page, "#results a.node")
    assert page.inner_text("h1#name") == name
    assert page.locator("a.neighbour").count() > 0
    page.screenshot(path=shots / "node.png", full_page=False)
    neighbour_name = page.locator("a.neighbour").first.inner_text()
    follow(page, "a.neighbour")
    assert page.inner_text("h1#name") == neighbour_name

    follow(page, "header a[href='/runs']")
    assert page.locator("#runs tr").count() >= 4
    page.screenshot(path=shots / "runs.png", full_page=True)
    page.select_option("#run-a", str(runs["bm25"]))
    page.select_option("#run-b", str(runs["vss"]))
    follow(page, "#diff")
    assert page.url.endswith(f"/runs/{runs['bm25']}/diff/{runs['vss']}")
    assert page.locator("#queries tr.q").count() == 171
    assert page.locator("#plot circle").count() >= 2
    page.screenshot(path=shots / "diff.png", full_page=False)
    follow(page, "#show-wins")
    wins = page.locator("#queries tr.q")
    assert wins.count() > 0 and wins.count() == page.locator("#queries tr.q.wins").count()
    follow(page, "#queries a.sort:has-text('change')")
    follow(page, "#queries a.sort:has-text('change')")         # again: the largest change first
    changes = [int(t) for t in page.locator("#queries tr.q td:last-child").all_inner_texts()]
    assert changes == sorted(changes, reverse=True) and changes[0] > 0
    follow(page, "#queries a.sort:has-text('rank B')")         # B's best first: an answer at its top
    assert page.locator("#queries tr.q td.rank-b").first.inner_text() == "1"
    question = page.locator("#queries a.query").first.inner_text()
    follow(page, "#queries a.query")
    assert page.inner_text("h1#question") == question
    assert page.locator("#ranking-a table.ranking tr").count() == 21
    assert page.locator("#ranking-b table.ranking tr").count() == 21
    assert page.locator("#ranking-b tr.answer").first.locator("td").first.inner_text().endswith("1")
    page.screenshot(path=shots / "diff-query.png", full_page=False)
    assert page.dialogs == []


@needs_browser
def test_browser_shows_a_script_named_node_as_text(page, evil_site, shots):
    page.goto(evil_site + "/nodes/evil/1")
    assert page.inner_text("h1#name") == EVIL
    assert page.locator("script").count() == 0 and page.locator("main img").count() == 0
    page.screenshot(path=shots / "escaped.png")
    page.goto(evil_site + "/search?skb=evil&q=PPARG+receptor&method=bm25")
    assert EVIL in page.locator("#results").inner_text()
    assert page.dialogs == []
