"""`stark-pg synthesize` with an LLM (STaRK's steps 2-4) on the real slice, against a local server that
speaks OpenAI's protocol and answers by rule, so that every outcome can be predicted here:

- requirements: three, one of which names the gold answer and one is a bare field name (the pipeline
  must drop both);
- the first rephrasing drops the anchors' names, the reminded one keeps them (the retry);
- the first verifier accepts an entry whose name has an even sum of code points, or that was a gold;
  the second supports every requirement, except for entries whose name starts with a letter from A to C.

Each answer is then checked against the template by an independent walk (test_synthesize.walk) and
against the rule; the cache makes a replay free; a crash mid-way resumes without duplicates; the SKB's
own questions are never read.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import IBD
from fake_llm_server import FakeLLMServer, user_text
from stark_pg.db import connect
from stark_pg.llm import LLMClient, LLMSettings
from stark_pg.llm.cache import LLMCache
from stark_pg.synthesize import pipeline
from stark_pg.synthesize.pipeline import SynthSettings, synthesize
from stark_pg.synthesize.stats import split_stats
from stark_pg.synthesize.templates import load_templates, shipped_path
from stark_pg.synthesize.textual import accepted, has_names
from test_synthesize import SKB, cli, db, loaded, made, walk  # noqa: F401 - fixtures shared with the relational tests

pytestmark = pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")


class Rules:
    """The fake LLM's answers, by which step a prompt is."""

    def __init__(self):
        self.golds: set[str] = set()

    def __call__(self, kind, body) -> str:
        prompt = user_text(kind, body)
        if "short phrases" in prompt:
            name = re.search(r'Do not include the name "(.*)"\.', prompt).group(1)
            self.golds.add(name)
            return json.dumps({"requirements": ["acts on inflammation", f"is called {name}", "description"]})
        names = re.findall(r'"([^"]+)"', prompt.split("exactly as written")[0].split("names")[-1])
        if prompt.startswith("Write one natural question"):
            return json.dumps({"question": f"Which entries linked to {' and '.join(names)} act on inflammation?"})
        if prompt.startswith("Rewrite this question"):
            if "Your last version dropped" not in prompt:
                return '{"question": "Which entries act on inflammation, as a friend asked me?"}'
            return json.dumps({"question": f"My doctor mentioned {' and '.join(names)}: what acts on inflammation?"})
        entry = re.search(r"^name: (.*)$", prompt, re.M).group(1)
        if "Does the entry meet every requirement" in prompt:
            return json.dumps({"satisfies": entry in self.golds or sum(map(ord, entry)) % 2 == 0})
        if "is it supported by the text" in prompt:
            count = len(re.findall(r"^\d+\. ", prompt, re.M))
            return json.dumps({"supported": [not entry[:1].upper() in "ABC"] * count})
        raise AssertionError(f"unexpected prompt: {prompt[:200]}")


def expected_answer(entry: str, golds: set[str]) -> bool:
    return (entry in golds or sum(map(ord, entry)) % 2 == 0) and entry[:1].upper() not in "ABC"


@pytest.fixture
def server():
    fake = FakeLLMServer().start()
    fake.responder = Rules()
    yield fake
    fake.stop()


def client(conn, server, cache: str = "use") -> LLMClient:
    return LLMClient(LLMSettings("openai", "qwen-test", base_url=server.openai_url, max_retries=0, cache=cache),
                     LLMCache(conn))


def provenance(conn, split: str) -> list[dict]:
    rows = conn.execute("select seq, outcome, query_id, template, anchors, anchor_names, candidates, answers, gold, "
                        "requirements, verdicts, calls from stark.synth_question where split = %s order by seq",
                        (split,)).fetchall()
    keys = ("seq", "outcome", "query_id", "template", "anchors", "anchor_names", "candidates", "answers", "gold",
            "requirements", "verdicts", "calls")
    return [dict(zip(keys, r)) for r in rows]


