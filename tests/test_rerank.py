"""The LLM reranker and method `vss+rerank`, with the real SDK against a local fake LLM server.

Ordering is checked on the real slice (documents and VSS from the session's indexed database, the
LLM cache in a fresh one so the shared database stays read-only); the evaluation run (a failing
query recorded while the run goes on, LLM totals in the summary, a replay with no calls) on a small
bundle of its own.
"""

from __future__ import annotations

import csv
import json
import re

import psycopg
import pytest

from fake_llm_server import FakeLLMServer, Scripted, user_text
from loaders.bundle import BundleSource
from stark_pg.db import connect
from stark_pg.eval import query_sets
from stark_pg.eval.runner import run_method
from stark_pg.index.dense import build_dense
from stark_pg.llm import LLMCallFailed, LLMClient, LLMSettings
from stark_pg.llm.cache import LLMCache
from stark_pg.retrieve import get_method, vss, vss_rerank
from stark_pg.retrieve import rerank as rerank_module
from stark_pg.retrieve.rerank import Relevance, batch_model, rerank
from stark_pg.skb.store import load_skb

ENV = ("STARK_PG_LLM", "STARK_PG_LLM_BASE_URL", "STARK_PG_LLM_CACHE", "STARK_PG_LLM_TIMEOUT", "STARK_PG_LLM_RETRIES",
       "OPENAI_API_KEY", "OPENAI_BASE_URL")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STARK_PG_LLM_RETRIES", "0")


@pytest.fixture
def server():
    fake = FakeLLMServer().start()
    yield fake
    fake.stop()


def query_of(prompt: str) -> str:
    return re.search(r"^Query: (.*)$", prompt, re.M).group(1)


def names_in(prompt: str) -> list[str]:
    return re.findall(r"^name: (.*)$", prompt, re.M)


def made_up_score(name: str) -> float:
    """A deterministic 'relevance' the fake LLM gives a document, with many ties."""
    return (sum(map(ord, name)) % 5) / 4


# --- parsing ------------------------------------------------------------------------------------

@pytest.mark.parametrize("data, score", [({"score": 0.25}, 0.25), (0.5, 0.5), ("0.75", 0.75), (1, 1.0)])
def test_relevance_accepts_objects_and_bare_numbers(data, score):
    assert Relevance.model_validate(data).score == score


@pytest.mark.parametrize("data", [{"score": 1.5}, {"score": -0.1}, {"relevance": 0.4}, "high", True])
def test_relevance_rejects_what_is_not_a_score_in_0_1(data):
    with pytest.raises(ValueError):
        Relevance.model_validate(data)


def test_batch_model_wants_exactly_n_scores():
    model = batch_model(3)
    assert model.model_validate({"scores": [0, 0.5, 1]}).scores == [0, 0.5, 1]
    for bad in ({"scores": [0.1, 0.2]}, {"scores": [0.1, 0.2, 0.3, 0.4]}, {"scores": [0.1, 2, 0.3]}):
        with pytest.raises(ValueError):
            model.model_validate(bad)


# --- reranking on the real slice ----------------------------------------------------------------

@pytest.fixture
def slice_conn(ibd_indexed_url):
    with connect(ibd_indexed_url) as c:
        yield c


@pytest.fixture
def slice_query(slice_conn):
    return slice_conn.execute("select body from stark.query where skb_id = stark.skb_id('stark-prime-ibd') "
                              "and split = 'val' order by query_id limit 1").fetchone()[0]


def fake_client(conn, server, model="qwen-test") -> LLMClient:
    """A client whose cache lives in `conn`'s (fresh) database, not in the shared slice database."""
    return LLMClient(LLMSettings("openai", model, base_url=server.openai_url, max_retries=0), LLMCache(conn))


