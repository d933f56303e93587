"""The agent's optimisation loop and method end to end, the LLM being the local fake OpenAI server
(tests/fake_llm_server.py) driven through the real openai SDK.

The scripted LLM writes, per category, a weak program first, then one that reads the answers (the
sandbox must reject it), then, asked to repair that one (the prompt must show it and say why it was
rejected), a program that follows the graph from the question's entities (bound through the entity
slots). On a synthetic Prime-shaped SKB the kept
program must beat the first one on held-out training questions; `agent` then uses it at query time;
a replay with cache=only makes no request; a failing program falls back to hybrid and says so.
"""

from __future__ import annotations

import json

import pytest

from fake_llm_server import FakeLLMServer, user_text
from stark_pg.eval import query_sets
from stark_pg.eval.runner import run_method
from stark_pg.retrieve import agent as agent_method
from stark_pg.retrieve import get_method
from stark_pg.retrieve import hybrid as hybrid_method
from stark_pg.retrieve import vss as vss_method
from stark_pg.retrieve.agent.toolkit import DIRECTIONS
from stark_pg.train.agent import AgentSettings, extract_sql, train_agent
from test_expand_methods import oracle_entities, question

SKB = "synthetic-agent-e2e"

WEAK = "select node_id, 0 as score from agent.node where type = :answer_type order by node_id limit 100"
CHEAT = "select unnest(answer_ids) as node_id, 1 as score from stark.query"
GRAPH = """with linked as (
    select dst as node_id from agent.neighbours(array[:entity_1_node, :entity_2_node]::bigint[], null)),
two as (select dst as node_id from agent.neighbours(array(select node_id from linked), null)),
candidates as (select node_id from linked union select node_id from two)
select s.node_id, s.score + case when n.type = :answer_type then 1 else 0 end as score
from agent.similarity(array(select node_id from candidates), :query_vector) s
join agent.node n on n.node_id = s.node_id
order by score desc, s.node_id
limit 200"""


def scripted(kind, body):
    """Entity parsing like a good LLM; programs by the iteration's direction."""
    text = user_text(kind, body)
    if "List the entities the question names" in text:
        return json.dumps({"entities": oracle_entities(question(body))})
    if DIRECTIONS[0] in text:
        return f"Here is a program:\n```sql\n{WEAK}\n```"
    if DIRECTIONS[1] in text:
        return f"```sql\n{CHEAT}\n```"
    if "Write it again, fixed" in text:         # the repair of the rejected program
        assert CHEAT in text and "was rejected: table stark.query is not allowed" in text
        return f"```sql\n{GRAPH};\n```"
    raise AssertionError("unexpected prompt: " + text[:200])


@pytest.fixture(scope="module")
def llm():
    server = FakeLLMServer().start()
    server.responder = scripted
    yield server
    server.stop()


@pytest.fixture(scope="module")
def synthetic_url(server_url, template_db):
    from conftest import indexed_synthetic

    with indexed_synthetic(server_url, template_db, "stark_agent_e2e", SKB, seed=7) as url:
        yield url


@pytest.fixture
def conn(synthetic_url):
    from stark_pg.db import connect

    with connect(synthetic_url) as connection:
        yield connection


def settings(llm, **kw) -> AgentSettings:
    return AgentSettings(**({"iterations": 3, "batch": 8, "holdout": 0.4, "min_queries": 10, "limit": 60,
                             "llm": "openai:fake-agent", "base_url": llm.openai_url} | kw))


@pytest.fixture(scope="module")
def trained(synthetic_url, llm):
    from stark_pg.db import connect

    with connect(synthetic_url) as conn:
        before = len(llm.requests)
        report = train_agent(conn, SKB, settings(llm, cache="refresh"))
        return report, llm.requests[before:]


def test_the_kept_program_beats_the_first_one_on_held_out_questions(conn, trained):
    report, _ = trained
    rows = conn.execute("select category, iteration, author, status, error, batch_metrics, holdout_metrics, chosen, sql "
                        "from stark.agent_program where run_id = %s order by category, iteration", (report.run_id,)
                        ).fetchall()
    categories = {r[0] for r in rows}
    assert categories == {c.category for c in report.categories} and len(categories) >= 2
    for category in categories:
        mine = {r[1]: r for r in rows if r[0] == category}
        assert sorted(mine) == [0, 1, 2, 3]
        assert [mine[i][3] for i in range(4)] == ["ok", "ok", "rejected", "ok"]
        assert mine[0][2] == "seed" and mine[1][2] == "llm"
        assert "stark.query is not allowed" in mine[2][4]
        assert mine[3][8].startswith("with linked as")            # the program as written, slots included
        chosen = [r for r in mine.values() if r[7]]
        assert len(chosen) == 1
        first, kept = mine[1][6]["mrr"], chosen[0][6]["mrr"]
        assert kept > first
        assert kept == max(r[6]["mrr"] for r in mine.values() if r[6] is not None)
    graph_kept = [c for c in report.categories if any(h["chosen"] and h["iteration"] == 3 for h in c.history)]
    assert graph_kept, "the graph program should win somewhere on held-out questions"
    run = conn.execute("select finished_at is not null, llm, categories from stark.agent_run where run_id = %s",
                       (report.run_id,)).fetchone()
    assert run[0] and run[1]["calls"] > 0 and set(run[2]) == categories