def test_questions_name_their_anchors_and_their_answers_pass_template_and_verifiers(db, server):
    with connect(db) as conn:
        report = synthesize(conn, SKB, SynthSettings(mode="llm", seed=4), limit=8, client=client(conn, server))
        assert report["made"] == 8 and report["llm_calls"] == len(server.requests) > 8 * 5
        skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
        names = dict(conn.execute("select node_id, name from stark.node where skb_id = %s", (skb_id,)).fetchall())
        templates = {t.id: t for t in load_templates(shipped_path("prime")).templates}
        items = provenance(conn, "synthetic")
        bodies = dict(conn.execute("select query_id, body from stark.query where split = 'synthetic'").fetchall())
        golds = server.responder.golds
        for item in items:
            assert set(item["candidates"]) == walk(conn, skb_id, templates[item["template"]], list(item["anchors"]))
            assert item["requirements"]["textual"] == ["acts on inflammation"]     # the one naming the gold: gone
            assert item["requirements"]["role"] in ("doctor", "medical scientist", "patient")
            if item["outcome"] == "kept":
                body = bodies[item["query_id"]]
                assert has_names(body, item["anchor_names"]) and body.startswith("My doctor mentioned")
                assert item["gold"] in item["answers"]
                assert set(item["answers"]) == {c for c in item["candidates"] if expected_answer(names[c], golds)}
                assert all(accepted(item["verdicts"][str(a)], 1) for a in item["answers"])
            else:
                assert item["query_id"] is None and item["answers"] == []
                assert item["outcome"] == "gold rejected" and names[item["gold"]][:1].upper() in "ABC"
                assert list(item["verdicts"]) == [str(item["gold"])]      # no candidate asked about after it
        assert sum(i["outcome"] == "kept" for i in items) == 8 == len(bodies)
        assert report["dropped"] == ({"gold rejected": len(items) - 8} if len(items) > 8 else {})
        stats = split_stats(conn, skb_id, "synthetic")
        assert stats["gold_pass_share"] == round(8 / len(items), 3)
        assert stats["outcomes"]["kept"]["items"] == 8 and stats["questions"] == 8


def test_a_replay_from_the_cache_calls_nothing_and_never_reads_the_skbs_questions(db, server):
    with connect(db) as conn:
        synthesize(conn, SKB, SynthSettings(mode="llm", split="first", seed=9), limit=5, client=client(conn, server))
        asked = len(server.requests)
        conn.execute("delete from stark.query where split in ('train', 'val')")
        report = synthesize(conn, SKB, SynthSettings(mode="llm", split="again", seed=9), limit=5,
                            client=client(conn, server, cache="only"))
        assert len(server.requests) == asked and report["made"] == 5
        first, again = made(conn, "first"), made(conn, "again")
    assert [(r[1], list(r[2])) for r in first] == [(r[1], list(r[2])) for r in again]


def test_a_crash_mid_way_resumes_without_duplicates_or_repeated_calls(db, server, monkeypatch):
    original = pipeline._store_llm
    stored = []

    def crashing(*args):
        if len(stored) == 3:
            raise KeyboardInterrupt          # killed while the fourth item is being made
        stored.append(1)
        return original(*args)

    with connect(db) as conn:
        monkeypatch.setattr(pipeline, "_store_llm", crashing)
        with pytest.raises(KeyboardInterrupt):
            synthesize(conn, SKB, SynthSettings(mode="llm", seed=2), limit=6, client=client(conn, server))
        monkeypatch.setattr(pipeline, "_store_llm", original)
        assert len(provenance(conn, "synthetic")) == 3
        report = synthesize(conn, SKB, SynthSettings(mode="llm", seed=2), limit=6, client=client(conn, server))
        items = provenance(conn, "synthetic")
        asked = len(server.requests)
        synthesize(conn, SKB, SynthSettings(mode="llm", split="whole", seed=2), limit=6,
                   client=client(conn, server, cache="only"))
        assert len(server.requests) == asked          # the whole split replays what the two runs asked
        whole = provenance(conn, "whole")
    assert report["skipped"] + report["made"] == 6
    assert [i["seq"] for i in items] == list(range(len(items)))
    assert [(i["outcome"], i["answers"]) for i in items] == [(i["outcome"], i["answers"]) for i in whole]