def test_rerank_orders_by_the_llm_score_with_ties_in_vss_order(conn, slice_conn, slice_query, server):
    formats = ['{{"score": {s}}}', "```json\n{{\"score\": {s}}}\n```", "{s}", 'My rating: {{"score": {s}}}']
    replies = []

    def responder(kind, body):
        prompt = user_text(kind, body)
        (name,) = names_in(prompt)
        reply = formats[len(replies) % len(formats)].format(s=made_up_score(name))
        replies.append(reply)
        return reply

    server.responder = responder
    candidates = vss.search(slice_conn, "stark-prime-ibd", slice_query, 12).node_ids
    names = dict(slice_conn.execute("select node_id, name from stark.node where skb_id = stark.skb_id(%s) "
                                    "and node_id = any(%s)", ("stark-prime-ibd", candidates)).fetchall())
    trace = {}
    hits = rerank(slice_conn, "stark-prime-ibd", slice_query, candidates, fake_client(conn, server), sim_weight=0.0,
                  trace=trace)
    expected = sorted(candidates, key=lambda n: (-made_up_score(names[n]), candidates.index(n)))
    assert [h.node_id for h in hits] == expected
    assert [h.score for h in hits] == [made_up_score(names[n]) for n in expected]
    assert len({h.score for h in hits}) < len(hits)                           # ties happened and kept VSS order
    assert len(server.requests) == 12 and len(replies) == 12
    assert trace["rerank"]["scores"] == [[n, made_up_score(names[n])] for n in candidates]
    assert trace["rerank"]["invalid"] == [] and trace["rerank"]["prompt"] == "per-candidate"
    # STaRK's combination (the default): the LLM's score plus 0.1 x the candidate's standing in VSS order
    n = len(candidates)
    combined = {c: made_up_score(names[c]) + 0.1 * (n - i) / n for i, c in enumerate(candidates)}
    blended = rerank(slice_conn, "stark-prime-ibd", slice_query, candidates, fake_client(conn, server))
    assert len(server.requests) == 12                                         # replayed from the cache
    assert [h.node_id for h in blended] == sorted(candidates, key=lambda c: (-combined[c], candidates.index(c)))
    assert [h.score for h in blended] == pytest.approx(sorted(combined.values(), reverse=True))
    # each prompt carries the query and one document, cut to doc_chars
    prompt = user_text("openai", server.requests[0]["body"])
    assert query_of(prompt) == slice_query


def test_batch_mode_scores_every_candidate_in_one_request(conn, slice_conn, slice_query, server):
    def responder(kind, body):
        names = names_in(user_text(kind, body))
        return json.dumps({"scores": [made_up_score(n) for n in names]})

    server.responder = responder
    candidates = vss.search(slice_conn, "stark-prime-ibd", slice_query, 10).node_ids
    names = dict(slice_conn.execute("select node_id, name from stark.node where skb_id = stark.skb_id(%s) "
                                    "and node_id = any(%s)", ("stark-prime-ibd", candidates)).fetchall())
    hits = rerank(slice_conn, "stark-prime-ibd", slice_query, candidates, fake_client(conn, server), batch=True,
                  doc_chars=300)
    assert len(server.requests) == 1
    assert [h.node_id for h in hits] == sorted(candidates, key=lambda n: (-made_up_score(names[n]),
                                                                          candidates.index(n)))
    prompt = user_text("openai", server.requests[0]["body"])
    assert all(f"[{i}]" in prompt for i in range(1, 11))


def test_documents_are_cut_to_doc_chars(conn, slice_conn, slice_query, server):
    server.responder = lambda kind, body: '{"score": 0.5}'
    candidates = vss.search(slice_conn, "stark-prime-ibd", slice_query, 5).node_ids
    rerank(slice_conn, "stark-prime-ibd", slice_query, candidates, fake_client(conn, server), doc_chars=120)
    for request in server.requests:
        document = user_text("openai", request["body"]).split("Document:\n", 1)[1].split("\n\nHow well", 1)[0]
        assert len(document) <= 120 + len(" ...")
        assert document.startswith("name: ")
    full = slice_conn.execute("select max(length(stark.document('stark-prime-ibd', n))) from unnest(%s::bigint[]) n",
                              (candidates,)).fetchone()[0]
    assert full > 120                                  # so the cut was exercised


def test_an_unusable_reply_scores_zero_and_is_listed(conn, slice_conn, slice_query, server):
    candidates = vss.search(slice_conn, "stark-prime-ibd", slice_query, 4).node_ids
    target = candidates[0]
    target_name = slice_conn.execute("select name from stark.node where skb_id = stark.skb_id('stark-prime-ibd') "
                                     "and node_id = %s", (target,)).fetchone()[0]

    def responder(kind, body):
        names = names_in(body["messages"][1]["content"])    # the rating prompt (a repair request follows it)
        if names[0] == target_name:
            return "very relevant!"                         # twice: the first reply and the repair
        return '{"score": 0.5}'

    server.responder = responder
    trace = {}
    hits = rerank(slice_conn, "stark-prime-ibd", slice_query, candidates, fake_client(conn, server), trace=trace)
    assert trace["rerank"]["invalid"] == [target]
    assert hits[-1].node_id == target and dict(trace["rerank"]["scores"])[target] == 0.0
    assert hits[-1].score == pytest.approx(0.1)          # 0 from the LLM + 0.1 x its standing (first of 4)
    assert len(server.requests) == len(candidates) + 1   # one repair request


