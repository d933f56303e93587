"""4StepFocus end to end, the LLM being a local HTTP server that speaks OpenAI's protocol
(tests/fake_llm_server.py) and the real openai SDK talking to it.

On a synthetic Prime-shaped SKB the fake LLM answers like a perfect one: it recognises the query
template and writes its triplets. Substitution then finds exactly the template's answers, so they
must fill the top of every ranking; a replay from the cache must make no request and give the same
rankings; garbage from the LLM fails the query and the evaluation goes on; the reranker reorders the
top k_max by the LLM's scores; `stark-pg search --explain` shows each step.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import psycopg
import pytest

from fake_llm_server import FakeLLMServer, user_text
from loaders.synthetic import TEMPLATES, SyntheticSource
from stark_pg.eval import query_sets
from stark_pg.eval.runner import run_method
from stark_pg.resources import queries as sql
from stark_pg.retrieve import focus, get_method
from stark_pg.retrieve import vss as vss_method
from stark_pg.retrieve.rerank import SYSTEM as RERANK_SYSTEM

SKB = "synthetic-focus-e2e"


def _template_pattern(wording: str) -> re.Pattern:
    text = re.escape(wording)
    for field, group in (("anchor0", "a0"), ("anchor1", "a1"), ("value", "v"), ("trait", "t")):
        text = text.replace(re.escape("{" + field + "}"), f"(?P<{group}>.+?)")
    return re.compile("^" + text + "$")


PATTERNS = [(t, _template_pattern(t.wording)) for t in TEMPLATES]


def oracle_triplets(question: str) -> dict:
    """The triplets a perfect LLM would write for a synthetic template question."""
    for template, pattern in PATTERNS:
        m = pattern.match(question)
        if not m:
            continue
        triplets, n_vars = [], 1
        for i, path in enumerate(template.paths):
            current, current_type = "?x1", template.answer
            for j, (relation, node_type) in enumerate(path):
                last = j == len(path) - 1
                if last:
                    other = m.group(f"a{i}")
                else:
                    n_vars += 1
                    other = f"?x{n_vars}"
                triplets.append({"head": current, "head_type": current_type, "relation": relation,
                                 "tail": other, "tail_type": node_type})
                current, current_type = other, node_type
        return {"target": "?x1", "triplets": triplets}
    raise AssertionError(f"no template matches {question!r}")


def question_of(body: dict) -> str:
    return re.search(r"Question: (.*)\nJSON:$", user_text("openai", body)).group(1)


@pytest.fixture(scope="module")
def llm():
    server = FakeLLMServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def synthetic_url(server_url, template_db):
    """A database with a small synthetic SKB, BM25 and document embeddings."""
    import uuid

    from psycopg.conninfo import make_conninfo
    from pytest_postgresql.janitor import DatabaseJanitor

    from conftest import _server_params
    from stark_pg.db import connect
    from stark_pg.index.dense import build_dense
    from stark_pg.index.lexical import build_lexical
    from stark_pg.skb.store import load_skb

    name = f"stark_focus_{uuid.uuid4().hex[:8]}"
    janitor = DatabaseJanitor(dbname=name, template_dbname=template_db, **_server_params(server_url))
    janitor.init()
    url = make_conninfo(server_url, dbname=name)
    with connect(url) as conn:
        load_skb(conn, SyntheticSource(nodes=800, seed=3, edges_per_node=10), SKB)
        build_lexical(conn, SKB)
        build_dense(conn, SKB, multi_vector=False)
    yield url
    janitor.drop()


@pytest.fixture
def conn(synthetic_url):
    from stark_pg.db import connect

    with connect(synthetic_url) as connection:
        yield connection


def options(llm, **kw) -> focus.Options:
    return focus.Options(**({"llm": "openai:fake-oracle", "base_url": llm.openai_url, "respect_relations": True} | kw))


def test_perfect_triplets_put_the_answers_first_and_replay_from_the_cache(conn, llm):
    llm.responder = lambda kind, body: json.dumps(oracle_triplets(question_of(body)))
    skb_id = sql().find_skb_id(conn, name=SKB)
    val = query_sets.from_split(conn, skb_id, "val")
    assert len(val.queries) >= 10
    before = len(llm.requests)
    first = run_method(conn, skb_id, SKB, "4stepfocus", options(llm), val, depth=100, resolve=get_method)
    assert len(llm.requests) - before == len(val.queries)          # one triplet request per query
    plain = {t.key for t in TEMPLATES if t.attribute is None and not t.trait}     # nothing but relations
    rows = conn.execute("select q.query_id, q.body, r.ranked_ids, r.answer_ids, r.trace, r.error "
                        "from stark.eval_result r join stark.query q on q.skb_id = r.skb_id and q.query_id = r.query_id "
                        "where r.run_id = %s", (first.run_id,)).fetchall()
    checked = 0
    for query_id, body, ranked, answers, trace, error in rows:
        assert error is None
        assert trace["linked"] is True and trace["sql"].startswith("select") and trace["llm"]["calls"] == 1
        # answers are always among the filtered candidates, which come first
        assert set(answers) <= set(ranked[:trace["candidate_count"]])
        template = next(t for t, p in PATTERNS if p.match(body))
        if template.key in plain:                               # the candidates are exactly the answers
            assert trace["candidate_count"] == len(answers)
            assert set(ranked[:len(answers)]) == set(answers)
            checked += 1
    assert checked >= 5
    vss = run_method(conn, skb_id, SKB, "vss", vss_method.Options(), val, depth=100, resolve=get_method)
    assert first.summary["metrics"]["mrr"] > vss.summary["metrics"]["mrr"]

    # replay: cache=only, no request reaches the server, same rankings
    before = len(llm.requests)
    again = run_method(conn, skb_id, SKB, "4stepfocus", options(llm, cache="only"), val, depth=100, resolve=get_method)
    assert len(llm.requests) == before
    assert again.run_id != first.run_id
    replayed = dict(conn.execute("select query_id, ranked_ids from stark.eval_result where run_id = %s",
                                 (again.run_id,)).fetchall())
    assert replayed == {r[0]: r[2] for r in rows}
    summary = sql().focus_run_summary(conn, run_id=again.run_id)
    summary = dict(zip(("queries", "linked_share", "median_candidates", "median_llm_seconds", "mean_llm_seconds",
                        "llm_network_calls", "llm_cache_hits", "failed"), next(iter(summary))))
    assert summary["queries"] == len(val.queries) and summary["linked_share"] == 1
    assert summary["llm_network_calls"] == 0 and summary["llm_cache_hits"] == len(val.queries)
    assert summary["mean_llm_seconds"] == 0 and summary["failed"] == 0


def test_relations_respected_or_ignored(conn, llm):
    """Ignoring relations can only widen the candidate sets (the paper's setting)."""
    llm.responder = lambda kind, body: json.dumps(oracle_triplets(question_of(body)))
    body = "Which cellular components interact with the genes or proteins targeted by "
    drug = conn.execute("select q.body from stark.query q where q.skb_id = stark.skb_id(%s) and q.body like %s "
                        "limit 1", (SKB, body + "%")).fetchone()
    assert drug, "the synthetic SKB has a component-of-drug-targets query"
    strict = focus.search(conn, SKB, drug[0], 50, options(llm))
    loose = focus.search(conn, SKB, drug[0], 50, options(llm, respect_relations=False))
    assert strict.trace["candidate_count"] <= loose.trace["candidate_count"]
    assert "relations respected" in strict.trace["explain"]["3. substitute"][-1]
    assert "relations ignored" in loose.trace["explain"]["3. substitute"][-1]


def test_garbage_from_the_llm_fails_the_query_and_the_run_goes_on(conn, llm):
    answers = iter(["I think the answer is aspirin.", "Still not JSON.", None])

    def responder(kind, body):
        text = next(answers, None)
        return text if text is not None else json.dumps(oracle_triplets(question_of(body)))

    llm.responder = responder
    skb_id = sql().find_skb_id(conn, name=SKB)
    val = query_sets.from_split(conn, skb_id, "val")
    outcome = run_method(conn, skb_id, SKB, "4stepfocus", options(llm, cache="refresh"), val, depth=20, resolve=get_method)
    assert outcome.summary["failed"] == 1
    error = conn.execute("select error from stark.eval_result where run_id = %s and error is not null",
                         (outcome.run_id,)).fetchone()[0]
    assert "LLMInvalidOutput" in error and "TripletReply" in error


def test_rerank_orders_the_top_by_the_llms_scores(conn, llm):
    question = conn.execute("select body from stark.query where skb_id = stark.skb_id(%s) and body like "
                            "'Which genes or proteins noted for %% interact with the pathway %%' limit 1", (SKB,)).fetchone()[0]
    favourite = {}

    def responder(kind, body):
        if body["messages"][0]["content"] == RERANK_SYSTEM:
            document = user_text(kind, body)
            score = 0.9 if favourite["name"] in document else 0.1
            return json.dumps({"score": score})
        return json.dumps(oracle_triplets(question_of(body)))

    llm.responder = responder
    plain = focus.search(conn, SKB, question, 30, options(llm, k_max=8, cache="refresh"))
    # the LLM prefers the 6th node of the plain ranking
    sixth = plain.hits[5].node_id
    favourite["name"] = conn.execute("select name from stark.node where skb_id = stark.skb_id(%s) and node_id = %s",
                                     (SKB, sixth)).fetchone()[0]
    before = len(llm.requests)
    reranked = focus.search(conn, SKB, question, 30, options(llm, k_max=8, rerank=True, cache="refresh"))
    assert len(llm.requests) - before == 1 + 8                 # triplets, then one score per candidate
    assert reranked.hits[0].node_id == sixth
    assert {h.node_id for h in reranked.hits[:8]} == {h.node_id for h in plain.hits[:8]}
    assert [h.node_id for h in reranked.hits[8:]] == [h.node_id for h in plain.hits[8:]]
    assert all(a.score >= b.score for a, b in zip(reranked.hits, reranked.hits[1:]))
    assert "5. rerank (LLM)" in reranked.trace["explain"]


def test_search_explain_on_the_command_line(synthetic_url, llm):
    llm.responder = lambda kind, body: json.dumps(oracle_triplets(question_of(body)))
    with psycopg.connect(synthetic_url) as c:
        gene = c.execute("select name from stark.node where skb_id = stark.skb_id(%s) and type = 'gene/protein' "
                         "order by node_id limit 1", (SKB,)).fetchone()[0]
    question = f"Which drugs target the gene or protein {gene} and are noted for renal excretion?"
    env = os.environ | {"STARK_PG_DSN": synthetic_url, "COLUMNS": "200"}
    args = [sys.executable, "-m", "stark_pg", "search", SKB, question, "-m", "4stepfocus", "-k", "5",
            "-o", "llm=openai:fake-oracle", "-o", f"base_url={llm.openai_url}", "-o", "respect_relations=true",
            "--explain"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    for needle in ("1. triplets", "?x1 (drug) -[target]->", "2. prepare", "[exact, 1.0]", "3. substitute",
                   "candidates", "stark.focus_substitute(", "4. rank"):
        assert needle in done.stdout, (needle, done.stdout)
    as_json = subprocess.run(args + ["--json"], capture_output=True, text=True, env=env, timeout=300)
    document = json.loads(as_json.stdout)
    assert document["explain"]["1. triplets"][0] == "target ?x1"
    assert document["trace"]["llm"]["cache_hits"] == 1 and document["trace"]["llm"]["calls"] == 0


def test_answer_type_paper_setting_ranks_the_llms_type_first_and_the_default_mixes_in_the_vote(conn, llm):
    """With no usable triplet the type is all the method knows. `type_weight=2 llm_type_share=1` is
    the paper: every node of the LLM's type ahead of every other. Mixed in, the training queries'
    vote outweighs a wrong LLM type once the LLM's share is under a half."""
    question = conn.execute("select body from stark.query where skb_id = stark.skb_id(%s) and split = 'val' and body "
                            "like 'Which genes or proteins noted for %% interact with the pathway %%' limit 1", (SKB,)).fetchone()[0]
    llm.responder = lambda kind, body: json.dumps({"target": "?x1", "target_type": "disease", "triplets": []})
    paper = focus.search(conn, SKB, question, 60, options(llm, type_weight=2.0, llm_type_share=1.0, cache="refresh"))
    types = dict(conn.execute("select node_id, type from stark.node where skb_id = stark.skb_id(%s)", (SKB,)).fetchall())
    n_disease = sum(1 for t in types.values() if t == "disease")
    ranked_types = [types[h.node_id] for h in paper.hits]
    assert ranked_types[:min(60, n_disease)] == ["disease"] * min(60, n_disease)
    assert paper.trace["target_type"]["votes"] == []                    # the LLM alone: no vote was asked
    mixed = focus.search(conn, SKB, question, 10, options(llm, llm_type_share=0.2, cache="refresh"))
    belief = mixed.trace["target_type"]
    assert belief["probabilities"]["disease"] == pytest.approx(0.2)
    assert belief["llm_type"] == "disease" and belief["votes"][0][0] == "gene/protein"
    assert belief["best"] == "gene/protein", belief
    assert mixed.trace["target"]["node_type"] == "gene/protein"
    assert "gene/protein" in [types[h.node_id] for h in mixed.hits[:5]]
    assert "answer type: gene/protein" in "\n".join(mixed.trace["explain"]["2. prepare (link constants)"])


def test_a_constant_the_question_does_not_name_is_dropped(conn, llm):
    """Small models copy entities from the prompt's examples: such a constant must not steer the search."""
    question = conn.execute("select body from stark.query where skb_id = stark.skb_id(%s) and body like "
                            "'Which genes or proteins noted for %% interact with the pathway %%' limit 1", (SKB,)).fetchone()[0]
    stranger = conn.execute("select name from stark.node where skb_id = stark.skb_id(%s) and type = 'drug' "
                            "order by node_id limit 1", (SKB,)).fetchone()[0]
    assert stranger.lower() not in question.lower()

    def responder(kind, body):
        reply = oracle_triplets(question_of(body))
        reply["triplets"].append({"head": "?x1", "head_type": "gene/protein", "relation": "target", "tail": stranger,
                                  "tail_type": "drug"})
        return json.dumps(reply)

    llm.responder = responder
    ranking = focus.search(conn, SKB, question, 10, options(llm, cache="refresh"))
    assert [d["reason"] for d in ranking.trace["dropped"]] == ["a constant the question does not name"]
    assert len(ranking.trace["problem"]["triplets"]) == 1
    trusting = focus.search(conn, SKB, question, 10, options(llm, grounding=0.0, cache="refresh"))
    assert len(trusting.trace["problem"]["triplets"]) == 2
