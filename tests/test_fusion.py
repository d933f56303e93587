"""Learned fusion (issue 19): features equal their SQL definitions, no query sees its own answers, the
compiled SQL equals LightGBM's own prediction, and training and search work end to end (CLI)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields

import numpy as np
import pytest

from stark_pg.db import connect
from stark_pg.embed import encode_query
from stark_pg.progress import NullReporter
from stark_pg.resources import queries as sql
from stark_pg.retrieve import MissingIndex, get_method
from stark_pg.retrieve.fusion import template
from stark_pg.models.fusion import FusionSettings, load, option, query_features, train_command
from stark_pg.train.fusion import MAX_LINK, prepare_training_split, train_fusion

SKB = "syn-fusion"
MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def trained(server_url, template_db):
    """A small indexed synthetic SKB with a quickly trained fusion model."""
    from conftest import indexed_synthetic

    with indexed_synthetic(server_url, template_db, "stark_fusion", SKB, seed=11) as url:
        with connect(url) as conn:
            report = train_fusion(conn, SKB, FusionSettings(limit=40, rounds=[5, 15], folds=2, min_data_in_leaf=[5]))
        yield url, report


def two_entity_question(conn, skb_id: int) -> str:
    """A question naming two nodes of one-word names that share a neighbour (for the hop1 family)."""
    a, b = conn.execute(
        "select a.name, b.name from stark.edge e1 join stark.edge e2 on e2.skb_id = e1.skb_id and e2.dst = e1.dst "
        "and e2.src > e1.src join stark.node a on a.skb_id = e1.skb_id and a.node_id = e1.src "
        "join stark.node b on b.skb_id = e2.skb_id and b.node_id = e2.src "
        "where e1.skb_id = %s and a.name !~ ' ' and b.name !~ ' ' order by e1.dst, e1.src, e2.src limit 1",
        (skb_id,)).fetchone()
    return f"Which nodes are linked to both {a} and {b}?"


def test_features_equal_their_sql_definitions_and_no_query_sees_its_own_answers(trained):
    url, _ = trained
    with connect(url) as conn:
        prepare_training_split(conn, SKB, MODEL)
        names = list(sql().fusion_feature_names(conn, skb=SKB, model=MODEL, trained_dense=False))
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        # a training question: its own row must not vote, nor give its answers
        query_id, body, answers = conn.execute(
            "select query_id, body, answer_ids from stark.query where skb_id = %s and split = 'train' "
            "order by query_id limit 1", (skb_id,)).fetchone()
        vector = encode_query(body)
        ids, X = query_features(conn, SKB, body, vector, FusionSettings(), MODEL)
        assert X.shape == (len(ids), len(names)) and len(ids) > 10
        col = {n: i for i, n in enumerate(names)}

        bm25 = dict(conn.execute("select node_id, score from stark.bm25_scores(%s, '*', %s)", (skb_id, body)))
        for i, node in enumerate(ids):
            assert X[i, col["document|lexical"]] == pytest.approx(bm25.get(node, 0.0), rel=1e-9, abs=1e-12)
        best = max(bm25.get(n, 0.0) for n in ids)
        assert X[:, col["document|lexical|norm"]] == pytest.approx(X[:, col["document|lexical"]] / best)

        votes = {t: s for t, s, _ in conn.execute(
            "select * from stark.answer_type_votes(%s, %s, '{train}', 10, %s, %s)", (SKB, vector, MODEL, body))}
        types = dict(conn.execute("select node_id, type from stark.node where skb_id = %s", (skb_id,)))
        for i, node in enumerate(ids):
            assert X[i, col["type_share"]] == pytest.approx(votes.get(types[node], 0.0))

        # knn_answer, recomputed in Python from the stored query vectors: the question's own text left out
        rows = conn.execute("select q.body, q.answer_ids, v.vec::text from stark.query q join stark.query_vector v "
                            "using (skb_id, query_id) where q.skb_id = %s and q.split = 'train' and v.model = %s",
                            (skb_id, MODEL)).fetchall()
        others = [(a, np.array(json.loads(v))) for b, a, v in rows if b != body]
        assert len(others) < len(rows)
        sims = sorted(((float(np.dot(vec, vector) / np.linalg.norm(vec) / np.linalg.norm(vector)), a)
                       for a, vec in others), key=lambda x: -x[0])[:10]
        expected: dict[int, float] = {}
        for sim, answer_ids in sims:
            for a in answer_ids:
                expected[a] = expected.get(a, 0.0) + sim / math.sqrt(len(answer_ids))
        nearest: dict[int, tuple[float, int]] = {}        # knn_best and knn_first: the nearest such question
        for rank, (sim, answer_ids) in enumerate(sims, start=1):
            for a in answer_ids:
                nearest.setdefault(a, (sim, rank))
        assert any(nearest.get(node, (0, 0))[1] > 1 for node in ids), "no candidate tests the rank"
        for i, node in enumerate(ids):
            assert X[i, col["knn_answer"]] == pytest.approx(expected.get(node, 0.0), abs=1e-5)
            sim, rank = nearest.get(node, (0.0, math.inf))
            assert X[i, col["knn_best"]] == pytest.approx(sim, abs=1e-5)
            assert X[i, col["knn_first"]] == pytest.approx(1 / rank)

        # linked and the hop1 family: the best name matches, weighted by their share of the best match, and
        # the distinct ones one hop from each candidate; also for a question naming two nodes with a
        # common neighbour, so that some candidate reaches two of them
        def check_links(body: str, ids: list[int], X: np.ndarray) -> tuple[dict, int]:
            """The question's link weights, and the most linked entities a candidate reaches."""
            linked = conn.execute("select node_id, score from stark.bm25_scores(%s, 'name', %s) "
                                  "order by score desc, node_id limit 5", (skb_id, body)).fetchall()
            weight = {n: s / linked[0][1] for n, s in linked}
            near: dict[int, set[int]] = {}           # candidate -> the linked entities one hop away
            for src, dst in conn.execute("select src, dst from stark.edge where skb_id = %s and src = any(%s)",
                                         (skb_id, list(weight))):
                near.setdefault(dst, set()).add(src)
            for i, node in enumerate(ids):
                reached = sorted((weight[e] for e in near.get(node, ())), reverse=True)
                assert X[i, col["linked"]] == pytest.approx(weight.get(node, 0.0))
                assert X[i, col["hop1"]] == pytest.approx(reached[0] if reached else 0.0)
                assert X[i, col["hop1_sum"]] == pytest.approx(sum(reached))
                assert X[i, col["hop1_second"]] == pytest.approx(reached[1] if len(reached) > 1 else 0.0)
                assert X[i, col["hop1_count"]] == len(reached)
            return weight, max((len(near.get(node, ())) for node in ids), default=0)

        weight, _ = check_links(body, ids, X)
        two = two_entity_question(conn, skb_id)
        everything = FusionSettings(pool=100_000)          # every node a candidate, the common neighbour too
        assert check_links(two, *query_features(conn, SKB, two, encode_query(two), everything, MODEL))[1] >= 2

        # ent_answer and ent_best: the other training questions (not the same text) whose own best name
        # matches share an entity with this question's, weighted by the largest product of the two weights
        ent: dict[int, float] = {}
        ent_best: dict[int, float] = {}
        for other, answer_ids in conn.execute("select body, answer_ids from stark.query where skb_id = %s "
                                              "and split = 'train' and body <> %s", (skb_id, body)):
            matches = conn.execute("select node_id, score from stark.bm25_scores(%s, 'name', %s) "
                                   "order by score desc, node_id limit 5", (skb_id, other)).fetchall()
            shared = [weight[n] * s / matches[0][1] for n, s in matches if n in weight]
            for a in answer_ids if shared else []:
                ent[a] = ent.get(a, 0.0) + max(shared) / math.sqrt(len(answer_ids))
                ent_best[a] = max(ent_best.get(a, 0.0), max(shared))
        assert any(ent.get(node) for node in ids), "no candidate tests ent_answer"
        for i, node in enumerate(ids):
            assert X[i, col["ent_answer"]] == pytest.approx(ent.get(node, 0.0), abs=1e-9)
            assert X[i, col["ent_best"]] == pytest.approx(ent_best.get(node, 0.0), abs=1e-9)


