"""`stark-pg tune`: a grid of settings evaluated on train, each point a stored run, the best named by the
metric; bad grids fail before anything runs (real slice, BM25: no model needed)."""

from __future__ import annotations

import json

import pytest

from conftest import IBD
from loaders.bundle import BundleSource
from stark_pg.eval.tuning import parse_grid
from stark_pg.index.lexical import build_lexical
from stark_pg.options import OptionError
from stark_pg.skb.catalog import require_skb
from stark_pg.skb.store import load_skb


def test_a_grid_is_every_combination_in_the_order_written():
    assert parse_grid(["k1=0.9,1.5", "b=0.4, 0.75,0.4"]) == [
        {"k1": "0.9", "b": "0.4"}, {"k1": "0.9", "b": "0.75"}, {"k1": "1.5", "b": "0.4"}, {"k1": "1.5", "b": "0.75"}]
    for bad in (["k1"], ["k1="], ["=1"], ["k1=1", "k1=2"]):
        with pytest.raises(OptionError, match="--grid"):
            parse_grid(bad)


@pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")
def test_tune_runs_each_point_on_train_and_names_the_best(cli, conn):
    load_skb(conn, BundleSource(IBD))
    build_lexical(conn, "stark-prime-ibd")
    skb_id = require_skb(conn, "stark-prime-ibd")

    done = cli("tune", "stark-prime-ibd", "-m", "bm25", "-g", "k1=0.3,1.2", "-g", "b=0.2,0.75", "--limit", "60",
               "--json", "-q")
    report = json.loads(done.stdout)
    assert report["query_set"] == "split:train[:60]" and "optimistic" not in done.stderr
    points = report["points"]
    assert [p["settings"] for p in points] == [{"k1": "0.3", "b": "0.2"}, {"k1": "0.3", "b": "0.75"},
                                               {"k1": "1.2", "b": "0.2"}, {"k1": "1.2", "b": "0.75"}]
    for p in points:                        # each point is a stored run with exactly its settings
        options, query_set = conn.execute("select options, query_set from stark.eval_run where run_id = %s",
                                          (p["run_id"],)).fetchone()
        assert (options["k1"], options["b"]) == (float(p["settings"]["k1"]), float(p["settings"]["b"]))
        assert query_set == "split:train[:60]" and p["queries"] == 60
    mrrs = [p["metrics"]["mrr"] for p in points]
    assert len(set(mrrs)) > 1                                   # the settings matter on these questions
    best = points[mrrs.index(max(mrrs))]["settings"]
    assert report["best"] == best
    assert report["eval_command"] == (f"stark-pg eval stark-prime-ibd -m bm25 -o k1={best['k1']} -o b={best['b']} "
                                      "--split val")
    # the same settings through `stark-pg eval` give the same figure
    again = json.loads(cli("eval", "stark-prime-ibd", "-m", "bm25", "-o", f"k1={best['k1']}", "-o", f"b={best['b']}",
                           "--split", "train", "--limit", "60", "--json", "-q").stdout)
    assert again["methods"]["bm25"]["metrics"]["mrr"] == pytest.approx(max(mrrs))

    table = cli("tune", "stark-prime-ibd", "-m", "bm25", "-g", "b=0.75,0.2", "-o", "k1=1.2", "--limit", "60", "-q")
    assert "best by mrr on split:train[:60]: -o k1=1.2 -o b=" in table.stdout
    assert "report it on val: stark-pg eval stark-prime-ibd -m bm25 -o k1=1.2 -o b=" in table.stdout

    runs = conn.execute("select count(*) from stark.eval_run where skb_id = %s", (skb_id,)).fetchone()[0]
    bad = cli("tune", "stark-prime-ibd", "-m", "bm25", "-g", "k1=0.5,-3", "-q", expect=1)       # the 2nd point
    assert "k1=-3" in bad.stderr and "Traceback" not in bad.stderr
    assert "write KEY=V1,V2" in cli("tune", "stark-prime-ibd", "-m", "bm25", "-g", "k1", expect=1).stderr
    assert "one method at a time" in cli("tune", "stark-prime-ibd", "-m", "bm25,vss", "-g", "k1=1", expect=1).stderr
    assert "--metric 'hit@7'" in cli("tune", "stark-prime-ibd", "-m", "bm25", "-g", "k1=1", "--metric", "hit@7",
                                     expect=1).stderr
    assert conn.execute("select count(*) from stark.eval_run where skb_id = %s", (skb_id,)).fetchone()[0] == runs

    on_val = cli("tune", "stark-prime-ibd", "-m", "bm25", "-g", "b=0.75", "--split", "val", "--limit", "5", "-q")
    assert "choosing settings on 'val' makes its figures optimistic" in on_val.stderr