def test_feedback_reaches_the_llm(trained):
    _, requests = trained
    prompts = [user_text("openai", r["body"]) for r in requests]
    programs = [p for p in prompts if "This time:" in p]
    repairs = [p for p in prompts if "Write it again, fixed" in p]
    categories = len(trained[0].categories)
    assert len(programs) == 2 * categories and len(repairs) == categories
    assert all(CHEAT in p and "was rejected: table stark.query is not allowed" in p for p in repairs)
    assert all("Questions it ranked badly:" in p or "MRR 1.000" in p for p in programs)
    assert all("agent.neighbours(" in p and ":entity_1_node" in p for p in programs + repairs)  # the toolkit


def test_a_replay_from_the_cache_makes_no_request_and_finds_the_same(conn, llm, trained):
    report, _ = trained
    before = len(llm.requests)
    again = train_agent(conn, SKB, settings(llm, cache="only"))
    assert len(llm.requests) == before
    def scores(r):
        return [(c.category, [{k: v for k, v in h.items() if k != "program_id"} for h in c.history])
                for c in r.categories]
    assert scores(again) == scores(report)
    assert again.llm["calls"] == 0 and again.llm["cache_hits"] > 0


def test_workers_ask_the_entity_parses_at_once_and_find_the_same(conn, llm, trained):
    from stark_pg.llm.concurrency import workers

    report, requests = trained
    before = len(llm.requests)
    with workers(4):
        again = train_agent(conn, SKB, settings(llm, cache="refresh"))
    assert len(llm.requests) - before == len(requests)       # the same requests, asked anew
    def scores(r):
        return [(c.category, [{k: v for k, v in h.items() if k != "program_id"} for h in c.history])
                for c in r.categories]
    assert scores(again) == scores(report)
    assert {k: v for k, v in again.llm.items() if k != "seconds"} == \
        {k: v for k, v in report.llm.items() if k != "seconds"}
    def programs(run_id):
        return conn.execute("select category, iteration, author, sql, status, error, batch_metrics, feedback, "
                            "holdout_metrics, chosen from stark.agent_program where run_id = %s "
                            "order by category, iteration", (run_id,)).fetchall()
    assert programs(again.run_id) == programs(report.run_id)


def test_the_agent_method_runs_the_kept_programs_and_beats_vss(conn, llm, trained):
    report, _ = trained
    skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
    val = query_sets.from_split(conn, skb_id, "val")
    options = agent_method.Options(run=report.run_id, llm="openai:fake-agent", base_url=llm.openai_url)
    agent = run_method(conn, skb_id, SKB, "agent", options, val, depth=100, resolve=get_method)
    vss = run_method(conn, skb_id, SKB, "vss", vss_method.Options(), val, depth=100, resolve=get_method)
    assert agent.summary["metrics"]["mrr"] > vss.summary["metrics"]["mrr"]
    traces = [t for (t,) in conn.execute("select trace from stark.eval_result where run_id = %s", (agent.run_id,))]
    assert traces and all(t["run"] == report.run_id and t["category"] for t in traces)
    ran = [t for t in traces if "fallback" not in t]
    assert ran and all(t["sql"] and "%(" not in t["sql"] and ":query" not in t["sql"] for t in ran)
    ranking = agent_method.search(conn, SKB, val.queries[0].body, 10, options)
    explain = ranking.trace["explain"]
    assert {"category", "program", "slots", "SQL as run"} <= set(explain)
    assert "384 values]' AS VECTOR)" in explain["SQL as run"][0]            # shortened for the reader
    assert ranking.trace["sql"].count(",") > 383                                # the trace keeps it whole


def test_a_failing_program_falls_back_to_hybrid_and_says_why(conn, llm, trained):
    report, _ = trained
    category = report.categories[0].category
    program_id, original = conn.execute("select program_id, sql from stark.agent_program "
                                        "where run_id = %s and category = %s and chosen",
                                        (report.run_id, category)).fetchone()
    conn.execute("update stark.agent_program set sql = 'select node_id, 1 / 0 from agent.node' where program_id = %s",
                 (program_id,))
    try:
        options = agent_method.Options(run=report.run_id, llm="openai:fake-agent", base_url=llm.openai_url)
        bodies = [b for (b,) in conn.execute("select body from stark.query where skb_id = stark.skb_id(%s) "
                                             "and split = 'val' order by query_id", (SKB,))]
        ranking = next(r for r in (agent_method.search(conn, SKB, b, 10, options) for b in bodies)
                       if r.trace["category"] == category)
        assert ranking.trace["fallback"].startswith("hybrid: failed: division by zero")
        q = bodies[[agent_method.search(conn, SKB, b, 10, options).trace["category"] for b in bodies].index(category)]
        assert ranking.node_ids == hybrid_method.search(conn, SKB, q, 10, None).node_ids
        assert ranking.trace["explain"]["fallback"] == [ranking.trace["fallback"]]
    finally:
        conn.execute("update stark.agent_program set sql = %s where program_id = %s", (original, program_id))