def test_each_training_questions_name_matches_are_stored_and_follow_its_text(trained):
    """stark.query_link (what ent_answer and ent_best read): the 20 best name matches of each training
    question, as shares of the best; a question whose text changed is linked again, and a second call
    with nothing changed adds nothing."""
    url, _ = trained
    with connect(url) as conn, conn.transaction(force_rollback=True):
        prepare_training_split(conn, SKB, MODEL)
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        query_id, body = conn.execute(
            "select q.query_id, q.body from stark.query q where q.skb_id = %s and q.split = 'train' order by "
            "(select count(*) from stark.query_link l where l.skb_id = q.skb_id and l.query_id = q.query_id) desc, "
            "q.query_id limit 1", (skb_id,)).fetchone()

        def stored():
            return conn.execute("select node_id, weight from stark.query_link where skb_id = %s and query_id = %s "
                                "and body_md5 = md5(%s) order by rank", (skb_id, query_id, body)).fetchall()

        def expected():
            matches = conn.execute("select node_id, score from stark.bm25_scores(%s, 'name', %s) "
                                   "order by score desc, node_id limit %s", (skb_id, body, MAX_LINK)).fetchall()
            return [(n, s / matches[0][1]) for n, s in matches]

        def same(rows, wanted):
            return [n for n, _ in rows] == [n for n, _ in wanted] and \
                [w for _, w in rows] == pytest.approx([w for _, w in wanted])

        assert same(stored(), expected()) and len(stored()) > 1
        assert sql().link_queries(conn, skb=SKB, split="train", depth=MAX_LINK) == 0
        other = conn.execute("select name from stark.node where skb_id = %s order by node_id desc limit 1",
                             (skb_id,)).fetchone()[0]
        body = f"which genes interact with {other}"
        conn.execute("update stark.query set body = %s where skb_id = %s and query_id = %s", (body, skb_id, query_id))
        assert sql().link_queries(conn, skb=SKB, split="train", depth=MAX_LINK) == len(expected()) > 0
        assert same(stored(), expected())
        assert conn.execute("select count(*) from stark.query_link where skb_id = %s and query_id = %s",
                            (skb_id, query_id)).fetchone()[0] == len(expected())


def test_the_sql_score_equals_lightgbms_prediction_and_search_ranks_by_it(trained):
    url, report = trained
    assert {(row["leaves"], row["min_data_in_leaf"], row["rounds"]) for row in report["cv"]} == {
        (leaves, 5, rounds) for leaves in (7, 15) for rounds in (5, 15)}
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        model = load(conn, skb_id, SKB, "default")
        body = conn.execute("select body from stark.query where skb_id = %s and split = 'val' order by query_id "
                            "limit 1", (skb_id,)).fetchone()[0]
        ids, X = query_features(conn, SKB, body, encode_query(body), FusionSettings(), MODEL)
        predicted = model.predict(X)
        assert np.ptp(predicted) > 0, "a model that scores every candidate alike tests nothing"
        in_sql = [conn.execute(template("score_one", model), {"f": list(map(float, row))}).fetchone()[0] for row in X]
        assert in_sql == pytest.approx(list(predicted), rel=1e-9, abs=1e-9)
        ranking = get_method("fusion").search(conn, SKB, body, 10)
        # search orders by the SQL's score, then node id: LightGBM's sum can differ from it in the last bit
        # (asserted equal to 1e-9 above), which would reorder candidates whose scores tie
        expected = sorted(range(len(ids)), key=lambda i: (-in_sql[i], ids[i]))[:10]
        assert [h.node_id for h in ranking.hits] == [ids[i] for i in expected]
        assert [h.score for h in ranking.hits] == pytest.approx([predicted[i] for i in expected], rel=1e-9, abs=1e-9)