def test_a_failing_call_raises(conn, slice_conn, slice_query, server):
    server.responder = lambda kind, body: Scripted(status=500)
    candidates = vss.search(slice_conn, "stark-prime-ibd", slice_query, 3).node_ids
    with pytest.raises(LLMCallFailed, match="HTTP 500"):
        rerank(slice_conn, "stark-prime-ibd", slice_query, candidates, fake_client(conn, server))


def test_vss_rerank_reranks_the_head_and_keeps_the_tail(conn, slice_conn, slice_query, server, monkeypatch):
    server.responder = lambda kind, body: json.dumps({"score": made_up_score(names_in(user_text(kind, body))[0])})
    # the client the method builds from its options, but caching in the fresh database
    monkeypatch.setattr(rerank_module, "client_from_options", lambda c, **kw: fake_client(conn, server))
    plain = vss.search(slice_conn, "stark-prime-ibd", slice_query, 30)
    ranking = vss_rerank.search(slice_conn, "stark-prime-ibd", slice_query, 30,
                                vss_rerank.Options(k_max=8, llm="openai:qwen-test", base_url=server.openai_url))
    assert sorted(ranking.node_ids[:8]) == sorted(plain.node_ids[:8])
    assert ranking.node_ids[8:] == plain.node_ids[8:]
    assert ranking.hits[8:] == plain.hits[8:]
    scores = [h.score for h in ranking.hits]
    assert scores == sorted(scores, reverse=True) and all(1 <= s <= 2.1 for s in scores[:8])
    trace = ranking.trace
    assert trace["method"] == "vss+rerank" and trace["k_max"] == 8 and len(trace["rerank"]["scores"]) == 8
    assert trace["llm"]["calls"] == 8 and trace["llm"]["cache_hits"] == 0 and trace["llm"]["model"] == "qwen-test"
    assert trace["vss"]["method"] == "vss"
    json.dumps(trace)


# --- an evaluation through vss+rerank -----------------------------------------------------------

NODES = [
    {"id": 1, "type": "drug", "name": "Aspirin", "fields": {"description": "salicylate that relieves pain and fever"}},
    {"id": 2, "type": "drug", "name": "Ibuprofen", "fields": {"description": "anti-inflammatory drug for pain"}},
    {"id": 3, "type": "drug", "name": "Metformin", "fields": {"description": "lowers blood sugar in type 2 diabetes"}},
    {"id": 4, "type": "drug", "name": "Insulin", "fields": {"description": "hormone that lowers blood glucose"}},
    {"id": 5, "type": "disease", "name": "fever", "fields": {"description": "raised body temperature"}},
    {"id": 6, "type": "disease", "name": "type 2 diabetes", "fields": {"description": "high blood sugar disorder"}},
    {"id": 7, "type": "gene/protein", "name": "PTGS2", "fields": {"description": "cyclooxygenase 2, makes "
                                                                                 "prostaglandins"}},
    {"id": 8, "type": "gene/protein", "name": "INSR", "fields": {"description": "the insulin receptor"}},
    {"id": 9, "type": "disease", "name": "migraine", "fields": {"description": "recurrent headaches with pain"}},
    {"id": 10, "type": "drug", "name": "Sumatriptan", "fields": {"description": "treats migraine attacks"}},
]
EDGES = "src\trelation\tdst\n1\ttarget\t7\n2\ttarget\t7\n4\ttarget\t8\n10\tindication\t9\n"
QUERIES = ("id,query,answer_ids,split\n"
           "1,Which drug blocks cyclooxygenase and treats fever?,[1],val\n"
           "2,What hormone binds the insulin receptor?,[4],val\n"
           "3,FAIL which drug treats migraine attacks?,[10],val\n"
           "4,Which medicine lowers blood sugar in type 2 diabetes?,[3],val\n")
GOLD = {"Which drug blocks cyclooxygenase and treats fever?": "Aspirin",
        "What hormone binds the insulin receptor?": "Insulin",
        "Which medicine lowers blood sugar in type 2 diabetes?": "Metformin"}


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


def gold_responder(kind, body):
    prompt = user_text(kind, body)
    query = query_of(prompt)
    if query.startswith("FAIL"):
        return Scripted(status=500)
    return json.dumps({"score": 1.0 if GOLD.get(query) == names_in(prompt)[0] else 0.1})


