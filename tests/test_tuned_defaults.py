"""hybrid's defaults chosen on train by `stark-pg tune` (stark.tuned_setting): stored only when chosen on
train, used by search, eval, the Python API and stark.search when they set none of the fusion settings,
overridden by any explicit one, and RRF where nothing is stored (no train split)."""

from __future__ import annotations

import json

import psycopg
import pytest

import stark_pg
from conftest import cli_runner, cloned_database, indexed_synthetic

SKB = "tuned"


@pytest.fixture(scope="module")
def url(server_url, template_db):
    with indexed_synthetic(server_url, template_db, "stark_tuned", SKB, seed=2, nodes=300, edges_per_node=5) as cloned:
        yield cloned


@pytest.fixture
def cli(url):
    run = cli_runner(url)
    run("tune", SKB, "-m", "hybrid", "--forget")          # each test starts with nothing stored
    run.url = url
    return run


def question(url: str, split: str = "val") -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("select body from stark.query where split = %s order by query_id limit 1",
                            (split,)).fetchone()[0]


def search(cli, query: str, *options: str) -> dict:
    """`stark-pg search --json`'s results and trace, through the Python API in this process (the same
    code from the options on; a subprocess per search would load the embedding model each time)."""
    settings = dict(o.split("=", 1) for o in options[1::2])
    with stark_pg.connect(cli.url) as db:
        hits = db.skb(SKB).search(query, method="hybrid", k=10, **settings)
    return {"results": [{"node_id": h.node_id} for h in hits], "trace": hits.trace}


def ranked(document: dict) -> list[int]:
    return [r["node_id"] for r in document["results"]]


def test_tune_on_train_stores_the_best_and_every_caller_uses_it(cli, url):
    report = json.loads(cli("tune", SKB, "-m", "hybrid", "-o", "fusion=weighted", "-g", "weight=0.1,0.9",
                            "--limit", "40", "--json", "-q").stdout)
    best = float(report["best"]["weight"])
    assert report["stored_defaults"] == {"fusion": "weighted", "weight": best, "pool": 100, "rrf_k": 60}
    with psycopg.connect(url) as conn:
        options, query_set, queries, metric, run_id = conn.execute(
            "select options, query_set, queries, metric, run_id from stark.tuned_setting").fetchone()
    assert options["weight"] == best and (query_set, queries, metric) == ("split:train[:40]", 40, "mrr")
    assert run_id in [p["run_id"] for p in report["points"]]

    query = question(url)
    tuned = search(cli, query)                              # no fusion setting given: the stored ones
    assert (tuned["trace"]["fusion"], tuned["trace"]["weight"]) == ("weighted", best)
    assert tuned["trace"]["settings_from"]["from"] == "stark-pg tune"
    assert tuned["trace"]["settings_from"]["query_set"] == "split:train[:40]"
    assert ranked(tuned) == ranked(search(cli, query, "-o", "fusion=weighted", "-o", f"weight={best}"))
    assert ranked(tuned) == ranked(search(cli, query, "-o", "ef_search=100"))       # not a fusion setting
    explained = cli("search", SKB, query, "-m", "hybrid", "--explain").stdout
    assert '"from": "stark-pg tune"' in explained and '"query_set": "split:train[:40]"' in explained

    with stark_pg.connect(url) as db:                        # the Python API
        hits = db.skb(SKB).search(query, method="hybrid", k=10)
        assert hits.node_ids == ranked(tuned) and hits.trace["settings_from"]["from"] == "stark-pg tune"
        result = db.skb(SKB).evaluate(["hybrid"], split="val", limit=5)
        assert result.runs[0].options["fusion"] == "weighted" and result.runs[0].options["weight"] == best

    with psycopg.connect(url, autocommit=True) as conn:      # stark.search, its vector from stark.embed's cache
        from stark_pg.embed import encode_query

        vector = "[" + ",".join(map(str, encode_query(query, "all-MiniLM-L6-v2").tolist())) + "]"
        conn.execute("insert into stark_embed.cache (model, body_md5, body, vec) values "
                     "('all-MiniLM-L6-v2', md5(%s), %s, %s::vector) on conflict do nothing", (query, query, vector))
        in_sql = [r[0] for r in conn.execute("select node_id from stark.search(%s, %s, 'hybrid', 10)", (SKB, query))]
        rrf = [r[0] for r in conn.execute("select node_id from stark.search(%s, %s, 'hybrid', 10, "
                                          "'{\"fusion\": \"rrf\"}')", (SKB, query))]
    assert in_sql == ranked(tuned)
    assert rrf == ranked(search(cli, query, "-o", "fusion=rrf"))


def test_explicit_settings_override_and_other_splits_are_never_stored(cli, url):
    cli("tune", SKB, "-m", "hybrid", "-o", "fusion=weighted", "-g", "weight=0.9", "--limit", "20", "-q")
    query = question(url)
    rrf = search(cli, query, "-o", "fusion=rrf")            # given one: the built-in defaults for the rest
    assert (rrf["trace"]["fusion"], rrf["trace"]["weight"], rrf["trace"]["settings_from"]) == (
        "rrf", 0.5, {"from": "options"})
    weight = search(cli, query, "-o", "weight=0.3")
    assert (weight["trace"]["fusion"], weight["trace"]["weight"]) == ("rrf", 0.3)
    runs = json.loads(cli("eval", SKB, "-m", "hybrid", "-o", "fusion=rrf", "--split", "val", "--limit", "3",
                          "--json", "-q").stdout)
    assert runs["methods"]["hybrid"]["options"]["fusion"] == "rrf"

    on_val = cli("tune", SKB, "-m", "hybrid", "-o", "fusion=weighted", "-g", "weight=0.2", "--split", "val",
                 "--limit", "5", "-q")
    assert "not stored as hybrid's defaults: chosen on split:val[:5], not on the train split" in on_val.stdout
    assert search(cli, query)["trace"]["weight"] == 0.9      # still the one chosen on train
    not_stored = json.loads(cli("tune", SKB, "-m", "hybrid", "-o", "fusion=weighted", "-g", "weight=0.4",
                                "--limit", "5", "--no-store", "--json", "-q").stdout)
    assert not_stored["stored_defaults"] is None and search(cli, query)["trace"]["weight"] == 0.9

    assert json.loads(cli("tune", SKB, "-m", "hybrid", "--forget", "--json").stdout)["forgot"] is True
    back = search(cli, query)
    assert back["trace"]["fusion"] == "rrf" and back["trace"]["settings_from"]["from"] == "built-in defaults"


def test_without_a_train_split_nothing_is_stored_and_hybrid_is_rrf(url, server_url):
    with psycopg.connect(url) as conn:                       # the module's SKB, copied without its train split
        template = conn.execute("select current_database()").fetchone()[0]
    with cloned_database(server_url, template, "stark_notrain") as other:
        with psycopg.connect(other, autocommit=True) as conn:
            conn.execute("delete from stark.query where split = 'train'")
        run = cli_runner(other)
        run.url = other
        failed = run("tune", SKB, "-m", "hybrid", "-q", expect=1)
        assert "no queries in split:train" in failed.stderr and "Traceback" not in failed.stderr
        with psycopg.connect(other) as conn:
            assert conn.execute("select count(*) from stark.tuned_setting").fetchone()[0] == 0
        plain = search(run, question(other))
        assert (plain["trace"]["fusion"], plain["trace"]["weight"]) == ("rrf", 0.5)
        assert plain["trace"]["settings_from"]["from"] == "built-in defaults"