def test_a_model_is_read_once_per_version_of_its_row(trained):
    """Search reads a stored model once (its row is about a megabyte on the slice) and again only when the
    row changed: an update in a transaction is seen at once, and after the rollback the model read
    before is the one in use again."""
    url, _ = trained
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        first = load(conn, skb_id, SKB, "default")
        assert load(conn, skb_id, SKB, "default") is first
        with conn.transaction(force_rollback=True):
            conn.execute("update stark.fusion_model set metrics = '{\"edited\": 1}' where skb_id = %s "
                         "and name = 'default'", (skb_id,))
            edited = load(conn, skb_id, SKB, "default")
            assert edited.metrics == {"edited": 1} and load(conn, skb_id, SKB, "default") is edited
            conn.execute("update stark.fusion_model set metrics = '{\"edited\": 2}' where skb_id = %s "
                         "and name = 'default'", (skb_id,))           # the same transaction writes again
            assert load(conn, skb_id, SKB, "default").metrics == {"edited": 2}
        assert load(conn, skb_id, SKB, "default") is first and first.metrics != {"edited": 1}
        with pytest.raises(MissingIndex, match=r"no fusion model 'nope' for SKB 'syn-fusion' \(trained: .*default"):
            load(conn, skb_id, SKB, "nope")


def test_cross_validation_chooses_the_trees_size_with_the_rounds_and_fits_with_its_choice(trained):
    """`--leaves 7,15` (the default) and `--min-data-in-leaf`: every combination with every number of
    rounds is scored by cross-validation, the best MRR is chosen (ties to the simpler), and the stored
    models were fitted with exactly that choice."""
    url, report = trained
    best = max(report["cv"], key=lambda row: row["mrr"])
    chosen = {key: report[f"chosen_{key}"] for key in ("leaves", "min_data_in_leaf", "rounds")}
    assert best["mrr"] == next(row["mrr"] for row in report["cv"] if all(row[k] == v for k, v in chosen.items()))
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        model = load(conn, skb_id, SKB, "default")
        assert model.metrics["cv"] == report["cv"] and model.settings["chosen_leaves"] == chosen["leaves"]
        for booster in model.boosters():
            text = booster.model_to_string()
            assert f"[num_leaves: {chosen['leaves']}]" in text and "[min_data_in_leaf: 5]" in text
            assert booster.num_trees() == chosen["rounds"]
        # one value each: no choice, and the model is fitted with it
        two = train_fusion(conn, SKB, FusionSettings(name="two", limit=40, rounds=[5], folds=2, leaves=[2],
                                                     min_data_in_leaf=[5], bag=1))
        assert [(row["leaves"], row["rounds"]) for row in two["cv"]] == [(2, 5)]
        trees = load(conn, skb_id, SKB, "two").boosters()[0].dump_model()["tree_info"]
        assert max(t["num_leaves"] for t in trees) == 2
        with pytest.raises(ValueError, match="leaves must be at least 2"):
            train_fusion(conn, SKB, FusionSettings(name="none", limit=40, leaves=[1, 7]))
        with pytest.raises(ValueError, match=r"link \(--link\) must be between 1 and 20"):
            train_fusion(conn, SKB, FusionSettings(name="none", limit=40, link=MAX_LINK + 1))


def test_a_bag_scores_by_its_models_mean_in_sql_and_in_its_explanation(trained):
    """A bag (the default, --bag 3): three models with consecutive seeds, stored each, the first the very
    model --bag 1 fits; the SQL equals their mean prediction, the explanation's contributions add up to
    it, and a retrain command repeats --bag when it is not the default."""
    url, report = trained
    assert report["bag"] == FusionSettings().bag == 3
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        bag = load(conn, skb_id, SKB, "default")
        train_fusion(conn, SKB, FusionSettings(name="one", limit=40, rounds=[5, 15], folds=2, min_data_in_leaf=[5],
                                               bag=1))
        one = load(conn, skb_id, SKB, "one")
        assert len(bag.booster_texts) == 3 and one.booster_texts == bag.booster_texts[:1]
        assert bag.score_sql.endswith(" / 3::float8)") and "/ 1::float8" not in one.score_sql
        body = conn.execute("select body from stark.query where skb_id = %s and split = 'val' order by query_id "
                            "limit 1 offset 1", (skb_id,)).fetchone()[0]
        ids, X = query_features(conn, SKB, body, encode_query(body), FusionSettings(), MODEL)
        each = [b.predict(X) for b in bag.boosters()]
        assert min(np.abs(each[0] - e).max() for e in each[1:]) > 0, "the seeds fitted the same model"
        assert list(bag.predict(X)) == pytest.approx(list(np.mean(each, axis=0)), rel=1e-12)
        in_sql = [conn.execute(template("score_one", bag), {"f": list(map(float, row))}).fetchone()[0] for row in X]
        assert in_sql == pytest.approx(list(bag.predict(X)), rel=1e-9, abs=1e-9)
        assert bag.contributions(X).sum(axis=1) == pytest.approx(list(bag.predict(X)), rel=1e-9, abs=1e-9)

        options = get_method("fusion").Options(explain=True)
        ranking = get_method("fusion").search(conn, SKB, body, 5, options)
        predicted = bag.predict(X)
        assert [h.node_id for h in ranking.hits] == [ids[i] for i in sorted(range(len(ids)),
                                                                             key=lambda i: (-predicted[i], ids[i]))[:5]]
        assert ranking.trace["bag"] == 3
        # the ranking statement is planned generically (retrieve.fusion.generic_plan); the caller's setting stays
        # (inside the caller's transaction too, where it runs in a savepoint that a SET LOCAL outlives)
        conn.execute("set plan_cache_mode = force_custom_plan")
        with conn.transaction(force_rollback=True):
            for _ in range(6):                     # psycopg prepares the statement on its fifth run
                assert get_method("fusion").search(conn, SKB, body, 5).hits == ranking.hits
            assert conn.execute("show plan_cache_mode").fetchone()[0] == "force_custom_plan"
        assert conn.execute("show plan_cache_mode").fetchone()[0] == "force_custom_plan"
        conn.execute("reset plan_cache_mode")
        top = ranking.hits[0].node_id
        shown = ranking.trace["contributions"][str(top)]
        assert shown["(bias)"] == pytest.approx(bag.contributions(X[[ids.index(top)]])[0][-1], abs=1e-4)
        with pytest.raises(ValueError, match="bag must be at least 1"):
            train_fusion(conn, SKB, FusionSettings(name="none", limit=40, bag=0))
        assert train_command(SKB, one.settings | {"name": "one"}) == (
            "stark-pg train fusion syn-fusion --name one --rounds 5,15 --folds 2 --min-data-in-leaf 5 --bag 1 --limit 40")


