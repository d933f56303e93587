"""`stark-pg compare`: paired significance tests over stored runs and TREC files, on the real slice.

The statistics come from scipy and statsmodels; these tests check that we feed them the right pairs
(significant where runs clearly differ, p = 1 where they agree), that the correction is applied, and
that a library's own metrics (ir-measures, i.e. trec_eval) agree with our STaRK metrics wherever the
two definitions coincide.
"""

from __future__ import annotations

import json

import ir_measures
import numpy as np
import psycopg
import pytest

from conftest import IBD, cli_runner
from loaders.bundle import BundleSource
from stark_pg.eval import query_sets
from stark_pg.eval.compare import compare
from stark_pg.eval.run_sources import CompareError, skb_qrels, trec_runs
from stark_pg.eval.runner import run_method
from stark_pg.index.lexical import build_lexical
from stark_pg.retrieve import bm25, get_method
from stark_pg.skb.store import load_skb

pytestmark = pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")
METRICS = ["hit@1", "hit@5", "recall@20", "mrr"]


def stored_run_ids(url: str) -> dict[str, int]:
    with psycopg.connect(url) as c:
        return {method: run_id for method, run_id in c.execute(
            "select method, max(run_id) from stark.eval_run group by method")}


def stored_rankings(url: str, run_id: int) -> list[tuple]:
    with psycopg.connect(url) as c:
        return c.execute("select query_id, ranked_ids, answer_ids, answer_ranks, metrics from stark.eval_result "
                         "where run_id = %s order by query_id", (run_id,)).fetchall()


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment written out, to check the library applied it."""
    order = np.argsort(p_values)
    adjusted, running = np.empty(len(p_values)), 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - step) * p_values[i]))
        adjusted[i] = running
    return adjusted.tolist()


def write_trec(path, rankings: dict[int, list[int]]) -> None:
    with path.open("w") as out:
        for qid, ranked in rankings.items():
            for rank, node in enumerate(ranked, start=1):
                out.write(f"{qid} Q0 {node} {rank} {len(ranked) - rank + 1} test\n")


def test_library_metrics_agree_with_ours_where_the_definitions_coincide(ibd_indexed_url):
    """trec_eval (through ir-measures) over each stored run's top 100 against our stored STaRK values:
    equal for every @k metric within the stored ranking, for rprecision and ndcg@10 (no ties: the runner
    scores rankings, not score groups) and, where the first answer is in the top 100, for mrr; beyond it
    ours credits the answer's rank up to the run's depth (1000), trec_eval's RR@100 gives 0."""
    pairs = {"hit@1": ir_measures.Success @ 1, "hit@5": ir_measures.Success @ 5,
             "hit@10": ir_measures.Success @ 10, "hit@50": ir_measures.Success @ 50,
             "recall@5": ir_measures.R @ 5, "recall@20": ir_measures.R @ 20, "recall@100": ir_measures.R @ 100,
             "rprecision": ir_measures.Rprec, "ndcg@10": ir_measures.nDCG @ 10}
    compared = 0
    for method, run_id in stored_run_ids(ibd_indexed_url).items():
        rows = [row for row in stored_rankings(ibd_indexed_url, run_id) if row[2]]
        qrels = [ir_measures.Qrel(str(q), str(a), 1) for q, _, answers, _, _ in rows for a in answers]
        run = [ir_measures.ScoredDoc(str(q), str(node), float(len(ranked) - i))
               for q, ranked, _, _, _ in rows for i, node in enumerate(ranked)]
        theirs = {}
        for m in ir_measures.iter_calc([*pairs.values(), ir_measures.RR @ 100, ir_measures.P @ 1], qrels, run):
            theirs.setdefault(m.query_id, {})[str(m.measure)] = m.value
        for q, ranked, answers, ranks, ours in rows:
            found = theirs[str(q)]
            for name, measure in pairs.items():
                if name == "rprecision" and len(answers) > len(ranked):
                    continue
                assert ours[name] == pytest.approx(found.get(str(measure), 0.0)), (method, q, name)
            assert ours["hit@1"] == pytest.approx(found.get("P@1", 0.0)), (method, q)   # one answer at rank 1
            first = min((r for r in ranks if r), default=None)
            if first is not None and first <= len(ranked):
                assert ours["mrr"] == pytest.approx(found.get("RR@100", 0.0)), (method, q)
            else:
                assert found.get("RR@100", 0.0) == 0 and ours["mrr"] <= 1 / (len(ranked) + 1)
            compared += 1
    assert compared >= 3 * 171


