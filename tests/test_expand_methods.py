"""The query-expansion methods (prf, hyde, rar, agr, kar) end to end, the LLM being a local HTTP server
that speaks OpenAI's protocol (tests/fake_llm_server.py) and the real openai SDK talking to it.

On a synthetic Prime-shaped SKB the fake LLM answers like a good one: it names the entities of the
query template for KAR's entity parsing, and writes documents naming the true answers for HyDE, RAR
and AGR, so that expansions that are really used must beat plain VSS. KAR's own part, the graph,
is checked through its traces: the documents it sends the LLM reach the answers. A replay with
cache=only makes no request; garbage falls back to the plain retriever and says why.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from fake_llm_server import user_text
from stark_pg.eval import query_sets
from stark_pg.eval.runner import run_method
from stark_pg.resources import queries as sql
from stark_pg.retrieve import get_method
from stark_pg.retrieve import bm25 as bm25_method
from stark_pg.retrieve import vss as vss_method
from test_focus_method import PATTERNS, llm  # noqa: F401  (llm: the module-scoped fake LLM server fixture)

SKB = "synthetic-expand-e2e"
METHODS = ("prf", "hyde", "rar", "agr", "kar")
LLM_CALLS = {"prf": 0, "hyde": 1, "rar": 1, "agr": 4, "kar": 2}


@pytest.fixture(scope="module")
def synthetic_url(server_url, template_db):
    from conftest import indexed_synthetic

    with indexed_synthetic(server_url, template_db, "stark_expand", SKB, seed=5) as url:
        yield url


@pytest.fixture
def conn(synthetic_url):
    from stark_pg.db import connect

    with connect(synthetic_url) as connection:
        yield connection


@pytest.fixture(scope="module")
def answers(synthetic_url):
    """Question text -> the names of its answers (what a perfect document writer would know)."""
    from stark_pg.db import connect

    with connect(synthetic_url) as c:
        rows = c.execute("select q.body, array_agg(n.name order by n.node_id) from stark.query q "
                         "join stark.node n on n.skb_id = q.skb_id and n.node_id = any(q.answer_ids) "
                         "where q.skb_id = stark.skb_id(%s) group by q.body", (SKB,)).fetchall()
    return dict(rows)


def question(body: dict) -> str:
    return re.search(r"^Question: (.*)$", user_text("openai", body), re.M).group(1)


def oracle_entities(q: str) -> list[dict]:
    for template, pattern in PATTERNS:
        m = pattern.match(q)
        if m:
            return [{"name": m.group(g), "type": template.paths[i][-1][1]}
                    for i, g in enumerate(("a0", "a1")) if g in m.groupdict() and m.group(g)]
    return []


def good_llm(answers: dict):
    """A responder that knows what a good LLM would say to each of the expansion prompts."""

    def respond(kind, body):
        text = user_text(kind, body)
        if "List the entities the question names" in text:
            return json.dumps({"entities": oracle_entities(question(body))})
        if "with the relation.\n" in text:                   # KAR: three lines of what it was shown
            knowledge = text.split("with the relation.\n", 1)[1].split("\n\nUsing this knowledge", 1)[0]
            return json.dumps({"expansions": [line.split("]-> ")[-1] for line in knowledge.splitlines()[:3]]})
        if "List the keywords" in text:
            return json.dumps({"keywords": question(body).rstrip("?").split()[-3:]})
        if "Analyse the question" in text:
            return json.dumps({"analysis": "It asks for " + question(body)})
        names = ", ".join(answers.get(question(body), []))
        if "Write two candidate" in text:
            return json.dumps({"documents": [f"name: {names}", f"name: {names}"]})
        return json.dumps({"document": f"name: {names}"})      # hyde, rar, agr's refine step

    return respond


def options(method: str, llm, **kw):
    module = get_method(method)
    if method == "prf":                    # no LLM, so no LLM options
        return module.Options(**{key: value for key, value in kw.items() if key != "cache"})
    return module.Options(**({"llm": "openai:fake-expander", "base_url": llm.openai_url} | kw))


@pytest.mark.parametrize("method", METHODS)
def test_each_method_end_to_end(conn, llm, answers, method):
    llm.responder = good_llm(answers)
    q = conn.execute("select body from stark.query where skb_id = stark.skb_id(%s) and body like "
                     "'Which drugs target the gene or protein %%' order by query_id limit 1", (SKB,)).fetchone()[0]
    before = len(llm.requests)
    ranking = get_method(method).search(conn, SKB, q, 20, options(method, llm, cache="refresh"))
    assert len(llm.requests) - before == LLM_CALLS[method]
    trace = ranking.trace
    assert len(ranking.hits) == 20 and "fallback" not in trace
    assert trace["expansions"] and trace["final"]["retriever"] == "vss"
    assert trace["explain"]["retrieve"][0].startswith("vss over the query and")
    if method in ("prf", "rar", "agr"):
        assert len(trace["first_pass"]["node_ids"]) == 3
    if method != "prf":
        assert trace["llm"]["calls"] == LLM_CALLS[method] and trace["llm"]["cache_hits"] == 0
    if method == "prf":                   # the expansions are the first pass's documents, clipped
        first = [r[3] for r in sql().expand_documents(conn, skb=SKB, node_ids=trace["first_pass"]["node_ids"])]
        assert all(any(" ".join(f.split()).startswith(e.removesuffix(" ...")) for f in first)
                   for e in trace["expansions"])
    if method == "kar":
        entities = trace["entities"]
        assert entities[0]["pseudo"] and len(entities) == 2
        gene = re.match(r"Which drugs target the gene or protein (.*) and are noted for .*\?", q).group(1)
        assert entities[1]["entity"] == gene and entities[1]["name"] == gene     # matched to its node
        assert trace["neighbours"] and trace["sql"].startswith("with anchors as")
        assert trace["triples"]["sent"] > 2
        steps = trace["explain"]
        assert any(gene in line for line in steps["1-2. entities and their nodes"])
        assert steps["5. triples sent"][0].startswith("[1] ")


@pytest.mark.parametrize("method", ["hyde", "rar", "agr"])
def test_documents_naming_the_answers_beat_plain_vss(conn, llm, answers, method):
    """The written documents are really what is retrieved: naming the answers lifts VSS."""
    llm.responder = good_llm(answers)
    skb_id = sql().find_skb_id(conn, name=SKB)
    val = query_sets.from_split(conn, skb_id, "val")
    val.queries = val.queries[:12]
    expanded = run_method(conn, skb_id, SKB, method, options(method, llm), val, depth=100, resolve=get_method)
    plain = run_method(conn, skb_id, SKB, "vss", vss_method.Options(), val, depth=100, resolve=get_method)
    assert expanded.summary["failed"] == 0
    assert expanded.summary["metrics"]["mrr"] > plain.summary["metrics"]["mrr"] + 0.1


def test_kar_sends_documents_that_reach_the_answers(conn, llm, answers):
    """With the query's entities linked by name, the answers of one-hop questions are among the
    neighbours (all of them: top_k beyond the neighbourhood's size). With the default top_k 10, DRF
    may prefer other genes named like the query's to the drugs it asks for: that is DRF's nature."""
    llm.responder = good_llm(answers)
    rows = conn.execute("select body, answer_ids from stark.query where skb_id = stark.skb_id(%s) and "
                        "(body like 'Which genes or proteins noted for %% interact with the pathway %%' or "
                        " body like 'Which drugs target the gene or protein %%') order by query_id limit 8",
                        (SKB,)).fetchall()
    assert len(rows) >= 4
    reached = 0
    for body, answer_ids in rows:
        ranking = get_method("kar").search(conn, SKB, body, 10, options("kar", llm, top_k=1000))
        kept = {n["node_id"] for n in ranking.trace["neighbours"]}
        reached += bool(kept & set(answer_ids))
        assert all(n["hop"] in (1, 2) and len(n["relations"]) == n["hop"] for n in ranking.trace["neighbours"])
        assert [e["how"] for e in ranking.trace["entities"]] == ["embedding", "name"]
    assert reached == len(rows)


@pytest.mark.parametrize("method", ["kar", "agr"])
def test_replay_with_cache_only_makes_no_request(conn, llm, answers, method):
    llm.responder = good_llm(answers)
    skb_id = sql().find_skb_id(conn, name=SKB)
    val = query_sets.from_split(conn, skb_id, "val")
    val.queries = val.queries[:6]
    first = run_method(conn, skb_id, SKB, method, options(method, llm, cache="refresh"), val, depth=50, resolve=get_method)
    before = len(llm.requests)
    again = run_method(conn, skb_id, SKB, method, options(method, llm, cache="only"), val, depth=50, resolve=get_method)
    assert len(llm.requests) == before
    assert first.summary["failed"] == again.summary["failed"] == 0
    ranked = [dict(conn.execute("select query_id, ranked_ids from stark.eval_result where run_id = %s",
                                (run,)).fetchall()) for run in (first.run_id, again.run_id)]
    assert ranked[0] == ranked[1]
    traces = [t for (t,) in conn.execute("select trace from stark.eval_result where run_id = %s", (again.run_id,))]
    assert all(t["llm"]["calls"] == 0 and t["llm"]["cache_hits"] == LLM_CALLS[method] for t in traces)


@pytest.mark.parametrize("method,retriever", [("kar", "vss"), ("hyde", "bm25"), ("rar", "hybrid")])
def test_garbage_falls_back_to_the_plain_retriever_and_says_why(conn, llm, method, retriever):
    llm.responder = lambda kind, body: "I would rather talk about the weather."
    q = "Which drugs target the gene or protein that is hard to name?"
    before = len(llm.requests)
    ranking = get_method(method).search(conn, SKB, q, 15, options(method, llm, cache="refresh", retriever=retriever))
    assert len(llm.requests) - before == 2                    # the reply and its one repair
    assert ranking.trace["expansions"] == []
    assert ranking.trace["fallback"].startswith(f"plain {retriever}: ")
    assert "after one repair" in ranking.trace["fallback"]
    assert ranking.trace["explain"]["expansions"][0].startswith("none: plain")
    plain = {"vss": lambda: vss_method.search(conn, SKB, q, 15),
             "bm25": lambda: bm25_method.search(conn, SKB, q, 15),
             "hybrid": lambda: get_method("hybrid").search(conn, SKB, q, 15)}[retriever]()
    assert ranking.node_ids == plain.node_ids


@pytest.mark.parametrize("kw", [{"kg": False}, {"drf": False}])
def test_kar_ablations(conn, llm, answers, kw):
    llm.responder = good_llm(answers)
    q = conn.execute("select body from stark.query where skb_id = stark.skb_id(%s) and body like "
                     "'Which drugs target the gene or protein %%' order by query_id limit 1", (SKB,)).fetchone()[0]
    ranking = get_method("kar").search(conn, SKB, q, 10, options("kar", llm, **kw))
    trace = ranking.trace
    if "kg" in kw:
        assert trace["neighbours"] == [] and "sql" not in trace
        assert trace["triples"]["sent"] == len({e["node_id"] for e in trace["entities"]})
    else:                                  # ranked by the names' similarity, top_k per anchor, still capped
        by_anchor = {}
        for n in trace["neighbours"]:
            by_anchor.setdefault(n["anchor"], []).append(n)
        assert by_anchor and all(len(rows) <= 10 for rows in by_anchor.values())
        for rows in by_anchor.values():
            sims = [r["similarity"] for r in rows]
            assert sims == sorted(sims, reverse=True) and [r["rank"] for r in rows] == list(range(1, len(rows) + 1))


def test_kar_anchored_on_the_first_retrieval(conn, llm, answers):
    """anchors=retrieved: no entity call (one request, the expansion); the anchors are the first
    retrieval's top nodes in rank order, their neighbours come from stark.kar_neighbours, and the
    prompt introduces them as what the search found, not as the question's entities."""
    llm.responder = good_llm(answers)
    q = conn.execute("select body from stark.query where skb_id = stark.skb_id(%s) and body like "
                     "'Which drugs target the gene or protein %%' order by query_id limit 1", (SKB,)).fetchone()[0]
    before = len(llm.requests)
    ranking = get_method("kar").search(conn, SKB, q, 10, options("kar", llm, anchors="retrieved", max_entities=3,
                                                                   cache="refresh"))
    assert len(llm.requests) - before == 1
    prompt = user_text("openai", llm.requests[-1]["body"])
    assert "Entities the search engine found for the question" in prompt
    assert "List the entities the question names" not in prompt
    trace = ranking.trace
    first = trace["first_pass"]["node_ids"]
    assert len(first) == 3 and [a["node_id"] for a in trace["entities"]] == first
    assert [a["how"] for a in trace["entities"]] == ["retrieval rank 1", "retrieval rank 2", "retrieval rank 3"]
    assert trace["neighbours"] and {n["anchor"] for n in trace["neighbours"]} <= set(first)
    assert "fallback" not in trace and trace["expansions"]
    assert "1-2. anchors: the first retrieval's top nodes" in trace["explain"]
    with pytest.raises(ValueError, match="kar anchors must be entities or retrieved"):
        get_method("kar").search(conn, SKB, q, 5, options("kar", llm, anchors="graph"))


def test_bad_options_are_named(conn, llm):
    with pytest.raises(ValueError, match="retriever must be one of vss, bm25, hybrid"):
        get_method("hyde").search(conn, SKB, "q", 5, options("hyde", llm, retriever="sparse"))
    with pytest.raises(ValueError, match="kar hops must be positive"):
        get_method("kar").search(conn, SKB, "q", 5, options("kar", llm, hops=0))
    with pytest.raises(ValueError, match="prf n and doc_chars must be positive"):
        get_method("prf").search(conn, SKB, "q", 5, options("prf", llm, n=0))


def test_search_explain_on_the_command_line(synthetic_url, llm, answers):
    llm.responder = good_llm(answers)
    env = os.environ | {"STARK_PG_DSN": synthetic_url, "COLUMNS": "200", "STARK_PG_LLM": "openai:fake-expander",
                        "STARK_PG_LLM_BASE_URL": llm.openai_url}
    q = "Which genes or proteins are associated with some disease?"
    done = subprocess.run([sys.executable, "-m", "stark_pg", "search", SKB, q, "-m", "kar", "--explain", "-k", "3"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    for heading in ("1-2. entities and their nodes", "3-4. neighbours", "5. triples sent", "SQL", "expansions",
                    "retrieve"):
        assert heading in done.stdout
    assert "the query itself ->" in done.stdout


def test_query_weight_mixes_the_plain_query_back_in(conn, llm, answers):
    """query_weight=1 is the plain query's embedding (VSS exactly); 0 the expanded one; between, a mix."""
    llm.responder = good_llm(answers)
    q = conn.execute("select body from stark.query where skb_id = stark.skb_id(%s) and body like "
                     "'What drugs indicated for %% are noted for %%' order by query_id limit 1", (SKB,)).fetchone()[0]
    plain = vss_method.search(conn, SKB, q, 30).node_ids
    rankings = {w: get_method("hyde").search(conn, SKB, q, 30, options("hyde", llm, query_weight=w))
                for w in (0.0, 0.5, 1.0)}
    assert rankings[1.0].node_ids == plain
    assert rankings[0.0].node_ids != plain and rankings[0.5].node_ids != plain
    assert rankings[0.5].trace["final"]["query_weight"] == 0.5
    with pytest.raises(ValueError, match="query_weight must be between 0 and 1"):
        get_method("hyde").search(conn, SKB, q, 5, options("hyde", llm, query_weight=1.5))