def test_an_eval_run_records_a_failed_llm_step_and_goes_on_then_replays(conn, tiny_skb, server):
    server.responder = gold_responder
    chosen = query_sets.from_split(conn, tiny_skb, "val")
    options = vss_rerank.Options(k_max=10, llm="openai:qwen-test", base_url=server.openai_url)
    first = run_method(conn, tiny_skb, "tiny-pharma", "vss+rerank", options, chosen, resolve=get_method)
    assert first.summary["queries"] == 4 and first.summary["failed"] == 1
    rows = conn.execute("select query_id, error, metrics->>'hit@1', trace from stark.eval_result where run_id = %s "
                        "order by query_id", (first.run_id,)).fetchall()
    errors = {q: e for q, e, _, _ in rows}
    assert errors[3].startswith("LLMCallFailed: openai:qwen-test") and "HTTP 500" in errors[3]
    assert [errors[q] for q in (1, 2, 4)] == [None, None, None]
    # the fake LLM knows the answers, and every answer is among the 10 candidates: hit@1 on each good query
    assert [float(h) for q, _, h, _ in rows if q != 3] == [1.0, 1.0, 1.0]
    assert first.summary["metrics"]["hit@1"] == pytest.approx(0.75)
    llm = first.summary["llm"]
    assert llm["calls"] == 30 and llm["cache_hits"] == 0 and llm["queries_with_llm"] == 3
    assert llm["prompt_tokens"] == 30 * 11 and llm["completion_tokens"] == 30 * 7
    assert llm["seconds"] > 0 and llm["seconds_per_query"] == pytest.approx(llm["seconds"] / 4, abs=1e-3)
    assert llm["cost_usd"] is None
    requests_after_first = len(server.requests)
    assert requests_after_first == 31                   # 30 scored + the failed one
    second = run_method(conn, tiny_skb, "tiny-pharma", "vss+rerank", options, chosen, resolve=get_method)
    assert second.run_id != first.run_id
    assert second.summary["llm"]["calls"] == 0 and second.summary["llm"]["cache_hits"] == 30
    assert second.summary["metrics"] == first.summary["metrics"]
    assert len(server.requests) == requests_after_first + 1     # only the failing query asked again


def test_eval_cli_shows_the_llm_totals(cli, conn, tiny_skb, server, monkeypatch):
    server.responder = gold_responder
    monkeypatch.setenv("STARK_PG_LLM_BASE_URL", server.openai_url)
    done = cli("eval", "tiny-pharma", "-m", "vss,vss+rerank", "--split", "val", "-o", "llm=openai:qwen-test",
               "-o", "k_max=5", "--json")
    methods = json.loads(done.stdout)["methods"]
    assert "llm" not in methods["vss"]
    rerank_run = methods["vss+rerank"]
    assert rerank_run["options"]["llm"] == "openai:qwen-test" and rerank_run["options"]["k_max"] == 5
    assert rerank_run["failed"] == 1 and rerank_run["llm"]["calls"] == 15
    table = cli("eval", "tiny-pharma", "-m", "vss+rerank", "--split", "val", "-o", "llm=openai:qwen-test",
                "-o", "k_max=5", "-o", "cache=only").stdout
    assert "LLM s/q" in table
    replay = conn.execute("select summary from stark.eval_run where method = 'vss+rerank' order by run_id desc "
                          "limit 1").fetchone()[0]
    assert replay["llm"]["calls"] == 0 and replay["llm"]["cache_hits"] == 15 and replay["failed"] == 1
    failed = conn.execute("select error from stark.eval_result where run_id = (select max(run_id) from "
                          "stark.eval_run) and error is not null").fetchone()[0]
    assert failed.startswith("LLMCacheMiss")           # cache=only: the failing query is not called again


def test_vss_rerank_without_an_llm_fails_each_query_clearly(conn, tiny_skb):
    chosen = query_sets.from_split(conn, tiny_skb, "val")
    outcome = run_method(conn, tiny_skb, "tiny-pharma", "vss+rerank", vss_rerank.Options(), chosen, resolve=get_method)
    assert outcome.summary["failed"] == 4
    error = conn.execute("select error from stark.eval_result where run_id = %s limit 1",
                         (outcome.run_id,)).fetchone()[0]
    assert "-o llm=" in error and "STARK_PG_LLM" in error


def test_the_method_is_registered():
    assert get_method("vss+rerank") is vss_rerank