def test_stored_runs_cli_table_and_json(ibd_indexed_url):
    cli = cli_runner(ibd_indexed_url)
    runs = stored_run_ids(ibd_indexed_url)
    ids = [runs["bm25"], runs["vss"], runs["hybrid"]]
    result = json.loads(cli("compare", *map(str, ids), "--json").stdout)
    assert result["queries"] == 171 and result["baseline"] == f"bm25#{ids[0]}"
    assert result["test"] == "t" and result["correction"] == "holm" and result["family"] == 2 * len(METRICS)
    with psycopg.connect(ibd_indexed_url) as c:
        summaries = dict(c.execute("select run_id, summary from stark.eval_run where run_id = any(%s)", (ids,)))
    for run in result["runs"]:        # the means are the ones `stark-pg eval` stored: the same STaRK values
        for m in METRICS:
            assert run["means"][m] == pytest.approx(summaries[run["run_id"]]["metrics"][m])
    comparisons = result["comparisons"]
    assert [(c["run"], c["metric"]) for c in comparisons] == [(f"{m}#{runs[m]}", name) for m in ("vss", "hybrid")
                                                              for name in METRICS]
    raw = [c["p_value"] for c in comparisons]
    assert [c["p_adjusted"] for c in comparisons] == pytest.approx(holm(raw))
    assert all(c["p_adjusted"] >= c["p_value"] for c in comparisons)
    assert all(c["significant"] == (c["p_adjusted"] < 0.05) for c in comparisons)
    for c in comparisons:
        assert c["difference"] == pytest.approx(c["mean"] - c["baseline_mean"])
    # no correction: adjusted = raw; Bonferroni: raw times the family's size
    plain = json.loads(cli("compare", *map(str, ids), "--correction", "none", "--json").stdout)
    assert [c["p_adjusted"] for c in plain["comparisons"]] == pytest.approx(raw)
    bonferroni = json.loads(cli("compare", *map(str, ids), "--correction", "bonferroni", "--json").stdout)
    assert [c["p_adjusted"] for c in bonferroni["comparisons"]] == pytest.approx([min(1, 8 * p) for p in raw])
    # a chosen baseline, the randomization test and other metrics
    other = json.loads(cli("compare", *map(str, ids), "--baseline", str(ids[2]), "--test", "randomization",
                           "--permutations", "2000", "--metric", "mrr,ndcg@10", "--json").stdout)
    assert other["baseline"] == f"hybrid#{ids[2]}" and other["metrics"] == ["mrr", "ndcg@10"]
    assert {c["run"] for c in other["comparisons"]} == {f"bm25#{ids[0]}", f"vss#{ids[1]}"}
    assert all(1 / 2001 <= c["p_value"] <= 1 for c in other["comparisons"])
    # the table
    text = cli("compare", *map(str, ids)).stdout
    assert "stark-prime-ibd, split:val: 171 queries, baseline bm25#" in text
    assert "paired Student's t-test" in text and "Holm-Bonferroni over the 8 tests" in text
    for m in ("bm25", "vss", "hybrid"):
        assert f"{m}#{runs[m]}" in text
    assert f"{result['runs'][1]['means']['mrr']:.3f} {comparisons[3]['difference']:+.3f}" in text


def test_clearly_different_runs_are_significant_identical_ones_are_not(ibd_indexed_url, tmp_path):
    """TREC files from the stored bm25 run: the run itself, an exact copy, and the run with every answer
    removed from its ranking (clearly worse), against the SKB's val answers and a qrels file."""
    rows = stored_rankings(ibd_indexed_url, stored_run_ids(ibd_indexed_url)["bm25"])
    write_trec(tmp_path / "bm25.trec", {q: list(ranked) for q, ranked, *_ in rows})
    write_trec(tmp_path / "copy.trec", {q: list(ranked) for q, ranked, *_ in rows})
    write_trec(tmp_path / "broken.trec",
               {q: [n for n in ranked if n not in answers] for q, ranked, answers, *_ in rows})
    with psycopg.connect(ibd_indexed_url) as c:
        qrels = skb_qrels(c, "stark-prime-ibd", "val")
    files = [tmp_path / "bm25.trec", tmp_path / "copy.trec", tmp_path / "broken.trec"]
    runs = trec_runs(files, qrels, "val answers", METRICS)
    for test in ("t", "randomization", "wilcoxon"):
        result = compare(runs, METRICS, test=test, permutations=2000)
        by_run = {(c["run"], c["metric"]): c for c in result["comparisons"]}
        for m in METRICS:
            same, worse = by_run[("copy.trec", m)], by_run[("broken.trec", m)]
            assert same["p_value"] == 1 and same["p_adjusted"] == 1 and not same["significant"], (test, m)
            assert same["difference"] == 0 and same["better"] == same["worse"] == 0
            assert worse["significant"] and worse["difference"] < 0 and worse["better"] == 0, (test, m)
            assert worse["p_value"] < 0.001, (test, m)     # randomization: 1/2001, Holm's 8 tests make it 0.004
    # the CLI: the SKB's answers as qrels, or the qrels file stark-pg eval writes
    cli = cli_runner(ibd_indexed_url)
    from_skb = json.loads(cli("compare", *files, "--skb", "stark-prime-ibd", "--split", "val", "--json").stdout)
    assert from_skb["queries"] == 171 and from_skb["baseline"] == "bm25.trec"
    with (tmp_path / "qrels.txt").open("w") as out:
        for q, _, answers, *_ in rows:
            out.writelines(f"{q} 0 {a} 1\n" for a in answers)
    from_file = json.loads(cli("compare", *files, "--qrels", tmp_path / "qrels.txt", "--json").stdout)
    assert from_file["comparisons"] == from_skb["comparisons"]
    text = cli("compare", *files, "--qrels", tmp_path / "qrels.txt").stdout
    assert "broken.trec" in text and "†" in text