def test_repeated_cross_validation_holds_each_question_out_once_per_repeat(trained):
    """`--repeats N`: cross-validation over N seeded draws of the folds, averaged. Each draw partitions the
    questions, the first is the draw a single cross-validation makes, and every question is scored once
    per repeat (a second draw that repeated the first would leave the figures unchanged)."""
    from stark_pg.train.fusion import cross_validation_folds

    drawn = list(cross_validation_folds(20, FusionSettings(folds=2, repeats=3)))
    assert [(repeat, k) for repeat, k, _ in drawn] == [(r, k) for r in range(3) for k in range(2)]
    for r in range(3):
        assert sorted(np.concatenate([held for repeat, _, held in drawn if repeat == r]).tolist()) == list(range(20))
    single = np.array_split(np.random.default_rng(1).permutation(20), 2)
    assert all(np.array_equal(a, b) for a, b in zip([held for repeat, _, held in drawn if repeat == 0], single))
    assert len({tuple(sorted(drawn[2 * r][2].tolist())) for r in range(3)}) == 3
    url, _ = trained
    with connect(url) as conn:
        settings = dict(limit=20, rounds=[5, 15], folds=2, leaves=[7], min_data_in_leaf=[5], bag=1)
        once = train_fusion(conn, SKB, FusionSettings(name="once", **settings))
        twice = train_fusion(conn, SKB, FusionSettings(name="twice", repeats=2, **settings))
        with pytest.raises(ValueError, match="repeats"):
            train_fusion(conn, SKB, FusionSettings(name="none", repeats=0, **settings))
    assert {row["scored"] for row in once["cv"]} == {20} and {row["scored"] for row in twice["cv"]} == {40}
    assert [row["mrr"] for row in twice["cv"]] != [row["mrr"] for row in once["cv"]]
    assert twice["repeats"] == 2 and "--repeats 2" in train_command(SKB, {"repeats": 2})


def test_cross_validation_holds_each_fold_out_of_the_training_split(trained):
    """A fold's questions are scored with features computed as if they were new: with them out of the
    training split (hold_out), a held question's features equal those it gets once the whole fold is
    deleted, and differ from those it gets with the fold in train (so the check can fail). Training
    leaves every question's split as it was."""
    from stark_pg.train.fusion import hold_out

    url, _ = trained
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        splits = conn.execute("select query_id, split from stark.query where skb_id = %s order by query_id",
                              (skb_id,)).fetchall()
        rows = conn.execute("select query_id, body from stark.query where skb_id = %s and split = 'train' "
                            "order by query_id limit 20", (skb_id,)).fetchall()
        fold = [r[0] for r in rows]

        def features(body):
            return query_features(conn, SKB, body, encode_query(body), FusionSettings(), MODEL)

        changed = 0
        for query_id, body in rows[:4]:
            ids, X = features(body)
            with conn.transaction(force_rollback=True):
                hold_out(conn, skb_id, fold)
                held_ids, held = features(body)
            with conn.transaction(force_rollback=True):
                conn.execute("delete from stark.query where skb_id = %s and query_id = any(%s)", (skb_id, fold))
                gone_ids, gone = features(body)
            assert held_ids == gone_ids and np.array_equal(held, gone)
            changed += ids != held_ids or not np.array_equal(X, held)
        assert changed, "holding the fold out changed no question's features: the check tests nothing"
        train_fusion(conn, SKB, FusionSettings(name="cv", limit=20, rounds=[5], folds=2, min_data_in_leaf=[5], bag=1))
        assert conn.execute("select query_id, split from stark.query where skb_id = %s order by query_id",
                            (skb_id,)).fetchall() == splits


def test_a_model_trained_before_the_last_features_still_ranks_and_a_changed_one_is_refused(trained):
    """New features are appended: a model whose features are the first of those computed ranks as before,
    by its own prediction (its trees read their old places; here trees fitted on all but the last three
    features, as a model trained before hop1_sum was); one whose features no longer match is refused with
    the command that retrains it."""
    import lightgbm

    from stark_pg.models.fusion import FusionModel, compile_sql, save
    from stark_pg.train.fusion import ranked_by

    url, _ = trained
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        model = load(conn, skb_id, SKB, "default")
        names = list(sql().fusion_feature_names(conn, skb=SKB, model=MODEL, trained_dense=False))
        assert model.features == names and names[-3:] == ["hop1_sum", "hop1_second", "hop1_count"]
        kept = len(names) - 3
        questions = conn.execute("select body, answer_ids from stark.query where skb_id = %s and split = 'train' "
                                 "order by query_id limit 12", (skb_id,)).fetchall()
        rows = [(query_features(conn, SKB, b, encode_query(b), FusionSettings(), MODEL), a) for b, a in questions]
        data = lightgbm.Dataset(np.vstack([X[:, :kept] for (_, X), _ in rows]),
                                np.concatenate([np.isin(ids, a).astype(float) for (ids, _), a in rows]),
                                group=[len(ids) for (ids, _), _ in rows])
        booster = lightgbm.train({"objective": "lambdarank", "min_data_in_leaf": 5, "verbose": -1}, data, 5)
        with conn.transaction(force_rollback=True):
            save(conn, skb_id, FusionModel("older", MODEL, names[:kept], [booster.model_to_string()],
                                           compile_sql([booster]), model.settings | {"name": "older"}, {}, {}))
            body = "which drugs target genes"
            ids, X = query_features(conn, SKB, body, encode_query(body), FusionSettings(), MODEL)
            predicted = booster.predict(X[:, :kept])
            assert np.ptp(predicted) > 0, "a model that scores every candidate alike tests nothing"
            hits = get_method("fusion").search(conn, SKB, body, 5, get_method("fusion").Options(name="older")).hits
            assert [h.node_id for h in hits] == ranked_by(ids, predicted)[:5]
            conn.execute("update stark.fusion_model set features[1] = 'no such feature' "
                         "where skb_id = %s and name = 'older'", (skb_id,))
            with pytest.raises(MissingIndex, match=r"feature 1 \(no such feature\).*`stark-pg train fusion "
                                                    r"syn-fusion --name older --rounds 5,15 --folds 2 "
                                                    r"--min-data-in-leaf 5 --limit 40`"):
                load(conn, skb_id, SKB, "older")


