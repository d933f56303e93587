"""Embeddings from an OpenAI-compatible server (`openai:MODEL`) against a local server speaking the
protocol (tests/fake_llm_server.py: deterministic vectors made from each text), through the real
openai SDK, the real PostgreSQL cache and the real index build and VSS search.

Covers batching, the SDK's retries after a 429 and a 500, the per-text cache (a second build, a
rebuild after the vectors are gone and a second search make no request), `cache=only`, meters with
tokens and cost, and the CLI (`index --model openai:...`, `search -m vss -o model=openai:...`).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fake_llm_server import FakeLLMServer, Scripted, embedding_requests, fake_embedding
from loaders.synthetic import SyntheticSource
from stark_pg import embed
from stark_pg.index.dense import build_dense, find_model
from stark_pg.llm import LLMCacheMiss, LLMCallFailed, embeddings
from stark_pg.retrieve import vss
from stark_pg.retrieve.results import search_described
from stark_pg.skb.store import load_skb

ENV = ("STARK_PG_LLM", "STARK_PG_LLM_BASE_URL", "STARK_PG_EMBED_BASE_URL", "STARK_PG_LLM_ENDPOINT",
       "STARK_PG_LLM_CACHE", "STARK_PG_LLM_TIMEOUT", "STARK_PG_LLM_RETRIES", "OPENAI_API_KEY", "OPENAI_BASE_URL")
MODEL = "openai:fake-embed"
SKB = "synth-api"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    embed._query_vector.cache_clear()        # the in-process cache of query vectors: each test starts cold
    yield
    embed._query_vector.cache_clear()


@pytest.fixture
def server(monkeypatch):
    fake = FakeLLMServer().start()
    monkeypatch.setenv("STARK_PG_EMBED_BASE_URL", fake.openai_url)
    yield fake
    fake.stop()


def load(conn, nodes=100):
    load_skb(conn, SyntheticSource(nodes=nodes, seed=5, edges_per_node=3), SKB)
    return conn.execute("select count(*) from stark.node where skb_id = stark.skb_id(%s)", (SKB,)).fetchone()[0]


def documents(conn) -> dict[int, str]:
    rows = conn.execute("select node_id, stark.render_document(skb_id, node_id, true, 25) from stark.node "
                        "where skb_id = stark.skb_id(%s)", (SKB,))
    return dict(rows.fetchall())


def stored_vectors(conn, model=MODEL) -> dict[int, np.ndarray]:
    table = find_model(conn, model).doc_table
    return {n: v.to_numpy() for n, v in
            conn.execute(f"select node_id, vec from stark.{table} where skb_id = stark.skb_id(%s)", (SKB,))}


# --- batching, the stored vectors, the cache -----------------------------------------------------

def test_an_index_built_once_is_never_paid_for_twice(conn, server):
    n = load(conn)
    first = build_dense(conn, SKB, model=MODEL, multi_vector=False, encode_batch=16)
    sent = embedding_requests(server)
    # one probe for the dimension (an unknown model behind a base URL), then the documents 16 at a time
    assert [len(r["body"]["input"]) for r in sent] == [1] + [16] * (n // 16) + ([n % 16] if n % 16 else [])
    assert sent[0]["body"]["input"] == [embeddings.PROBE] and all(r["body"]["model"] == "fake-embed" for r in sent)
    assert "authorization" in sent[0]["headers"]          # a keyless server is sent a placeholder key
    assert find_model(conn, MODEL).dim == server.embedding_dim
    vectors, texts = stored_vectors(conn), documents(conn)
    assert len(vectors) == n
    for node_id, text in texts.items():                    # each stored vector is the server's for that text
        np.testing.assert_allclose(vectors[node_id], fake_embedding(text, server.embedding_dim), atol=1e-6)
    assert first["documents"]["embedded"] == n
    assert first["embedding_api"]["calls"] == len(sent) and first["embedding_api"]["cache_hits"] == 0
    assert first["embedding_api"]["prompt_tokens"] == server.embedding_tokens_per_text * (n + 1)
    assert first["encoding"] == {"api": server.openai_url, "batch": 16}

    again = build_dense(conn, SKB, model=MODEL, multi_vector=False)        # nothing changed: nothing embedded
    assert again["documents"]["embedded"] == 0 and again["embedding_api"]["calls"] == 0
    # the vectors gone (an SKB dropped and loaded again): re-embedded entirely from stark.llm_cache
    conn.execute(f"delete from stark.{find_model(conn, MODEL).doc_table}")
    rebuilt = build_dense(conn, SKB, model=MODEL, multi_vector=False, encode_batch=7)   # other batches: same keys
    assert len(embedding_requests(server)) == len(sent)
    assert rebuilt["documents"]["embedded"] == n and rebuilt["embedding_api"]["calls"] == 0
    assert rebuilt["embedding_api"]["cache_hits"] == n
    assert rebuilt["embedding_api"]["prompt_tokens"] == server.embedding_tokens_per_text * n   # the same work
    for node_id, vector in stored_vectors(conn).items():
        np.testing.assert_array_equal(vector, vectors[node_id])


def test_vss_with_an_api_model_ranks_by_cosine_and_a_second_search_makes_no_request(conn, server):
    load(conn)
    build_dense(conn, SKB, model=MODEL, multi_vector=False)
    before = len(embedding_requests(server))
    query = "which drug targets the gene"
    module = vss
    hits, ranking = search_described(conn, SKB, query, module, vss.Options(model=MODEL, exact=True), k=5)
    assert len(embedding_requests(server)) == before + 1
    assert embedding_requests(server)[-1]["body"]["input"] == [query]
    assert ranking.trace["llm"]["calls"] == 1 and ranking.trace["query_vector"] == "embedded"
    # numpy reference: cosine of the query's vector with every stored vector
    vectors = stored_vectors(conn)
    q = fake_embedding(query, server.embedding_dim).astype(np.float64)
    reference = sorted(vectors, key=lambda n: -float(vectors[n].astype(np.float64) @ q
                                                      / np.linalg.norm(vectors[n].astype(np.float64))))
    assert [h.node_id for h in hits] == reference[:5]

    embed._query_vector.cache_clear()          # a new process: only the database remembers
    _, again = search_described(conn, SKB, query, module, vss.Options(model=MODEL, exact=True), k=5)
    assert len(embedding_requests(server)) == before + 1
    assert again.trace["llm"]["calls"] == 0 and again.trace["llm"]["cache_hits"] == 1
    assert again.node_ids == ranking.node_ids


# --- retries, failures, cache modes --------------------------------------------------------------

def test_a_429_and_a_500_are_retried(conn, server, monkeypatch):
    server.script = [Scripted(status=429, headers={"retry-after": "0"}), Scripted(status=500)]
    with embeddings.cache_in(conn), embeddings.metered(MODEL) as meter:
        vectors = embed.encode(["alpha", "beta"], MODEL)
    assert len(embedding_requests(server)) == 3           # two refused, the third answered
    np.testing.assert_allclose(vectors[1], fake_embedding("beta"), atol=1e-6)
    assert meter.calls == 1 and meter.prompt_tokens == 2 * server.embedding_tokens_per_text


def test_an_error_left_after_the_retries_fails_clearly_and_caches_nothing(conn, server, monkeypatch):
    monkeypatch.setenv("STARK_PG_LLM_RETRIES", "1")
    server.script = [Scripted(status=500), Scripted(status=500)]
    with embeddings.cache_in(conn), pytest.raises(LLMCallFailed, match=r"openai:fake-embed at .*HTTP 500"):
        embed.encode(["alpha"], MODEL)
    assert conn.execute("select count(*) from stark.llm_cache").fetchone()[0] == 0
    with embeddings.cache_in(conn):                        # the next try succeeds and is cached
        embed.encode(["alpha"], MODEL)
    assert conn.execute("select count(*) from stark.llm_cache").fetchone()[0] == 1


def test_cache_only_never_calls_and_refresh_always_does(conn, server, monkeypatch):
    with embeddings.cache_in(conn):
        embed.encode(["alpha"], MODEL)
        monkeypatch.setenv("STARK_PG_LLM_CACHE", "only")
        embed.encode(["alpha"], MODEL)                     # cached: fine
        with pytest.raises(LLMCacheMiss, match="1 text"):
            embed.encode(["alpha", "gamma"], MODEL)
        assert len(embedding_requests(server)) == 1
        monkeypatch.setenv("STARK_PG_LLM_CACHE", "refresh")
        embed.encode(["alpha"], MODEL)
    assert len(embedding_requests(server)) == 2


def test_duplicate_texts_are_requested_once_and_vectors_are_unit_length(conn, server):
    server.embedding_dim = 5
    with embeddings.cache_in(conn):
        vectors = embed.encode(["same", "other", "same"], MODEL, batch_size=10)
    assert embedding_requests(server)[0]["body"]["input"] == ["same", "other"]
    np.testing.assert_array_equal(vectors[0], vectors[2])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_meters_count_tokens_and_cost_of_a_priced_model(conn, server):
    model = "openai:text-embedding-3-small"
    with embeddings.cache_in(conn), embeddings.metered(model) as meter:
        embed.encode(["a short text", "a somewhat longer text to embed"], model)
    # behind a base URL the dimension is the server's, not OpenAI's table: a probe would be a request;
    # encode itself needs none, so one request here
    assert meter.calls == 1 and meter.cache_hits == 0
    assert meter.prompt_tokens == 2 * server.embedding_tokens_per_text
    assert math.isclose(meter.cost_usd, meter.prompt_tokens * 0.02 / 1_000_000)
    rows = conn.execute("select prompt_tokens, cost_usd from stark.llm_cache order by prompt_tokens").fetchall()
    assert sum(r[0] for r in rows) == meter.prompt_tokens               # each text its share, summing up
    with embeddings.cache_in(conn), embeddings.metered(model) as replay:
        embed.encode(["a short text", "a somewhat longer text to embed"], model)
    assert (replay.calls, replay.cache_hits, replay.prompt_tokens, replay.cost_usd) == (0, 2, meter.prompt_tokens, 0.0)


def test_openais_own_models_have_a_known_dimension_and_a_missing_key_is_named(conn, monkeypatch):
    assert embed.dimension("openai:text-embedding-3-large") == 3072     # no server, no key: the table
    with embeddings.cache_in(conn), pytest.raises(Exception, match="OPENAI_API_KEY is not set"):
        embed.encode(["x"], "openai:text-embedding-3-small")


# --- the CLI --------------------------------------------------------------------------------------

def test_cli_index_and_search_with_an_openai_model(conn, cli, server):
    load(conn)
    first = json.loads(cli("index", SKB, "--model", MODEL, "--no-lexical", "--no-multi-vector", "--json").stdout)
    assert first["dense"]["embedding_api"]["calls"] == len(embedding_requests(server)) > 0
    second = json.loads(cli("index", SKB, "--model", MODEL, "--no-lexical", "--no-multi-vector", "--json").stdout)
    assert second["dense"]["embedding_api"]["calls"] == 0
    calls = len(embedding_requests(server))
    found = json.loads(cli("search", SKB, "a drug for pain", "-m", "vss", "-o", f"model={MODEL}", "--json").stdout)
    assert len(found["results"]) == 10 and found["trace"]["model"] == MODEL
    assert len(embedding_requests(server)) == calls + 1
    cli("search", SKB, "a drug for pain", "-m", "vss", "-o", f"model={MODEL}", "--json")   # a new process
    assert len(embedding_requests(server)) == calls + 1
    text = cli("index", SKB, "--model", MODEL, "--no-lexical", "--no-multi-vector").stdout
    assert "embedding API: 0 requests" in text


def test_cli_index_with_an_openai_model_prints_its_summary(conn, cli, server):
    """The summary of a build that embedded through an API names the server, not a device (it used to
    end in a KeyError on 'device' once the vectors were built)."""
    n = load(conn)
    result = cli("index", SKB, "--model", MODEL, "--no-lexical", "--no-graph", "--multi-vector")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())             # rich wraps long lines at the terminal's width
    assert f"dense ({MODEL}, {server.openai_url}): documents {n:,} embedded" in text, text
    assert "chunks " in text and "Traceback" not in result.stderr
    assert f"embedding API: {len(embedding_requests(server))} requests" in text