def test_runs_over_other_queries_and_bad_arguments_are_clear_errors(ibd_indexed_url, tmp_path):
    cli = cli_runner(ibd_indexed_url)
    runs = stored_run_ids(ibd_indexed_url)
    assert "no evaluation run 987654" in cli("compare", str(runs["bm25"]), "987654", expect=1).stderr
    assert "compare needs at least two runs" in cli("compare", str(runs["bm25"]), expect=1).stderr
    assert "--baseline '5x' is not one of the runs" in cli("compare", str(runs["bm25"]), str(runs["vss"]),
                                                          "--baseline", "5x", expect=1).stderr
    assert "unknown metrics ['hit@0', 'mr']" in cli("compare", str(runs["bm25"]), str(runs["vss"]),
                                                    "--metric", "hit@0,mr", expect=1).stderr
    assert "--test 'z'" in cli("compare", str(runs["bm25"]), str(runs["vss"]), "--test", "z", expect=1).stderr
    assert "run 'missing.trec' is neither a stored run id nor a file" in cli(
        "compare", "missing.trec", "other.trec", "--qrels", "q.txt", expect=1).stderr
    rows = stored_rankings(ibd_indexed_url, runs["bm25"])
    write_trec(tmp_path / "all.trec", {q: list(ranked) for q, ranked, *_ in rows})
    write_trec(tmp_path / "part.trec", {q: list(ranked) for q, ranked, *_ in rows[:100]})
    error = cli("compare", tmp_path / "all.trec", tmp_path / "part.trec", "--skb", "stark-prime-ibd",
                expect=1).stderr
    assert "all.trec and part.trec are not over the same queries: 71 only in all.trec (e.g." in error
    assert "0 only in part.trec" in error and len(error.strip().splitlines()) == 1
    assert "one qrels source" in cli("compare", tmp_path / "all.trec", tmp_path / "part.trec", expect=1).stderr
    assert "not both" in cli("compare", str(runs["bm25"]), tmp_path / "all.trec", expect=1).stderr
    (tmp_path / "bad.trec").write_text("1 Q0 5 1\n")
    assert "bad.trec line 1: expected 6" in cli("compare", tmp_path / "bad.trec", tmp_path / "all.trec",
                                                "--skb", "stark-prime-ibd", expect=1).stderr
    assert "no SKB named 'nope'" in cli("compare", tmp_path / "all.trec", tmp_path / "part.trec", "--skb", "nope",
                                expect=1).stderr
    write_trec(tmp_path / "elsewhere.trec", {999999999: [1, 2, 3]})
    with pytest.raises(CompareError, match="ranks none of the 171 judged queries of val"):
        with psycopg.connect(ibd_indexed_url) as c:
            trec_runs([tmp_path / "elsewhere.trec"], skb_qrels(c, "stark-prime-ibd", "val"), "val", METRICS)


def test_stored_runs_over_other_queries_or_answers_are_refused(cli, conn, tmp_path):
    """Two runs of one method on the first 20 val queries are identical (p = 1); one on the first 30, or
    on a query file giving other answers to the same ids, cannot be paired with them."""
    skb_id = load_skb(conn, BundleSource(IBD)).skb_id
    build_lexical(conn, "stark-prime-ibd")
    val = query_sets.from_split(conn, skb_id, "val")
    first20 = query_sets.QuerySet("split:val[:20]", "val", val.queries[:20])
    first30 = query_sets.QuerySet("split:val[:30]", "val", val.queries[:30])
    a = run_method(conn, skb_id, "stark-prime-ibd", "bm25", bm25.Options(), first20, resolve=get_method).run_id
    b = run_method(conn, skb_id, "stark-prime-ibd", "bm25", bm25.Options(), first20, resolve=get_method).run_id
    c = run_method(conn, skb_id, "stark-prime-ibd", "bm25", bm25.Options(), first30, resolve=get_method).run_id
    same = json.loads(cli("compare", str(a), str(b), "--json").stdout)
    assert all(x["p_value"] == 1 and not x["significant"] for x in same["comparisons"])
    error = cli("compare", str(a), str(c), expect=1).stderr
    assert f"bm25#{a} and bm25#{c} are not over the same queries: 0 only in bm25#{a}, 10 only in bm25#{c}" in error
    moved = query_sets.QuerySet("file:moved", "val", [query_sets.EvalQuery(q.query_id, q.body, q.answer_ids[:1] + [1])
                                                      for q in val.queries[:20]])
    d = run_method(conn, skb_id, "stark-prime-ibd", "bm25", bm25.Options(), moved, resolve=get_method).run_id
    assert f"other answers in bm25#{d} than in bm25#{a}" in cli("compare", str(a), str(d), expect=1).stderr
