"""The cross-encoder over fusion (issue 50): a tiny real training run from the MiniLM-L6 weights on a small
synthetic SKB with a real fusion model; the model is saved and recorded; `fusion-ce` re-orders fusion's
top N only and leaves the rest as fusion ranks it; weight 0 is fusion's ranking exactly; fusion ranks
each training question with it out of the question pool; the weight is 0 when the cross-encoder adds nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from stark_pg.db import connect
from stark_pg.eval.query_sets import EvalQuery, from_split
from stark_pg.models.cross_encoder import load_model, new_cross_encoder, predict, reorder, zscore
from stark_pg.models.fusion import FusionSettings
from stark_pg.options import OptionError
from stark_pg.progress import NullReporter
from stark_pg.retrieve import fusion, get_method
from stark_pg.skb.catalog import require_skb
from stark_pg.train.cross_encoder import (Ranked, TrainSettings, choose_weight, fold_parts, held_out_metrics,
                                          rank_with_fusion, train_cross_encoder)
from stark_pg.train.fusion import train_fusion

SKB = "syn-ce"
TINY = dict(limit=8, candidates=8, top=5, negatives=3, positives=1, max_length=64, folds=2, threads=1)


@pytest.fixture(scope="module")
def trained(server_url, template_db, tmp_path_factory):
    """A small indexed synthetic SKB, a quickly trained fusion model and a cross-encoder trained over it
    in seconds (8 learning questions, groups of 4 pairs of 64 tokens), its files in a temporary home."""
    from conftest import indexed_synthetic

    home = tmp_path_factory.mktemp("ce-home")
    patch = pytest.MonkeyPatch()
    patch.setenv("STARK_PG_HOME", str(home))
    try:
        with indexed_synthetic(server_url, template_db, "stark_ce", SKB, seed=13) as url:
            with connect(url) as conn:
                train_fusion(conn, SKB, FusionSettings(limit=40, rounds=[5, 15], folds=2, min_data_in_leaf=[5]))
                report = train_cross_encoder(conn, SKB, TrainSettings(**TINY))
            yield url, report, home
    finally:
        patch.undo()


def val_questions(conn, n: int = 6) -> list[str]:
    return [q.body for q in from_split(conn, require_skb(conn, SKB), "val").queries[:n]]


def test_the_model_is_saved_under_the_home_and_recorded_with_its_weight(trained):
    url, report, home = trained
    assert Path(report.path).is_relative_to(home / "models" / "cross-encoder")
    assert (Path(report.path) / "config.json").is_file()
    with connect(url) as conn:
        kind, base, path, settings, history, metrics = conn.execute(
            "select kind, base_model, path, settings, history, metrics from stark.trained_model t "
            "join stark.skb s using (skb_id) where s.name = %s and t.name = 'default'", (SKB,)).fetchone()
        assert (kind, base, path) == ("cross-encoder", "all-MiniLM-L6-v2", report.path)
        assert settings["weight"] == report.weight and settings["weight"] in settings["weights"]
        assert 0.0 in settings["weights"] and settings["top"] == 5 and settings["fusion"] == "default"
        assert settings["groups"] == report.groups > 0 and len(history) == 1
        assert set(metrics["holdout_mixed"]) == {"hit@1", "hit@5", "mrr"}
        # the chosen weight is the best held-out MRR of those tried
        tried = history[0]["holdout"]
        assert metrics["holdout_mixed"]["mrr"] == max(tried[f"{w:g}"]["mrr"] for w in settings["weights"])
        # the stored files are the trained weights: they score otherwise than the base model with a new head
        loaded = load_model(conn, require_skb(conn, SKB), SKB, "default")
        docs = ["an unrelated document", "another document about genes and diseases", "a third one"]
        question = val_questions(conn, 1)[0]
        trained_scores = predict(loaded.model, question, docs)
        again = predict(new_cross_encoder(report.path, 64), question, docs)
        assert np.allclose(trained_scores, again, atol=1e-5)
        assert np.isfinite(trained_scores).all()


def test_fusion_ce_reorders_only_fusions_top_n_and_keeps_the_rest_as_fusion_ranks(trained):
    url, _, _ = trained
    method = get_method("fusion-ce")
    changed = 0
    with connect(url) as conn:
        for question in val_questions(conn):
            base = fusion.search(conn, SKB, question, 15, fusion.Options())
            ranking = method.search(conn, SKB, question, 15, method.Options(top=5, weight=3.0))
            ids, base_ids = [h.node_id for h in ranking.hits], [h.node_id for h in base.hits]
            assert sorted(ids[:5]) == sorted(base_ids[:5]) and ids[5:] == base_ids[5:]
            assert [h.score for h in ranking.hits] == sorted((h.score for h in ranking.hits), reverse=True)
            # the top 5 are in the order of the mixed score computed from the trace's raw scores
            rows = ranking.trace["ce"]["scores"]
            assert [r[0] for r in rows] == base_ids[:5] and ranking.trace["weight"] == 3.0
            expected = [n for n, _ in reorder([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], 3.0)]
            assert ids[:5] == expected
            changed += ids[:5] != base_ids[:5]
    assert changed, "at weight 3 the cross-encoder never moved a result: it was not applied"


def test_weight_zero_is_fusions_ranking_exactly(trained):
    url, _, _ = trained
    method = get_method("fusion-ce")
    with connect(url) as conn:
        for question in val_questions(conn):
            base = fusion.search(conn, SKB, question, 12, fusion.Options())
            ranking = method.search(conn, SKB, question, 12, method.Options(top=10, weight=0.0))
            assert [h.node_id for h in ranking.hits] == [h.node_id for h in base.hits]


def test_fusion_ranks_each_training_question_out_of_the_pool_and_leaves_the_splits_as_they_were(trained):
    url, _, _ = trained
    with connect(url) as conn:
        skb_id = require_skb(conn, SKB)
        before = conn.execute("select split, count(*) from stark.query where skb_id = %s group by split "
                              "order by split", (skb_id,)).fetchall()
        questions = from_split(conn, skb_id, "train").queries[:6]
        apart = [q.query_id for q in from_split(conn, skb_id, "train").queries[6:10]]
        settings = TrainSettings(**TINY).checked()
        ranked = rank_with_fusion(conn, skb_id, SKB, questions, apart, settings, 2, NullReporter(), "test")
        after = conn.execute("select split, count(*) from stark.query where skb_id = %s group by split "
                             "order by split", (skb_id, )).fetchall()
        assert before == after
        # each question's ranking is fusion's with it, its part and the questions set apart out of the
        # training split, as a val question is ranked; in the pool it would find itself among its nearest
        # training questions
        part_of = {questions[int(i)].query_id: [questions[int(j)].query_id for j in part]
                   for part in fold_parts(len(questions), 2, settings.seed) for i in part}
        assert all(len(p) < len(questions) for p in part_of.values())
        out_differs = 0
        for r in ranked:
            with conn.transaction(force_rollback=True):
                conn.execute("update stark.query set split = 'elsewhere' where skb_id = %s and query_id = any(%s)",
                             (skb_id, [*part_of[r.query.query_id], *apart]))
                alone = fusion.search(conn, SKB, r.query.body, settings.candidates, fusion.Options())
            in_pool = fusion.search(conn, SKB, r.query.body, settings.candidates, fusion.Options())
            assert r.node_ids == [h.node_id for h in alone.hits]
            out_differs += [h.node_id for h in in_pool.hits] != r.node_ids
        assert out_differs, "no training question ranked otherwise out of the pool: the pool was not changed"


def test_the_weight_is_zero_when_the_cross_encoder_adds_nothing():
    """A constant cross-encoder (no information) ties fusion at every weight: 0 is chosen, and at 0 each
    question keeps fusion's order."""
    ranked = [Ranked(EvalQuery(1, "q", [12]), [10, 11, 12, 13], [3.0, 2.0, 1.0, 0.0]),
              Ranked(EvalQuery(2, "q", [20]), [20, 21, 22], [1.0, 0.5, 0.2])]
    flat = [np.zeros(3), np.zeros(3)]
    measured = held_out_metrics(ranked, flat, (0.0, 0.5, 1.0), top=3)
    assert measured["0"] == measured["0.5"] == measured["1"]
    assert choose_weight(measured, (0.0, 0.5, 1.0)) == 0.0
    # an informative one is chosen when it helps: it lifts question 1's answer from rank 3 to rank 1
    helpful = [np.array([0.0, 0.0, 5.0]), np.array([1.0, 0.0, 0.0])]
    measured = held_out_metrics(ranked, helpful, (0.0, 0.5, 1.0), top=3)
    assert choose_weight(measured, (0.0, 0.5, 1.0)) > 0 and measured["1"]["mrr"] > measured["0"]["mrr"]
    # z-scores: a constant becomes zeros, anything else mean 0 and spread 1
    assert zscore([2.0, 2.0]).tolist() == [0.0, 0.0]
    z = zscore([1.0, 2.0, 4.0])
    assert math.isclose(z.mean(), 0.0, abs_tol=1e-12) and math.isclose(z.std(), 1.0)


