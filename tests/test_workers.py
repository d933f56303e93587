"""Concurrent model calls (`--workers`, stark_pg/llm/concurrency.py) against local servers speaking the
OpenAI protocol through the real SDK: the ordered map and its bound, one call and one cache row when
workers ask the same request at once, several base URLs taken in turn, a 429's Retry-After waited
out, and an evaluation, an index build and a synthesis that store with N workers exactly what a
sequential run stores.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from fake_llm_server import FakeLLMServer, Scripted, fake_embedding, user_text
from loaders.bundle import BundleSource
from stark_pg.eval import query_sets
from stark_pg.eval.runner import run_method
from stark_pg.index.dense import build_dense, find_model
from stark_pg.llm import client_from_options, embeddings
from stark_pg.llm.concurrency import WorkersError, current, ordered_map, resolve_workers, workers
from stark_pg.retrieve import get_method, vss_rerank
from stark_pg.skb.store import load_skb
from test_rerank import EDGES, NODES, QUERIES, gold_responder

ENV = ("STARK_PG_LLM", "STARK_PG_LLM_BASE_URL", "STARK_PG_EMBED_BASE_URL", "STARK_PG_LLM_ENDPOINT",
       "STARK_PG_LLM_CACHE", "STARK_PG_LLM_TIMEOUT", "STARK_PG_LLM_RETRIES", "STARK_PG_WORKERS", "OPENAI_API_KEY",
       "OPENAI_BASE_URL")
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STARK_PG_LLM_RETRIES", "0")


def echo_server():
    """A local OpenAI-protocol server that answers each request with its own user text."""
    fake = FakeLLMServer().start()
    fake.responder = lambda kind, body: f"echo: {user_text(kind, body)}"
    yield fake
    fake.stop()


server = pytest.fixture(echo_server, name="server")
second_server = pytest.fixture(echo_server, name="second_server")


# --- the mechanism ------------------------------------------------------------------------------

def test_ordered_map_keeps_the_items_order_and_its_bound():
    running, most, guard = [0], [0], threading.Lock()

    def slow(i):
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02 * (7 - i % 7))            # later items finish first
        with guard:
            running[0] -= 1
        return i * i, current()

    with workers(3):
        out = ordered_map(slow, range(12))
    assert [o[0] for o in out] == [i * i for i in range(12)]
    assert most[0] == 3
    assert {o[1] for o in out} == {1}              # no fan-out inside a worker
    assert current() == 1


def test_an_error_is_raised_at_its_items_place():
    def boom(i):
        if i == 2:
            raise ValueError("item 2")
        return i

    with workers(4), pytest.raises(ValueError, match="item 2"):
        ordered_map(boom, range(6))


def test_workers_come_from_the_option_then_the_environment_and_zero_is_refused(monkeypatch):
    assert resolve_workers(None) == 1 and resolve_workers(8) == 8
    monkeypatch.setenv("STARK_PG_WORKERS", "6")
    assert resolve_workers(None) == 6 and resolve_workers(2) == 2
    with pytest.raises(WorkersError, match="--workers 0: must be at least 1"):
        resolve_workers(0)
    monkeypatch.setenv("STARK_PG_WORKERS", "many")
    with pytest.raises(WorkersError, match="STARK_PG_WORKERS='many'"):
        resolve_workers(None)


def test_the_cli_refuses_zero_workers(cli):
    for command in (["eval", "x", "-m", "bm25"], ["search", "x", "q"], ["index", "x"],
                    ["train", "agent", "x"], ["synthesize", "make", "x"]):
        done = cli(*command, "--workers", "0", expect=1)
        assert "--workers 0: must be at least 1" in done.stderr and "Traceback" not in done.stderr


# --- the cache and the servers ------------------------------------------------------------------

def test_workers_asking_one_request_at_once_make_one_call_and_one_row(conn, server):
    server.responder = lambda kind, body: Scripted(text="hello", delay=0.3)
    client = client_from_options(conn, llm="openai:qwen-test", base_url=server.openai_url)
    with workers(8):
        replies = ordered_map(lambda _: client.chat(HELLO), range(8))
    assert [r.text for r in replies] == ["hello"] * 8
    assert len(server.requests) == 1 and sum(not r.cached for r in replies) == 1
    assert conn.execute("select count(*) from stark.llm_cache").fetchone()[0] == 1


def test_several_base_urls_take_the_requests_in_turn_under_one_cache_identity(conn, server, second_server):
    both = f"{server.openai_url}, {second_server.openai_url}"
    client = client_from_options(conn, llm="openai:qwen-test", base_url=both)
    with workers(4):
        texts = ordered_map(lambda i: client.chat([{"role": "user", "content": f"q{i}"}]).text, range(8))
    assert texts == [f"echo: q{i}" for i in range(8)]
    assert len(server.requests) == 4 and len(second_server.requests) == 4
    # the answers are the replicas', whichever answered: a replay asks neither
    again = client_from_options(conn, llm="openai:qwen-test", base_url=both, cache="only")
    assert again.chat([{"role": "user", "content": "q5"}]).cached
    assert client.settings.endpoint == f"{server.openai_url},{second_server.openai_url}"


def test_a_429_with_retry_after_is_waited_out_and_retried(conn, server, monkeypatch):
    monkeypatch.setenv("STARK_PG_LLM_RETRIES", "2")
    server.script = [Scripted(status=429, headers={"retry-after": "1"})]
    client = client_from_options(conn, llm="openai:qwen-test", base_url=server.openai_url)
    started = time.perf_counter()
    with workers(2):
        texts = ordered_map(lambda i: client.chat([{"role": "user", "content": f"q{i}"}]).text, range(2))
    assert texts == ["echo: q0", "echo: q1"]
    assert len(server.requests) == 3                     # one refused, retried after the second it asked for
    assert time.perf_counter() - started >= 0.9


# --- the same rows as a sequential run ----------------------------------------------------------

@pytest.fixture
def tiny_skb(conn, tmp_path):
    path = tmp_path / "tiny-pharma"
    path.mkdir()
    (path / "nodes.jsonl").write_text("".join(json.dumps(n) + "\n" for n in NODES))
    (path / "edges.tsv").write_text(EDGES)
    (path / "queries.csv").write_text(QUERIES)
    skb_id = load_skb(conn, BundleSource(path)).skb_id
    build_dense(conn, "tiny-pharma", multi_vector=False)
    return skb_id


def untimed(value):
    """A trace without its timings (keys `seconds` and `*_ms`), which differ between any two runs, and
    without `embed_cached`: the second run finds the query embeddings the first one left in the process."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items()
                if k not in ("seconds", "embed_cached") and not k.endswith("_ms")}
    return [untimed(v) for v in value] if isinstance(value, list) else value