def test_the_cli_makes_llm_questions_and_estimates_a_dry_run(db, cli, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    dry = json.loads(cli("synthesize", SKB, "--limit", "4", "--dry-run", "--json").stdout)
    assert dry["estimate"]["items"] == 4 and dry["estimate"]["calls_low"] < dry["estimate"]["calls_high"]
    done = json.loads(cli("synthesize", SKB, "--limit", "3", "--llm", "openai:qwen-test", "--base-url",
                          server.openai_url, "--json").stdout)
    assert done["made"] == 3 and done["mode"] == "llm" and done["llm_calls"] > 0
    failed = cli("synthesize", SKB, "--limit", "3", "--split", "other", "--seed", "7", "--llm", "openai:qwen-test", "--base-url",
                 server.openai_url, "--cache", "only", expect=1)
    assert "cache=only" in failed.stderr and "Traceback" not in failed.stderr


def test_workers_make_and_store_what_a_sequential_run_does(db, server):
    from stark_pg.llm.concurrency import workers

    with connect(db) as conn:
        # the fake LLM accepts golds it has seen: a first run shows it them all, so that the two runs
        # compared, which ask everything anew, get the same answers whatever the order of the requests
        synthesize(conn, SKB, SynthSettings(mode="llm", split="warm", seed=3), limit=6, client=client(conn, server))
        conn.execute("delete from stark.llm_cache")
        server.requests.clear()
        sequential = synthesize(conn, SKB, SynthSettings(mode="llm", split="one", seed=3), limit=6,
                                client=client(conn, server))
        asked = len(server.requests)
        conn.execute("delete from stark.llm_cache")          # the concurrent run asks everything again
        with workers(4):
            concurrent = synthesize(conn, SKB, SynthSettings(mode="llm", split="four", seed=3), limit=6,
                                    client=client(conn, server))
        assert len(server.requests) == 2 * asked
        assert (concurrent["made"], concurrent["dropped"], concurrent["llm_calls"]) == \
            (sequential["made"], sequential["dropped"], sequential["llm_calls"])
        def unnamed(rows):
            return [{k: v for k, v in r.items() if k != "query_id"} for r in rows]
        assert unnamed(provenance(conn, "four")) == unnamed(provenance(conn, "one"))
        bodies = conn.execute("select split, body from stark.query where split in ('one', 'four') "
                              "order by split, query_id").fetchall()
        assert [b for s, b in bodies if s == "one"] == [b for s, b in bodies if s == "four"]


def test_the_prefilter_verifies_at_most_n_candidates_the_nearest_ones(db, server):
    """--prefilter 2: per item the gold and the one other candidate nearest its requirements are asked
    about; every other candidate is marked prefiltered and is not an answer; the estimate counts it."""
    from stark_pg.synthesize.prefilter import shortlist

    with connect(db) as conn:
        settings = SynthSettings(mode="llm", split="prefiltered", seed=4, min_answers=3, prefilter=2)
        dry = synthesize(conn, SKB, settings, limit=4, client=client(conn, server), dry_run=True)
        full = synthesize(conn, SKB, SynthSettings(mode="llm", split="unused", seed=4, min_answers=3), limit=4,
                          client=client(conn, server), dry_run=True)
        assert dry["estimate"]["calls_high"] < full["estimate"]["calls_high"]
        synthesize(conn, SKB, settings, limit=4, client=client(conn, server))
        skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
        items = [i for i in provenance(conn, "prefiltered") if i["outcome"] == "kept"]
        assert items
        for item in items:
            asked = [n for n, v in item["verdicts"].items() if not v.get("prefiltered")]
            skipped = {int(n) for n, v in item["verdicts"].items() if v.get("prefiltered")}
            assert len(item["candidates"]) >= 3 and len(asked) == 2 and str(item["gold"]) in asked
            assert len(skipped) == len(item["candidates"]) - 2 and not skipped & set(item["answers"])
            others = [c for c in item["candidates"] if c != item["gold"]]
            assert [int(n) for n in asked if int(n) != item["gold"]] == \
                [c for c in others if c not in skipped]
        # the same plan as without the prefilter, and a split made without one cannot be continued with one
        with pytest.raises(pipeline.SynthesizeError, match="other settings"):
            synthesize(conn, SKB, SynthSettings(mode="llm", split="prefiltered", seed=4, min_answers=3), limit=5,
                       client=client(conn, server))
    docs = {1: "a drug that acts on inflammation of the bowel", 2: "a gene of the nucleus", 3: "an inflammation drug"}
    assert shortlist(["acts on inflammation"], docs, [1, 2, 3], 2) == [1, 3]     # nearest two, in the given order
    assert shortlist(["acts on inflammation"], docs, [1, 2, 3], 5) == [1, 2, 3]
    assert shortlist(["acts on inflammation"], docs, [1, 2, 3], 0) == []
