"""`stark-pg synthesize` on the real slice: relation templates, the seeded plan, relational-only
questions, resuming, export and load, statistics, and bad templates.

Every answer is checked against its template by an independent walk over the edge rows in Python (the
pipeline's SQL is compiled from the templates; this reads the same YAML and follows the hops itself).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest

from conftest import IBD, cli_runner, cloned_database
from loaders.bundle import BundleSource
from stark_pg.db import connect
from stark_pg.resources import queries as sql
from stark_pg.synthesize import pipeline
from stark_pg.synthesize.pipeline import SynthesizeError, SynthSettings, synthesize
from stark_pg.synthesize.templates import TemplateError, load_templates, shipped_path

pytestmark = pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")
SKB = "stark-prime-ibd"


@pytest.fixture(scope="module")
def loaded(server_url, template_db):
    """The slice loaded once; each test works on a clone of it."""
    from stark_pg.skb.store import load_skb

    with cloned_database(server_url, template_db, "stark_synth_src") as url:
        with connect(url) as conn:
            load_skb(conn, BundleSource(IBD))
        yield url


@pytest.fixture
def db(server_url, loaded):
    with cloned_database(server_url, conninfo_dbname(loaded), "stark_synth") as url:
        yield url


@pytest.fixture
def cli(db):
    """The real `stark-pg` command against this test's copy of the loaded slice."""
    return cli_runner(db)