def test_the_retrain_command_repeats_every_option_that_is_not_the_default():
    """The command a refused model's error names must train the same features again: a model trained with
    --dense has trained_dense, and a retrain without --dense would lack it."""
    settings = asdict(FusionSettings(name="xf", dense="dense-xf", rounds=[100], extra_train="../qa dir"))
    assert train_command("my skb", settings) == ("stark-pg train fusion 'my skb' --name xf --rounds 100 "
                                                 "--dense dense-xf --extra-train '../qa dir'")
    assert train_command("s", asdict(FusionSettings()) | {"chosen_rounds": 100}) == "stark-pg train fusion s"
    # a model stored before the tree settings were lists had one value each
    assert train_command("s", {"leaves": 15, "min_data_in_leaf": 20}) == "stark-pg train fusion s --leaves 15"
    from stark_pg.cli.train import app
    from typer.main import get_command

    command = get_command(app).commands["fusion"]
    flags = {flag for param in command.params for flag in param.opts}
    assert {option(f.name) for f in fields(FusionSettings)} <= flags


def test_train_and_search_from_the_command_line(trained):
    from conftest import cli_runner

    url, _ = trained
    cli = cli_runner(url)
    done = cli("train", "fusion", SKB, "--name", "cli", "--limit", "30", "--rounds", "5", "--folds", "2", "--json", "-q")
    report = json.loads(done.stdout)
    assert report["name"] == "cli" and report["queries"] == 30 and report["features"] > 10
    done = cli("search", SKB, "which drugs target genes", "-m", "fusion", "-o", "name=cli", "--explain")
    assert "feature contributions" in done.stdout
    bad = cli("search", SKB, "drugs", "-m", "fusion", "-o", "name=nosuch", expect=1)
    assert "run `stark-pg train fusion" in bad.stderr and "Traceback" not in bad.stderr
    bad = cli("train", "fusion", SKB, "--bag", "0", "-q", expect=2)
    assert "--bag" in bad.stderr and "Traceback" not in bad.stderr
    for option, value in (("--leaves", "1,7"), ("--leaves", "7,x"), ("--min-data-in-leaf", "0"), ("--rounds", ""),
                          ("--repeats", "0")):
        bad = cli("train", "fusion", SKB, option, value, "-q", expect=2)
        assert option in bad.stderr and "Traceback" not in bad.stderr


def test_trained_dense_is_cross_fitted_and_equals_its_cosine(trained):
    """`--dense`: each training question is scored by the fold model trained without it, a new question
    by the mean of all fold models; the feature equals that cosine recomputed from the stored vectors."""
    from stark_pg.eval.query_sets import fold, fold_of, from_split
    from stark_pg.train.dense import FOLD_SEED, DenseSettings, train_dense
    from stark_pg.models.fusion import fold_models, search_dense
    from stark_pg.train.fusion import check_fold_models, cross_fitted

    url, _ = trained
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        with pytest.raises(ValueError, match=r"train dense syn-fusion --name xf-fold0of2 --fold 0/2"):
            check_fold_models(conn, skb_id, SKB, "xf", 2)
        for k in range(2):
            train_dense(conn, SKB, DenseSettings(name=f"xf-fold{k}of2", fold=(k, 2), limit=16, epochs=1, negatives=2,
                                                 eval_pool=5, lr=1e-4, batch_size=8))
        models = check_fold_models(conn, skb_id, SKB, "xf", 2)
        assert models == fold_models("xf", 2) == ["xf-fold0of2", "xf-fold1of2"]

        train = from_split(conn, skb_id, "train")
        where = fold_of(train, 2, seed=FOLD_SEED)
        queries = train.queries[:6]
        fitted = cross_fitted(conn, skb_id, queries, "xf", 2)
        names = list(sql().fusion_feature_names(conn, skb=SKB, model=MODEL, trained_dense=True))
        assert names[-8:-3] == ["trained_dense", "knn_best", "knn_first", "ent_answer", "ent_best"]   # newer after it
        dense_col = names.index("trained_dense")
        for q, f in zip(queries, fitted):
            (model,) = f.models
            k = models.index(model)
            assert k == where[q.query_id]
            trained_on = {x.query_id for x in fold(train, k, 2, seed=FOLD_SEED)[0].queries}
            assert q.query_id not in trained_on, "a question scored by a model that was trained on it"

        def cosines(node_ids, model, qvec):
            out = {}
            for node in node_ids:
                doc = conn.execute("select stark.node_vector(%s, %s, %s)::text", (SKB, node, model)).fetchone()[0]
                vec = np.array(json.loads(doc))
                out[node] = float(vec @ qvec / np.linalg.norm(vec) / np.linalg.norm(qvec))
            return out

        q, f = queries[0], fitted[0]
        ids, X = query_features(conn, SKB, q.body, encode_query(q.body), FusionSettings(), MODEL, f)
        assert X.shape[1] == len(names)
        expected = cosines(ids, f.models[0], f.vectors[0])
        assert list(X[:, dense_col]) == pytest.approx([expected[n] for n in ids], abs=1e-5)

        new = search_dense("which drugs target genes", models)
        ids, X = query_features(conn, SKB, "which drugs target genes", encode_query("which drugs target genes"),
                                FusionSettings(), MODEL, new)
        each = [cosines(ids, m, v) for m, v in zip(new.models, new.vectors)]
        assert list(X[:, dense_col]) == pytest.approx([(each[0][n] + each[1][n]) / 2 for n in ids], abs=1e-5)

        report = train_fusion(conn, SKB, FusionSettings(name="xf", limit=30, rounds=[5], folds=2, min_data_in_leaf=[5],
                                                        dense="xf"))
        assert report["features"] == len(names)
        ranking = get_method("fusion").search(conn, SKB, "which drugs target genes", 5,
                                              get_method("fusion").Options(name="xf"))
        assert len(ranking.hits) == 5 and ranking.trace["dense_models"] == models

        with conn.transaction(force_rollback=True):
            conn.execute("update stark.trained_model set settings = jsonb_set(settings, '{fold}', '[1, 2]') "
                         "where skb_id = %s and kind = 'dense' and name = 'xf-fold0of2'", (skb_id,))
            with pytest.raises(ValueError, match="was not trained without fold 0 of 2"):
                check_fold_models(conn, skb_id, SKB, "xf", 2)