def test_no_trained_agent_is_a_clear_error(conn):
    with pytest.raises(ValueError, match="stark-pg train agent"):
        agent_method.search(conn, SKB, "anything", 10, agent_method.Options(run=10 ** 6))


def test_programs_are_read_from_replies_of_any_shape():
    assert extract_sql("Sure!\n```sql\nselect 1\n```\nthanks") == "select 1"
    assert extract_sql("```\nselect 2\n```") == "select 2"
    assert extract_sql("The program: SELECT node_id, 1 FROM agent.node") == "SELECT node_id, 1 FROM agent.node"


def test_the_cli_trains_from_the_cache_and_plots_the_history(synthetic_url, llm, trained, tmp_path):
    import os
    import subprocess
    import sys

    plot = tmp_path / "history.png"
    env = os.environ | {"STARK_PG_DSN": synthetic_url, "COLUMNS": "160"}
    done = subprocess.run([sys.executable, "-m", "stark_pg", "train", "agent", SKB, "--iterations", "1", "--batch", "8",
                           "--holdout", "0.4", "--min-queries", "10", "--limit", "60", "--llm", "openai:fake-agent",
                           "--base-url", llm.openai_url, "--cache", "only", "--plot", str(plot), "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["llm"]["calls"] == 0 and summary["llm"]["cache_hits"] > 0
    assert [c["category"] for c in summary["categories"]] == [c.category for c in trained[0].categories]
    assert all(len(c["programs"]) == 2 for c in summary["categories"])      # the seed and one LLM program
    assert all((c["type_agreement"] is None) == (c["category"] == "any") for c in summary["categories"])
    assert all(0 <= c["type_agreement"] <= 1 for c in summary["categories"] if c["type_agreement"] is not None)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = subprocess.run([sys.executable, "-m", "stark_pg", "train", "agent", "no-such-skb", "--llm", "openai:x"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode != 0 and "no-such-skb" in bad.stderr and "Traceback" not in bad.stderr


def test_held_out_questions_are_real_ones_only():
    import numpy as np

    from stark_pg.train.agent import Question, held_out

    def q(i, real):
        return Question(i, f"q{i}", [i], np.zeros(3), None, None, real=real)
    members = [q(1, False), q(2, True), q(3, False), q(4, True), q(5, True), q(6, False), q(7, True)]
    holdout, fit = held_out(members, 0.5)
    assert [x.query_id for x in holdout] == [2, 4]                # half of the four real ones, in order
    assert [x.query_id for x in fit] == [1, 3, 5, 6, 7]           # every other question writes programs
    none_real = held_out([q(1, False), q(3, False)], 0.5)                  # none real: the batch chooses
    assert none_real[0] == [] and [x.query_id for x in none_real[1]] == [1, 3]
    only_real = [q(i, True) for i in range(10)]
    assert [x.query_id for x in held_out(only_real, 0.3)[0]] == [0, 1, 2]                # one split: as before


def test_train_agent_learns_from_several_splits_and_votes_with_them(conn, llm):
    """--splits train,extra (extra: copies of val's questions standing in for a synthesized split): every
    question of both is a training question, only `train` ones are held out, the run records the splits
    and the method's search votes a category with them; val itself is refused."""
    skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
    conn.execute("insert into stark.query (skb_id, query_id, split, body, answer_ids) "
                 "select skb_id, query_id + 1000000, 'extra', body, answer_ids from stark.query "
                 "where skb_id = %s and split = 'val'", (skb_id,))
    try:
        report = train_agent(conn, SKB, settings(llm, iterations=0, limit=None, splits=("train", "extra")))
        counts = dict(conn.execute("select split, count(*) from stark.query where skb_id = %s "
                                   "and cardinality(answer_ids) > 0 group by split", (skb_id,)).fetchall())
        assert sum(c.train + c.holdout for c in report.categories) == counts["train"] + counts["extra"]
        holdout = sum(c.holdout for c in report.categories)
        assert 0 < holdout <= counts["train"] * 0.4 + len(report.categories)   # drawn from train's questions
        settings_row = conn.execute("select settings from stark.agent_run where run_id = %s",
                                    (report.run_id,)).fetchone()
        assert settings_row[0]["splits"] == ["train", "extra"]
        _, _, splits = agent_method.trained_programs(conn, SKB, skb_id, report.run_id)
        assert splits == ["train", "extra"]
    finally:
        conn.execute("delete from stark.query where skb_id = %s and split = 'extra'", (skb_id,))
    with pytest.raises(ValueError, match="reported on"):
        train_agent(conn, SKB, settings(llm, iterations=0, splits=("train", "val")))
    with pytest.raises(ValueError, match="no-such-split"):
        train_agent(conn, SKB, settings(llm, iterations=0, splits=("no-such-split",)))
