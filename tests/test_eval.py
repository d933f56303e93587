"""`stark-pg eval` and `stark-pg score` end to end on the real slice (BM25: no model needed, fast)."""

from __future__ import annotations

import csv
import json

import pytest

from conftest import IBD
from loaders.bundle import BundleSource
from stark_pg.eval import query_sets
from stark_pg.eval.runner import run_method
from stark_pg.index.lexical import build_lexical
from stark_pg.retrieve import bm25, get_method
from stark_pg.skb.catalog import require_skb
from stark_pg.skb.store import load_skb

pytestmark = pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")


@pytest.fixture
def indexed(conn):
    load_skb(conn, BundleSource(IBD))
    build_lexical(conn, "stark-prime-ibd")
    return require_skb(conn, "stark-prime-ibd")


def test_eval_stores_runs_writes_reports_and_score_reproduces_it(cli, indexed, conn, tmp_path):
    out = tmp_path / "report"
    result = json.loads(cli("eval", "stark-prime-ibd", "--method", "bm25", "--split", "val", "--json",
                            "--out", out).stdout)
    run = result["methods"]["bm25"]
    assert run["queries"] == 171 and run["failed"] == 0
    # the reference README's bm25s figure is 0.334 MRR; our SQL BM25 must be within 0.02
    assert abs(run["metrics"]["mrr"] - 0.334) <= 0.02
    assert set(run["latency_ms"]) == {"p50", "p95", "mean"}
    for name in ("bm25/eval_results_val.csv", "bm25/eval_metrics_val.json", "bm25/run_val.trec", "qrels_val.txt",
                 "report.md", "report.png"):
        assert (out / name).is_file(), name
    with (out / "bm25" / "eval_results_val.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 171 and len(json.loads(rows[0]["pred_rank"])) <= 100
    assert "![metrics and latency](report.png)" in (out / "report.md").read_text()
    assert "Published figures on the full STaRK-Prime benchmark" in (out / "report.md").read_text()
    # per-query results are rows analysts can query
    stored = conn.execute("select count(*), count(*) filter (where answer_ranks[1] = 1) from stark.eval_result "
                          "where run_id = %s", (run["run_id"],)).fetchone()
    assert stored[0] == 171 and stored[1] > 0
    # scoring the TREC files written reproduces every metric except those that need ranks beyond stored_k
    scored = json.loads(cli("score", out / "bm25" / "run_val.trec", out / "qrels_val.txt", "--json").stdout)
    for name in ("hit@1", "hit@5", "hit@50", "recall@20", "recall@100", "ndcg@10"):
        assert scored["metrics"][name] == pytest.approx(run["metrics"][name]), name


def test_an_interrupted_run_continues(conn, indexed):
    chosen = query_sets.from_split(conn, indexed, "val")
    calls = []

    original = bm25.search

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt  # like Ctrl-C after five queries
        return original(*args, **kwargs)

    bm25.search = flaky
    try:
        with pytest.raises(KeyboardInterrupt):
            run_method(conn, indexed, "stark-prime-ibd", "bm25", bm25.Options(), chosen, resolve=get_method)
    finally:
        bm25.search = original
    outcome = run_method(conn, indexed, "stark-prime-ibd", "bm25", bm25.Options(), chosen, resolve=get_method)
    assert outcome.resumed_from == 5 and outcome.summary["queries"] == 171
    again = run_method(conn, indexed, "stark-prime-ibd", "bm25", bm25.Options(), chosen, resolve=get_method)
    assert again.run_id != outcome.run_id and again.resumed_from == 0      # a finished run is not reused


def test_an_evaluation_never_continues_a_run_another_one_is_continuing(conn, indexed):
    """Two identical evaluations at once: the second leaves the unfinished run the first holds alone and
    starts its own (they once both stored the same query in one run: a UniqueViolation); a run whose
    evaluation has ended (or died: its session's lock goes with it) is continued again."""
    import dataclasses

    import psycopg

    from stark_pg.resources import queries as sql

    val = query_sets.from_split(conn, indexed, "val")
    chosen = dataclasses.replace(val, queries=val.queries[:8])
    original, calls = bm25.search, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    bm25.search = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            run_method(conn, indexed, "stark-prime-ibd", "bm25", bm25.Options(), chosen, resolve=get_method)
    finally:
        bm25.search = original
    (unfinished,) = conn.execute("select run_id from stark.eval_run where finished_at is null").fetchone()
    with psycopg.connect(conn.info.dsn, autocommit=True) as other:       # another evaluation continuing it
        assert sql().try_claim_run(other, run_id=unfinished)
        beside = run_method(conn, indexed, "stark-prime-ibd", "bm25", bm25.Options(), chosen, resolve=get_method)
        assert beside.run_id != unfinished and beside.resumed_from == 0 and beside.summary["queries"] == 8
        assert conn.execute("select count(*) from stark.eval_result where run_id = %s", (unfinished,)).fetchone()[0] == 3
        assert sql().release_run(other, run_id=unfinished)     # now: a closed session's locks go a moment later
    resumed = run_method(conn, indexed, "stark-prime-ibd", "bm25", bm25.Options(), chosen, resolve=get_method)
    assert resumed.run_id == unfinished and resumed.resumed_from == 3 and resumed.summary["queries"] == 8


def test_a_failing_query_is_recorded_and_the_run_goes_on(conn, indexed):
    chosen = query_sets.from_split(conn, indexed, "val")
    original = bm25.search

    def failing(conn_, skb, query, k, options):
        if query == chosen.queries[0].body:
            raise RuntimeError("the LLM timed out")
        return original(conn_, skb, query, k, options)

    bm25.search = failing
    try:
        outcome = run_method(conn, indexed, "stark-prime-ibd", "bm25", bm25.Options(), chosen, resolve=get_method)
    finally:
        bm25.search = original
    assert outcome.summary["failed"] == 1 and outcome.summary["queries"] == 171
    error = conn.execute("select error from stark.eval_result where run_id = %s and error is not null",
                         (outcome.run_id,)).fetchone()[0]
    assert "the LLM timed out" in error


def test_queries_file_is_evaluated_without_loading_and_bad_answers_are_named(cli, indexed, tmp_path):
    good = tmp_path / "mine.csv"
    good.write_text('id,query,answer_ids\n1,drugs that target PPARG,"[16610, 16255]"\n'
                    '2,interleukin 10 receptor,[179]\n')
    result = json.loads(cli("eval", "stark-prime-ibd", "-m", "bm25", "--queries", good, "--split", "all",
                            "--json").stdout)
    assert result["methods"]["bm25"]["queries"] == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("id,query,answer_ids\n1,x,[1]\n")
    assert "bad.csv line 2" in cli("eval", "stark-prime-ibd", "-m", "bm25", "--queries", bad, expect=1).stderr


def test_unknown_methods_and_options_are_clear_errors(cli, indexed):
    assert "unknown method 'bm26'" in cli("eval", "stark-prime-ibd", "-m", "bm26", expect=1).stderr
    assert "none of bm25 has a setting 'fusion'" in cli("eval", "stark-prime-ibd", "-m", "bm25", "-o", "fusion=rrf",
                                                         expect=1).stderr


def test_a_held_out_share_is_seeded_disjoint_and_independent_of_order():
    from stark_pg.eval.query_sets import EvalQuery, QuerySet, hold_out

    queries = [EvalQuery(i, f"q{i}", [i]) for i in range(50)]
    rest, held = hold_out(QuerySet("split:train", "train", queries), 0.2, seed=3)
    assert len(held.queries) == 10 and len(rest.queries) == 40 and held.split == "holdout"
    assert {q.query_id for q in rest.queries}.isdisjoint(q.query_id for q in held.queries)
    again = hold_out(QuerySet("split:train", "train", list(reversed(queries))), 0.2, seed=3)[1]
    assert [q.query_id for q in again.queries] == [q.query_id for q in held.queries]
    other = hold_out(QuerySet("split:train", "train", queries), 0.2, seed=4)[1]
    assert [q.query_id for q in other.queries] != [q.query_id for q in held.queries]
    with pytest.raises(ValueError, match="between 0 and 1"):
        hold_out(QuerySet("split:train", "train", queries), 1.0)


def test_folds_partition_the_queries_whatever_their_order():
    from stark_pg.eval.query_sets import EvalQuery, QuerySet, fold, fold_of

    queries = [EvalQuery(i, f"q{i}", [i]) for i in range(23)]
    whole = QuerySet("split:train", "train", queries)
    insides = [fold(whole, k, 3)[1] for k in range(3)]
    ids = [q.query_id for part in insides for q in part.queries]
    assert sorted(ids) == list(range(23)) and sorted(len(p.queries) for p in insides) == [7, 8, 8]
    rest, inside = fold(whole, 1, 3)
    assert {q.query_id for q in rest.queries} == set(range(23)) - {q.query_id for q in inside.queries}
    again = fold(QuerySet("split:train", "train", list(reversed(queries))), 1, 3)[1]
    assert [q.query_id for q in again.queries] == [q.query_id for q in inside.queries]
    assert fold_of(whole, 3) == {q.query_id: k for k, part in enumerate(insides) for q in part.queries}
    with pytest.raises(ValueError, match="at least 2 folds"):
        fold(whole, 2, 2)


def test_a_k_or_depth_past_the_maximum_is_one_line(cli, indexed):
    from stark_pg.retrieve.results import K_MAX

    huge = cli("search", "stark-prime-ibd", "PPARG", "-m", "bm25", "-k", "1000000000", expect=1)
    assert huge.stderr.strip() == f"error: -k 1000000000: the number of results must be at most {K_MAX}"
    deep = cli("eval", "stark-prime-ibd", "-m", "bm25", "--depth", "1000000000", expect=1)
    assert deep.stderr.strip() == f"error: --depth 1000000000: the number of results must be at most {K_MAX}"