def _write_qa(folder, rows, splits):
    """A STaRK QA directory as published: stark_qa.csv (id,query,answer_ids) and split/<name>.index."""
    import csv

    (folder / "split").mkdir(parents=True)
    with (folder / "stark_qa.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "query", "answer_ids"])
        for query_id, body, answers in rows:
            writer.writerow([query_id, body, str(list(answers))])
    for split, ids in splits.items():
        (folder / "split" / f"{split}.index").write_text("".join(f"{i}\n" for i in ids))
    return folder


def test_extra_training_questions_are_fitted_on_and_never_scored(trained, tmp_path):
    """`--extra-train`: a QA directory's training questions that the SKB lacks join the fit with their answers
    cut to the SKB's nodes; its val questions, the SKB's own questions and questions with no answer among its
    nodes never do, and cross-validation still scores the SKB's own questions only."""
    from stark_pg.train.extra_queries import read_extra_training_queries

    url, _ = trained
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        own = conn.execute("select query_id, body, answer_ids from stark.query where skb_id = %s and split = 'train' "
                           "order by query_id limit 12", (skb_id,)).fetchall()
        outside = 1 + conn.execute("select max(node_id) from stark.node where skb_id = %s", (skb_id,)).fetchone()[0]
        new = [(10_000_000 + i, f"{body} (asked again)", answers + [outside]) for i, (_, body, answers) in enumerate(own)]
        rows = new + [(20_000_001, "held out by the source", own[0][2]),     # its val split: never taken
                      (own[1][0], own[1][1], own[1][2]),                      # already in the SKB
                      (20_000_002, "nothing inside the SKB", [outside])]
        qa = _write_qa(tmp_path / "qa", rows, {"train": [r[0] for r in new] + [own[1][0], 20_000_002],
                                               "val": [20_000_001]})

        picked = read_extra_training_queries(conn, skb_id, qa)
        assert [q.query_id for q in picked.queries] == [r[0] for r in new]
        assert all(q.answer_ids == list(r[2][:-1]) and q.split == "train" for q, r in zip(picked.queries, new))
        assert picked.report == {"read": 15, "other_split": 1, "already_in_skb": 1, "no_answer_in_skb": 1,
                                 "too_few_inside": 0, "kept": 12, "answers_kept": sum(len(r[2]) for r in own),
                                 "answers_outside": 12}
        # each new question has one answer outside: n of n + 1 inside
        assert read_extra_training_queries(conn, skb_id, qa, min_share=1.0).report["too_few_inside"] == 12
        most = read_extra_training_queries(conn, skb_id, qa, min_share=0.75)
        assert [q.query_id for q in most.queries] == [r[0] for r in new if len(r[2]) - 1 >= 0.75 * len(r[2])]

        settings = dict(limit=20, rounds=[5], folds=2, min_data_in_leaf=[5])
        plain = train_fusion(conn, SKB, FusionSettings(name="plain", **settings))
        extra = train_fusion(conn, SKB, FusionSettings(name="extra", extra_train=str(qa), **settings))
        assert plain["extra_queries"] == 0 and extra["extra_queries"] == 12 and extra["queries"] == 20
        assert extra["extra_train"]["kept"] == 12
        stored = load(conn, skb_id, SKB, "extra")
        assert stored.settings["extra_queries"] == 12 and stored.settings["extra_train"] == str(qa)
        assert stored.booster_texts != load(conn, skb_id, SKB, "plain").booster_texts     # the extra rows were fitted
        assert conn.execute("select count(*) from stark.query where skb_id = %s and query_id >= 10000000",
                            (skb_id,)).fetchone()[0] == 0                             # read, never stored

        (qa / "split" / "train.index").unlink()
        (qa / "split" / "val.index").unlink()
        (qa / "split").rmdir()
        with pytest.raises(ValueError, match="no split/.*index files"):
            read_extra_training_queries(conn, skb_id, qa)

    from conftest import cli_runner

    bad = cli_runner(url)("train", "fusion", SKB, "--extra-train", str(tmp_path / "nowhere"), "-q", expect=1)
    assert "nowhere" in bad.stderr and "stark_qa.csv" in bad.stderr and "Traceback" not in bad.stderr


def test_the_slices_extra_training_questions_come_from_the_full_benchmarks_train_split(ibd_indexed_url):
    """On the real slice and STaRK-Prime's real QA files: only questions of the source's train split that the
    slice lacks, each with its answers cut to the slice's nodes; none of the slice's val questions."""
    from conftest import STARK_QA
    from stark_pg.train.extra_queries import read_extra_training_queries

    primekg = STARK_QA / "primekg"
    if not primekg.is_dir():
        pytest.skip("../shared/data/stark-qa/primekg is not here")
    train_ids = {int(line) for line in (primekg / "split" / "train.index").read_text().split()}
    with connect(ibd_indexed_url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = 'stark-prime-ibd'").fetchone()[0]
        known = dict(conn.execute("select query_id, split from stark.query where skb_id = %s", (skb_id,)))
        nodes = {r[0] for r in conn.execute("select node_id from stark.node where skb_id = %s", (skb_id,))}
        picked = read_extra_training_queries(conn, skb_id, primekg)
    assert len(picked.queries) > 400 and "val" in set(known.values())
    assert all(q.query_id in train_ids and q.query_id not in known for q in picked.queries)
    assert all(q.answer_ids and set(q.answer_ids) <= nodes for q in picked.queries)
    r = picked.report
    assert r["read"] == r["other_split"] + r["already_in_skb"] + r["no_answer_in_skb"] + r["kept"]
    assert r["kept"] == len(picked.queries) and r["answers_kept"] == sum(len(q.answer_ids) for q in picked.queries)


class _StageLabels(NullReporter):
    """A progress reporter that shows nothing and keeps the labels of the stages asked of it."""

    def __init__(self):
        self.seen: list[str] = []

    def stage(self, label: str, total: int | None = None, unit: str = ""):
        self.seen.append(label)
        return super().stage(label, total, unit)


def test_training_questions_loaded_after_training_are_prepared_for_the_fusion_models(trained, tmp_path):
    """Search never writes: a training question loaded after `train fusion` would lack the vector and
    the name matches its nearest-question and same-entity features read. Loading queries into an SKB
    with fusion models stores both (not with --no-refresh, which leaves it to the next training)."""
    from stark_pg.loading import load_opened, open_source

    url, _ = trained
    with connect(url) as conn, conn.transaction(force_rollback=True):
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        own = conn.execute("select query_id, body, answer_ids, split from stark.query where skb_id = %s "
                           "order by query_id", (skb_id,)).fetchall()
        other = conn.execute("select name from stark.node where skb_id = %s order by node_id desc limit 1",
                             (skb_id,)).fetchone()[0]
        new = (30_000_001, f"which genes interact with {other}", own[0][2])
        splits: dict[str, list[int]] = {}
        for query_id, _, _, split in own:
            splits.setdefault(split, []).append(query_id)
        splits["train"].append(new[0])
        qa = _write_qa(tmp_path / "qa", [(q, b, a) for q, b, a, _ in own] + [new], splits)

        def stored():
            vectors = conn.execute("select count(*) from stark.query_vector where skb_id = %s and query_id = %s "
                                   "and model = %s and body_md5 = md5(%s)", (skb_id, new[0], MODEL, new[1])).fetchone()[0]
            links = conn.execute("select count(*) from stark.query_link where skb_id = %s and query_id = %s "
                                 "and body_md5 = md5(%s)", (skb_id, new[0], new[1])).fetchone()[0]
            return vectors, links

        with conn.transaction(force_rollback=True):
            skipped = load_opened(conn, open_source(qa), skb=SKB, refresh=False)
            assert skipped.prepared == {} and "fusion_questions" not in skipped.to_dict() and stored() == (0, 0)
        stages = _StageLabels()
        outcome = load_opened(conn, open_source(qa), skb=SKB, progress=stages)
        assert f"fusion: training questions for {MODEL}" in stages.seen, stages.seen
        vectors, links = stored()
        assert outcome.prepared == {MODEL: {"embedded": 1, "link_rows": links}} and vectors == 1 and links > 0
        assert outcome.to_dict()["fusion_questions"] == outcome.prepared
        again = load_opened(conn, open_source(qa), skb=SKB)          # nothing new the second time
        assert again.prepared == {MODEL: {"embedded": 0, "link_rows": 0}}

    from conftest import cli_runner

    cli = cli_runner(url)        # the same from the command line, committed, then the SKB's own questions back
    said = cli("load", qa, "--skb", SKB).stdout
    assert f"training questions for fusion models ({MODEL}): 1 embedded" in said, said
    restore = _write_qa(tmp_path / "own", [(q, b, a) for q, b, a, _ in own],
                        {split: [q for q in ids if q != new[0]] for split, ids in splits.items()})
    said = cli("load", restore, "--skb", SKB).stdout
    assert "training questions for fusion models" not in said, said        # nothing new: nothing said


def test_synthetic_weight_is_chosen_by_cross_validation_and_zero_leaves_them_in_the_pool_only(trained):
    """`--synthetic-weight 0,0.5`: cross-validation tries each weight for the other split's questions with
    the trees (scoring train's questions only), the choice is stored and shown by the command that trains it
    again; at 0 the other split is not fitted on; a weight without train beside another split is refused."""
    url, _ = trained
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        own = conn.execute("select body, answer_ids from stark.query where skb_id = %s and split = 'train' "
                           "order by query_id desc limit 10", (skb_id,)).fetchall()
        for i, (body, answers) in enumerate(own):
            conn.execute("insert into stark.query (skb_id, query_id, split, body, answer_ids) values (%s, %s, "
                         "'weighed', %s, %s) on conflict do nothing", (skb_id, 31_000_000 + i, f"Again: {body}", answers))
        conn.commit()
        quick = dict(limit=20, rounds=[5], folds=2, min_data_in_leaf=[5], bag=1, splits=["train", "weighed"])
        report = train_fusion(conn, SKB, FusionSettings(name="weighed", synthetic_weight=[0, 0.5], **quick))
        assert sorted({row["synthetic_weight"] for row in report["cv"]}) == [0.0, 0.5]
        assert all(row["scored"] == 20 for row in report["cv"]) and report["scored_in_cv"] == 20
        chosen = report["chosen_synthetic_weight"]
        assert report["fitted"] == {"questions": 30 if chosen else 20, "synthesized": 10 if chosen else 0}
        stored = load(conn, skb_id, SKB, "weighed")
        assert stored.settings["chosen_synthetic_weight"] == chosen
        assert "--synthetic-weight 0,0.5" in train_command(SKB, stored.settings)
        pool_only = train_fusion(conn, SKB, FusionSettings(name="weighed0", synthetic_weight=[0], **quick))
        assert pool_only["fitted"] == {"questions": 20, "synthesized": 0}
        with pytest.raises(ValueError, match="--synthetic-weight"):
            train_fusion(conn, SKB, FusionSettings(name="w", synthetic_weight=[0.5], limit=20, rounds=[5], folds=2))
        with pytest.raises(ValueError, match="--synthetic-weight"):
            train_fusion(conn, SKB, FusionSettings(name="w", synthetic_weight=[-1], **quick))
    from conftest import cli_runner

    said = cli_runner(url)("train", "fusion", SKB, "--synthetic-weight", "half", "-q", expect=2)
    assert "--synthetic-weight" in said.stderr + said.stdout and "half" in said.stderr + said.stdout


def test_splits_fit_on_several_splits_score_only_train_and_set_the_neighbour_pool(trained):
    """`--splits train,more`: the other split's questions are fitted on and join the pool the nearest-question
    features read (at training and at search time), while cross-validation scores train's questions only;
    a split methods are reported on is refused."""
    from stark_pg.retrieve.fusion import rank_params
    from stark_pg.eval.query_sets import from_split, learning_sets, learning_splits

    url, _ = trained
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        own = conn.execute("select body, answer_ids from stark.query where skb_id = %s and split = 'train' "
                           "order by query_id limit 12", (skb_id,)).fetchall()
        for i, (body, answers) in enumerate(own):
            conn.execute("insert into stark.query (skb_id, query_id, split, body, answer_ids) values (%s, %s, 'more', "
                         "%s, %s)", (skb_id, 30_000_000 + i, f"Once more: {body}", answers))
        conn.commit()
        report = train_fusion(conn, SKB, FusionSettings(name="more", splits=["train", "more"], limit=20, rounds=[5],
                                                        folds=2, min_data_in_leaf=[5], bag=1))
        assert report["queries"] == 32 and report["scored_in_cv"] == 20 and report["splits"] == ["train", "more"]
        assert all(row["scored"] == 20 for row in report["cv"])
        stored = load(conn, skb_id, SKB, "more")
        assert stored.settings["splits"] == ["train", "more"]
        assert rank_params(SKB, "q", encode_query("q"), stored, 10)["pool_splits"] == ["train", "more"]

        names = list(sql().fusion_feature_names(conn, skb=SKB, model=MODEL, trained_dense=False))
        knn = names.index("knn_answer")
        body = own[0][0]
        more_answers = {a for _, answers in own for a in answers}
        only_more = dict(zip(*query_features(conn, SKB, body, encode_query(body), FusionSettings(splits=["more"]),
                                             MODEL)))
        assert {n for n, f in only_more.items() if f[knn] > 0} <= more_answers
        assert any(f[knn] > 0 for f in only_more.values())
        nowhere = query_features(conn, SKB, body, encode_query(body), FusionSettings(splits=["nope"]), MODEL)[1]
        assert not nowhere[:, knn].any()
        # the trained methods that stop early (mfar, qagnn) hold out part of the first split only
        rest, held = learning_sets(conn, skb_id, ["train", "more"], 0.25, seed=3)
        train_ids = {q.query_id for q in from_split(conn, skb_id, "train").queries}
        assert held.queries and {q.query_id for q in held.queries} <= train_ids
        assert {q.query_id for q in rest.queries} == (train_ids - {q.query_id for q in held.queries}) | set(
            range(30_000_000, 30_000_012))
    for bad in (["train", "val"], ["test"], [" "], "train,holdout"):
        with pytest.raises(ValueError, match="--splits"):
            learning_splits(bad)


def test_training_passes_the_pairs_and_computes_the_same_features_and_model(trained, monkeypatch):
    """Training reads the SKB's (field, scorer) pairs once and passes them to every question's features
    (stark.fusion_pairs scans the SKB's fields, relations and chunk kinds, a cost that grows with the SKB):
    the same feature vectors as the SKB's own pairs give, and the same model as training without them."""
    import stark_pg.train.fusion as training
    from stark_pg.models.fusion import feature_pairs

    url, _ = trained
    settings = dict(limit=20, rounds=[5], leaves=[7], folds=2, min_data_in_leaf=[5], bag=1)
    with connect(url) as conn:
        names = list(sql().fusion_feature_names(conn, skb=SKB, model=MODEL, trained_dense=False))
        pairs = feature_pairs(names)
        assert pairs == tuple(map(list, zip(*[(f, s) for _, f, s in conn.execute(
            "select * from stark.fusion_pairs(%s, %s)", (SKB, MODEL))])))
        for body, in conn.execute("select body from stark.query q join stark.skb s using (skb_id) where s.name = %s "
                                  "and q.split = 'train' order by query_id limit 5", (SKB,)).fetchall():
            vector = encode_query(body)
            ids, X = query_features(conn, SKB, body, vector, FusionSettings(), MODEL)
            ids2, X2 = query_features(conn, SKB, body, vector, FusionSettings(), MODEL, pairs=pairs)
            assert ids == ids2 and np.array_equal(X, X2)
        calls = []
        monkeypatch.setattr(training, "query_features", lambda *a, **k: calls.append(a[-1]) or query_features(*a, **k))
        train_fusion(conn, SKB, FusionSettings(name="with-pairs", **settings))
        assert calls and all(p == pairs for p in calls)
        calls.clear()
        monkeypatch.setattr(training, "feature_pairs", lambda names: None)      # as before: the SKB's pairs per call
        train_fusion(conn, SKB, FusionSettings(name="without-pairs", **settings))
        assert calls and all(p is None for p in calls)
        with_pairs = load(conn, conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0],
                          SKB, "with-pairs")
        without = load(conn, conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0],
                       SKB, "without-pairs")
        assert with_pairs.booster_texts == without.booster_texts and with_pairs.score_sql == without.score_sql
        assert with_pairs.metrics == without.metrics