def conninfo_dbname(url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return conninfo_to_dict(url)["dbname"]


def made(conn, split: str) -> list[tuple]:
    skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
    return [tuple(r) for r in sql().synth_questions(conn, skb_id=skb_id, split=split)]


def walk(conn, skb_id: int, template, anchors: list[int]) -> set[int]:
    """The template's answers for these anchors, by following its hops over the edge rows in Python."""
    types = dict(conn.execute("select node_id, type from stark.node where skb_id = %s", (skb_id,)).fetchall())
    out_edges, in_edges = defaultdict(set), defaultdict(set)
    for src, relation, dst in conn.execute("select src, relation, dst from stark.edge where skb_id = %s", (skb_id,)):
        out_edges[(src, relation)].add(dst)
        in_edges[(dst, relation)].add(src)
    named = dict(zip(template.anchors, anchors))
    result = None
    for path in template.paths:
        frontier = {named[path.start]}
        for hop in path.hops:
            edges = out_edges if hop.direction == "out" else in_edges
            frontier = {n for node in frontier for n in edges[(node, hop.relation)] if types[n] == hop.to}
        result = frontier if result is None else result & frontier
    for w in template.without:
        edges = in_edges if w.direction == "in" else out_edges
        result = {a for a in result if not any(types[n] == w.type for n in edges[(a, w.relation)])}
    return result - set(anchors)


def test_every_answer_is_what_its_template_admits_and_the_anchors_are_named(db):
    with connect(db) as conn:
        report = synthesize(conn, SKB, SynthSettings(seed=3), limit=120)
        assert report["made"] == 120 and report["llm_calls"] == 0 and len(report["templates_used"]) >= 4
        skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
        templates = {t.id: t for t in load_templates(shipped_path("prime")).templates}
        for query_id, body, answers, seq, template, hops, anchors, names, candidates, *_ in made(conn, "synthetic"):
            expected = walk(conn, skb_id, templates[template], list(anchors))
            assert set(answers) == set(candidates) == expected, (template, anchors)
            assert 1 <= len(answers) <= 10
            assert all(name in body for name in names), body
            assert hops == templates[template].hops
        # the questions are a split of stark.query, as any loaded split
        assert conn.execute("select count(*) from stark.query where split = 'synthetic'").fetchone() == (120,)


def test_the_same_seed_gives_the_same_split_without_the_skbs_own_questions(db):
    with connect(db) as conn:
        synthesize(conn, SKB, SynthSettings(split="first", seed=11), limit=60)
        conn.execute("delete from stark.query where split in ('train', 'val')")
        synthesize(conn, SKB, SynthSettings(split="again", seed=11), limit=60)
        synthesize(conn, SKB, SynthSettings(split="other", seed=12), limit=60)
        first, again, other = (made(conn, s) for s in ("first", "again", "other"))
    content = lambda rows: [(r[1], list(r[2]), r[4], list(r[6])) for r in rows]  # noqa: E731
    assert content(first) == content(again)
    assert content(first) != content(other)


def test_an_interrupted_run_continues_without_duplicates(db, monkeypatch):
    original = pipeline._store_relational
    calls = []

    def crashing(*args):
        calls.append(1)
        if len(calls) == 26:
            raise KeyboardInterrupt       # like Ctrl-C (or a kill) after 25 committed questions
        return original(*args)

    with connect(db) as conn:
        monkeypatch.setattr(pipeline, "_store_relational", crashing)
        with pytest.raises(KeyboardInterrupt):
            synthesize(conn, SKB, SynthSettings(seed=5), limit=50)
        monkeypatch.setattr(pipeline, "_store_relational", original)
        assert len(made(conn, "synthetic")) == 25
        report = synthesize(conn, SKB, SynthSettings(seed=5), limit=50)
        assert report["made"] == 25 and report["skipped"] == 25
        resumed = made(conn, "synthetic")
        synthesize(conn, SKB, SynthSettings(split="whole", seed=5), limit=50)
        whole = made(conn, "whole")
    assert [r[3] for r in resumed] == list(range(50))
    assert [(r[1], list(r[2])) for r in resumed] == [(r[1], list(r[2])) for r in whole]
    # other settings for the same split are refused, not mixed in
    with connect(db) as conn, pytest.raises(SynthesizeError, match="was made with other settings"):
        synthesize(conn, SKB, SynthSettings(seed=6), limit=50)


def test_export_writes_starks_layout_and_load_reads_it_back(db, cli, tmp_path):
    cli("synthesize", SKB, "--relational-only", "--limit", "40", "--seed", "2", "-q")
    report = json.loads(cli("synthesize", "export", SKB, tmp_path / "qa", "--json").stdout)
    assert report["questions"] == 40
    lines = (tmp_path / "qa" / "stark_qa.csv").read_text().splitlines()
    assert lines[0] == "id,query,answer_ids" and len(lines) == 41
    ids = (tmp_path / "qa" / "split" / "synthetic.index").read_text().split()
    provenance = [json.loads(line) for line in (tmp_path / "qa" / "synthetic.jsonl").read_text().splitlines()]
    assert [str(p["id"]) for p in provenance] == ids and all(p["mode"] == "relational" for p in provenance)
    with connect(db) as conn:
        before = conn.execute("select query_id, body, answer_ids from stark.query where split = 'synthetic' "
                              "order by query_id").fetchall()
        conn.execute("delete from stark.query where split = 'synthetic'")
    cli("load", tmp_path / "qa", "--skb", SKB)
    with connect(db) as conn:
        after = conn.execute("select query_id, body, answer_ids from stark.query where split = 'synthetic' "
                             "order by query_id").fetchall()
    assert after == before


def test_templates_and_stats_say_what_the_slice_has(db, cli, tmp_path, monkeypatch):
    monkeypatch.delenv("STARK_PG_LLM", raising=False)
    listed = {t["template"]: t for t in json.loads(cli("synthesize", "templates", SKB, "--json").stdout)["templates"]}
    assert len(listed) == 28
    assert "node type 'anatomy'" in listed["drug-targeting-genes-expressed-in-anatomy"]["missing"]
    usable = [t for t in listed.values() if not t["missing"]]
    assert usable and all(t["instantiations"] > 0 for t in usable)
    assert listed["drug-targeting-genes-of-function"]["answers"]["max"] >= 1
    cli("synthesize", SKB, "--relational-only", "--limit", "30", "-q")
    stats = json.loads(cli("synthesize", "stats", SKB, "--against", "train", "--png", tmp_path / "s.png",
                           "--json").stdout)
    synthetic, train = stats["splits"]
    assert synthetic["questions"] == 30 and train["split"] == "train" and train["templates"] is None
    assert sum(synthetic["templates"].values()) == 30 and 0 <= synthetic["multi_hop_share"] <= 1
    assert (tmp_path / "s.png").stat().st_size > 1000
    no_llm = cli("synthesize", SKB, "--limit", "3", expect=1).stderr
    assert "no LLM chosen" in no_llm and "--relational-only" in no_llm
    dry = json.loads(cli("synthesize", SKB, "--relational-only", "--limit", "7", "--dry-run", "--split", "d",
                         "--json").stdout)
    assert dry["planned"] == 7 and dry["made"] == 0
    with connect(db) as conn:
        assert conn.execute("select count(*) from stark.query where split = 'd'").fetchone() == (0,)


BAD = {
    "not yaml": ("templates: [\n  - id: x\n", "line"),
    "no templates list": ("dataset: prime\n", "expected a mapping with a `templates` list"),
    "unknown key": ("templates:\n  - {id: t1, anchors: {a: drug}, answer: drug, paths: [{from: a, hops: "
                    "[{relation: carrier, to: drug}]}], question: '<a>', colour: red}\n", "template 't1': unknown key"),
    "path without anchor": ("templates:\n  - {id: t2, anchors: {a: drug}, answer: drug, paths: [{from: b, hops: "
                            "[{relation: carrier, to: drug}]}], question: '<a>'}\n",
                            "template 't2': path 1 starts at 'b', which is not an anchor"),
    "path ends elsewhere": ("templates:\n  - {id: t3, anchors: {a: drug}, answer: drug, paths: [{from: a, hops: "
                            "[{relation: carrier, to: gene/protein}]}], question: '<a>'}\n",
                            "template 't3': path 1 ends at 'gene/protein', not at the answer type 'drug'"),
    "slots": ("templates:\n  - {id: t4, anchors: {a: drug}, answer: drug, paths: [{from: a, hops: "
              "[{relation: carrier, to: drug}]}], question: 'about <b>'}\n", "template 't4': the question's slots"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_template_file_is_one_line_naming_file_and_template(tmp_path, case):
    text, message = BAD[case]
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(TemplateError) as caught:
        load_templates(path)
    assert str(caught.value).startswith(str(path)) and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_own_templates_with_what_the_skb_lacks_are_refused_naming_the_template(db, cli, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("templates:\n  - {id: via-ppi, anchors: {g: gene/protein}, answer: gene/protein, paths: "
                    "[{from: g, hops: [{relation: ppi, to: gene/protein}]}], question: 'partners of <g>'}\n"
                    "  - {id: carriers, anchors: {d: drug}, answer: gene/protein, paths: "
                    "[{from: d, hops: [{relation: carrier, to: gene/protein}]}], question: 'carriers of <d>'}\n")
    done = cli("synthesize", SKB, "--relational-only", "--templates", path, expect=1)
    assert done.stderr.strip() == f"error: {path}: template 'via-ppi': the SKB has no relation 'ppi'"
    path.write_text("templates:\n  - {id: carriers, anchors: {d: drug}, answer: gene/protein, paths: "
                    "[{from: d, hops: [{relation: carrier, to: gene/protein}]}], question: 'carriers of <d>'}\n")
    report = json.loads(cli("synthesize", SKB, "--relational-only", "--templates", path, "--json").stdout)
    assert report["made"] > 0 and report["templates_used"] == ["carriers"]