def test_options_are_checked():
    method = get_method("fusion-ce")
    with pytest.raises(OptionError):
        method.Options(top=0)
    with pytest.raises(OptionError):
        method.Options(weight=-1.0)
    with pytest.raises(ValueError, match="--top"):
        TrainSettings(top=30, candidates=20).checked()
    assert TrainSettings(weights=(0.5, 1.0)).checked().weights == (0.0, 0.5, 1.0)


def test_train_and_search_from_the_command_line(trained):
    from conftest import cli_runner

    url, _, _ = trained
    cli = cli_runner(url)     # the subprocess inherits the fixture's STARK_PG_HOME
    result = cli("train", "cross-encoder", SKB, "--name", "cli", "--limit", "4", "--candidates", "6", "--top", "4",
                 "--negatives", "2", "--positives", "1", "--max-length", "48", "--folds", "2", "--threads", "1",
                 "--weights", "0,1", "--json")
    report = json.loads(result.stdout)
    assert report["name"] == "cli" and report["weight"] in (0.0, 1.0) and report["top"] == 4
    with connect(url) as conn:
        question = val_questions(conn, 1)[0]
    result = cli("search", SKB, question, "-m", "fusion-ce", "-o", "name=cli", "-k", "8", "--json")
    found = json.loads(result.stdout)
    assert len(found["results"]) == 8 and found["trace"]["top"] == 4