def test_fusion_rerank_moves_only_fusions_head_and_sim_weight_bounds_how_far(trained):
    """`fusion+rerank`: the LLM (a local server speaking OpenAI's protocol) reorders fusion's top k_max and
    leaves the rest as fusion ranks it, scores falling as ranks rise; with STaRK's sim_weight 0.1 the one
    document it calls relevant rises to the top, with a sim_weight larger than k_max times the LLM's
    range it moves nothing."""
    import re

    from fake_llm_server import FakeLLMServer, user_text
    from stark_pg.retrieve import fusion as fusion_method, fusion_rerank

    url, _ = trained
    server = FakeLLMServer().start()
    try:
        with connect(url) as conn:
            body = conn.execute("select body from stark.query where skb_id = stark.skb_id(%s) and split = 'val' "
                                "order by query_id limit 1", (SKB,)).fetchone()[0]
            plain = fusion_method.search(conn, SKB, body, 30)
            favourite = conn.execute("select name from stark.node where skb_id = stark.skb_id(%s) and node_id = %s",
                                     (SKB, plain.node_ids[5])).fetchone()[0]

            def responder(kind, request):
                name = re.search(r"^name: (.*)$", user_text(kind, request), re.M).group(1)
                return json.dumps({"score": 1.0 if name == favourite else 0.0})

            server.responder = responder

            def reranked(sim_weight: float):
                return fusion_rerank.search(conn, SKB, body, 30, fusion_rerank.Options(
                    k_max=6, llm="openai:qwen-test", base_url=server.openai_url, sim_weight=sim_weight))

            free = reranked(0.1)
            assert free.node_ids[:6] == [plain.node_ids[5], *plain.node_ids[:5]]
            assert free.hits[6:] == plain.hits[6:]
            scores = [h.score for h in free.hits]
            assert scores == sorted(scores, reverse=True) and scores[5] > scores[6]
            assert free.trace["method"] == "fusion+rerank" and free.trace["fusion"]["method"] == "fusion"
            assert free.trace["llm"]["calls"] == 6 and len(free.trace["rerank"]["scores"]) == 6
            assert reranked(7.0).node_ids == plain.node_ids
    finally:
        server.stop()