def stored_results(conn, run_id: int) -> list[tuple]:
    """A run's rows but for the run id, the latency and the traces' timings."""
    rows = conn.execute("select query_id, ranked_ids, scores, answer_ids, answer_ranks, metrics, trace, error "
                        "from stark.eval_result where run_id = %s order by query_id", (run_id,)).fetchall()
    return [(*head, untimed(trace), error) for *head, trace, error in rows]


def test_a_concurrent_eval_stores_the_rows_of_a_sequential_one(conn, tiny_skb, server):
    def slow_gold(kind, body):
        reply = gold_responder(kind, body)
        return reply if isinstance(reply, Scripted) else Scripted(text=reply, delay=0.02)

    server.responder = slow_gold
    chosen = query_sets.from_split(conn, tiny_skb, "val")
    options = vss_rerank.Options(k_max=6, llm="openai:qwen-test", base_url=server.openai_url)
    sequential = run_method(conn, tiny_skb, "tiny-pharma", "vss+rerank", options, chosen, resolve=get_method)
    asked = len(server.requests)
    conn.execute("delete from stark.llm_cache")             # the concurrent run calls as the first did
    with workers(4):
        concurrent = run_method(conn, tiny_skb, "tiny-pharma", "vss+rerank", options, chosen, resolve=get_method)
    assert concurrent.run_id != sequential.run_id
    assert len(server.requests) == 2 * asked
    assert stored_results(conn, concurrent.run_id) == stored_results(conn, sequential.run_id)
    assert concurrent.summary["metrics"] == sequential.summary["metrics"]
    assert concurrent.summary["failed"] == sequential.summary["failed"] == 1
    assert {k: v for k, v in concurrent.summary["llm"].items() if "seconds" not in k} == \
        {k: v for k, v in sequential.summary["llm"].items() if "seconds" not in k}


def test_an_index_with_an_openai_model_and_workers_stores_the_sequential_vectors(conn, tiny_skb, server,
                                                                                  monkeypatch):
    monkeypatch.setenv("STARK_PG_EMBED_BASE_URL", server.openai_url)
    texts = [f"text number {i}" for i in range(23)] + ["text number 3"]
    sequential = embeddings.encode(texts, "openai:fake-embed", batch_size=4)
    conn.execute("delete from stark.llm_cache")
    server.requests.clear()
    with embeddings.cache_in(conn), workers(4):
        concurrent = embeddings.encode(texts, "openai:fake-embed", batch_size=4)
    assert np.array_equal(concurrent, sequential)
    assert len(server.requests) == 6                    # 23 distinct texts, 4 a request
    expected = np.stack([fake_embedding(t) for t in texts])
    assert np.allclose(concurrent, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)
    with workers(3):
        report = build_dense(conn, "tiny-pharma", model="openai:fake-embed", multi_vector=False, encode_batch=2)
    assert report["documents"]["embedded"] == len(NODES)
    table = find_model(conn, "openai:fake-embed").doc_table
    stored = dict(conn.execute(f"select node_id, vec from stark.{table} where skb_id = %s", (tiny_skb,)).fetchall())
    documents = dict(conn.execute("select node_id, stark.render_document(skb_id, node_id, true, 25) from stark.node "
                                  "where skb_id = %s", (tiny_skb,)).fetchall())
    ids = sorted(documents)
    replay = embeddings.encode([documents[n] for n in ids], "openai:fake-embed")     # sequential, from the cache
    assert np.allclose(np.stack([stored[n].to_numpy() for n in ids]), replay, atol=1e-6)


def test_the_python_api_evaluates_with_workers_and_refuses_zero(conn, db_url, tiny_skb, server):
    from stark_pg import api

    server.responder = gold_responder
    with api.connect(db_url) as db:
        skb = db.skb("tiny-pharma")
        with pytest.raises(WorkersError, match="workers 0: must be at least 1"):
            skb.evaluate("vss+rerank", options={"llm": "openai:qwen-test", "base_url": server.openai_url}, workers=0)
        result = skb.evaluate("vss+rerank", options={"llm": "openai:qwen-test", "base_url": server.openai_url,
                                                     "k_max": 10}, workers=3)
    assert result.summary["vss+rerank"]["hit@1"] == pytest.approx(0.75)       # as sequentially (test_rerank)
