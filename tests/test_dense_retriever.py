"""`stark-pg train dense`: the fine-tuned dense retriever, on a tiny separable SKB (real PostgreSQL, real MiniLM).

The SKB: 8 made-up names x 5 groups, one item per (name, group), whose document says its group with
one made-up word ("zorp") while its query says it with another ("tiva"). The base model sees the name
but cannot know which group word goes with which query word, so it ranks the item's 4 siblings about
as high as the answer; the mapping is learnable from the training queries, and the held-out ones
share it. Few steps, a high learning rate: a test of the machinery, not of the settings.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import cli_runner, cloned_database
from loaders.bundle import BundleSource
from stark_pg import embed
from stark_pg.db import connect
from stark_pg.eval import metrics
from stark_pg.eval.query_sets import from_split
from stark_pg.index.dense import build_dense, find_model
from stark_pg.index.lexical import build_lexical
from stark_pg.resources import queries as sql
from stark_pg.retrieve import vss
from stark_pg.skb.store import load_skb
from stark_pg.train.dense import DenseSettings, render, shortlists, train_dense
from test_bad_input import write_bundle

pytestmark = pytest.mark.slow

SKB = "pairs"
NAMES = ["Tavlor", "Mirex", "Quondal", "Belsap", "Corvin", "Dexal", "Furnil", "Gorbal"]
DOC_WORDS = ["zorp", "quil", "brant", "fesk", "mulo"]
QUERY_WORDS = ["tiva", "rend", "okam", "polu", "sanch"]
SYNTHETIC = 3


def node_id(name: int, group: int) -> int:
    return 100 + 10 * name + group


def bundle(path):
    nodes = [{"id": node_id(n, g), "type": "item", "name": f"{name} {DOC_WORDS[g]}",
              "fields": {"description": f"{name} is an item of the {DOC_WORDS[g]} group."}}
             for n, name in enumerate(NAMES) for g in range(len(DOC_WORDS))]
    edges = "src\trelation\tdst\n" + "".join(f"{node_id(n, 0)}\tlinked\t{node_id(n, 1)}\n" for n in range(len(NAMES)))
    rows = ["id,query,answer_ids,split"]
    for n, name in enumerate(NAMES):
        for g, word in enumerate(QUERY_WORDS):
            rows.append(f"{1000 + 10 * n + g},Which item is {name} {word}?,[{node_id(n, g)}],train")
    for n, name in enumerate(NAMES[:SYNTHETIC]):          # a split added with --splits, as synthesize makes
        rows.append(f"{2000 + n},Find the {QUERY_WORDS[0]} sort of {name},[{node_id(n, 0)}],synthetic")
    return write_bundle(path, nodes=nodes, edges=edges, queries="\n".join(rows) + "\n")


SETTINGS = dict(epochs=4, patience=4, negatives=5, lr=1e-4, batch_size=8, eval_pool=10, holdout=0.25, seed=0)


@pytest.fixture(scope="module")
def trained(server_url, template_db, tmp_path_factory):
    """The tiny SKB indexed with MiniLM, a shared-weights model trained in Python and a separate one
    by the command line; yields (url, shared report, separate --json summary)."""
    with cloned_database(server_url, template_db, "dense_tr") as url:
        with connect(url) as conn:
            load_skb(conn, BundleSource(bundle(tmp_path_factory.mktemp("pairs") / SKB)))
            build_dense(conn, SKB, multi_vector=False)
            build_lexical(conn, SKB)
            shared = train_dense(conn, SKB, DenseSettings(name="pairs-shared", **SETTINGS))
        run = cli_runner(url)
        done = run("train", "dense", SKB, "--name", "pairs-sep", "--separate", "--epochs", "1", "--negatives", "5",
                   "--lr", "1e-4", "--batch-size", "8", "--eval-pool", "10", "--holdout", "0.25",
                   "--splits", "train,synthetic", "--json")
        yield url, shared, json.loads(done.stdout)


def exact_ranking(conn, query: str, model: str | None, k: int = 40) -> list[int]:
    ranking = vss.search(conn, SKB, query, k, vss.Options(model=model, exact=True))
    return [h.node_id for h in ranking.hits]


def test_mined_negatives_are_never_answers_and_are_the_top_false_positives(trained):
    url, _, _ = trained
    with connect(url) as conn:
        skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
        queries = from_split(conn, skb_id, "train").queries
        vectors = embed.encode([q.body for q in queries], None)
        mined = shortlists(conn, SKB, queries, vectors, embed.DEFAULT_MODEL, 5, True)
        plain = shortlists(conn, SKB, queries, vectors, embed.DEFAULT_MODEL, 5, False)
        for query in queries:
            assert len(mined[query.query_id]) == 5
            assert not set(mined[query.query_id]) & set(query.answer_ids)
            expected = [n for n in exact_ranking(conn, query.body, None) if n not in query.answer_ids][:5]
            assert mined[query.query_id] == expected
        # without exclusion the answers do show up: the exclusion is what keeps them out
        assert any(set(plain[q.query_id]) & set(q.answer_ids) for q in queries)


def test_stored_vectors_are_the_fine_tuned_document_encoders_output(trained):
    url, shared, _ = trained
    from sentence_transformers import SentenceTransformer

    for name in ("pairs-shared", "pairs-sep"):
        encoder = SentenceTransformer(embed.resolve_model(name, "document"), device="cpu")
        with connect(url) as conn:
            skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
            tables = find_model(conn, name)
            rows = conn.execute(f"select node_id, vec from stark.{tables.doc_table} where skb_id = %s order by node_id",
                                (skb_id,)).fetchall()
            texts = render(conn, skb_id, find_model(conn, None), {"with_relations": True, "max_neighbors": 25},
                           [r[0] for r in rows])
        assert len(rows) == len(NAMES) * len(DOC_WORDS)
        stored = np.stack([r[1].to_numpy() for r in rows])
        fresh = encoder.encode([texts[r[0]] for r in rows], normalize_embeddings=True, convert_to_numpy=True)
        np.testing.assert_allclose(stored, fresh, atol=1e-5)
        base = embed.encode([texts[r[0]] for r in rows], None, role="document")
        assert np.abs(stored - base).max() > 1e-3          # really re-embedded, not the base vectors


def test_training_improves_the_separable_task(trained):
    url, shared, _ = trained
    with connect(url) as conn:
        skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
        queries = from_split(conn, skb_id, "train").queries

        def mrr(model):
            return metrics.mean_metrics([metrics.evaluate(exact_ranking(conn, q.body, model), q.answer_ids,
                                                          names=("mrr",)) for q in queries])["mrr"]

        before, after = mrr(None), mrr("pairs-shared")
        row = conn.execute("select base_model, path, settings, history, metrics from stark.trained_model "
                           "where skb_id = %s and kind = 'dense' and name = 'pairs-shared'", (skb_id,)).fetchone()
    assert before < after, (before, after)
    assert after > before + 0.1, (before, after)
    base_model, path, settings, history, kept = row
    assert base_model == embed.DEFAULT_MODEL and path == str(embed.trained_dense_dir("pairs-shared"))
    assert settings["shared"] is True and settings["negatives"] == 5
    assert [h["epoch"] for h in history][0] == 0 and kept["epoch"] == shared.best_epoch >= 1
    assert kept["holdout_mrr"] > history[0]["holdout_mrr"]


@pytest.mark.parametrize("name", ["pairs-shared", "pairs-sep"])
def test_sql_search_ranks_as_the_encoders_do_in_numpy(trained, name):
    url, _, _ = trained
    from sentence_transformers import SentenceTransformer

    query_encoder = SentenceTransformer(embed.resolve_model(name, "query"), device="cpu")
    doc_encoder = SentenceTransformer(embed.resolve_model(name, "document"), device="cpu")
    with connect(url) as conn:
        skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
        ids = [r[0] for r in conn.execute("select node_id from stark.node where skb_id = %s order by node_id", (skb_id,))]
        texts = render(conn, skb_id, find_model(conn, None), {"with_relations": True, "max_neighbors": 25}, ids)
        docs = doc_encoder.encode([texts[i] for i in ids], normalize_embeddings=True)
        for query in from_split(conn, skb_id, "train").queries[::7]:
            q = query_encoder.encode([query.body], normalize_embeddings=True)[0]
            scores = docs @ q
            expected = [ids[i] for i in np.lexsort((ids, -scores))][:10]
            got = vss.search(conn, SKB, query.body, 10, vss.Options(model=name, exact=True)).hits
            assert [h.node_id for h in got] == expected
            np.testing.assert_allclose([h.score for h in got], np.sort(scores)[::-1][:10], atol=1e-5)


def test_separate_encoders_are_two_models_and_the_command_reports(trained):
    _, _, summary = trained
    assert summary["model"] == "pairs-sep" and summary["settings"]["shared"] is False
    assert summary["documents"]["total"] == len(NAMES) * len(DOC_WORDS)
    assert [h["epoch"] for h in summary["history"]] == [0, 1]
    query_dir, doc_dir = embed.resolve_model("pairs-sep", "query"), embed.resolve_model("pairs-sep", "document")
    assert query_dir != doc_dir and query_dir.endswith("/query") and doc_dir.endswith("/document")
    assert embed.resolve_model("pairs-shared", "query") == embed.resolve_model("pairs-shared", "document")


def test_splits_add_their_questions_and_the_holdout_comes_from_the_first(trained):
    """`--splits train,synthetic`: the same held-out share of train as a train-only run, and every synthesized
    question learned from; a split methods are reported on is refused before any training."""
    url, shared, summary = trained
    assert list(shared.settings["splits"]) == ["train"] and summary["settings"]["splits"] == ["train", "synthetic"]
    assert summary["settings"]["holdout_queries"] == shared.settings["holdout_queries"]
    assert summary["settings"]["train_queries"] == shared.settings["train_queries"] + SYNTHETIC
    refused = cli_runner(url)("train", "dense", SKB, "--name", "pairs-val", "--splits", "train,val", expect=1)
    assert "val is a split methods are reported on" in refused.stderr and "Traceback" not in refused.stderr


def test_bad_names_are_refused(trained):
    url, _, _ = trained
    run = cli_runner(url)
    taken = run("train", "dense", SKB, "--name", "all-MiniLM-L6-v2", expect=1)
    assert "--name" in taken.stderr and "Traceback" not in taken.stderr
    slash = run("train", "dense", SKB, "--name", "../x", expect=1)
    assert "--name" in slash.stderr


def test_mfar_uses_the_trained_model_as_its_dense_scorer_with_model(trained):
    """`train mfar --model NAME` is the issue's `--dense-model NAME`: the dense pairs read NAME's vectors
    and the query goes through NAME's query encoder (here the document pair only: no --multi-vector)."""
    url, _, _ = trained
    from stark_pg.retrieve import mfar
    from stark_pg.train.mfar import TrainSettings, train_mfar

    with connect(url) as conn:
        report = train_mfar(conn, SKB, TrainSettings(variant="2", name="on-dense", embed_model="pairs-shared",
                                                     epochs=2, patience=2))
        assert [str(p) for p in report.model.pairs] == ["document:lexical", "document:dense"]
        assert report.model.embed_model == "pairs-shared"
        query = "Which item is Mirex okam?"
        ranking = mfar.search(conn, SKB, query, 5, mfar.Options(name="on-dense", explain=True))
        assert ranking.hits
        # its dense score of a node is the cosine of the trained encoders (as vss with the model), not the base's
        top = ranking.hits[0].node_id
        vector = embed.encode_query(query, "pairs-shared")
        rows = sql().mfar_field_scores(conn, skb=SKB, query=query, embedding=vector, model="pairs-shared",
                                       lexical=[], dense=["document"], pool=0, include=[top], k1=1.2, b=0.75,
                                       engine="sql")
        dense = [float(r[3]) for r in rows if r[2] == "dense"]
        tuned = {h.node_id: h.score for h in vss.search(conn, SKB, query, 40,
                                                         vss.Options(model="pairs-shared", exact=True)).hits}
        base = {h.node_id: h.score for h in vss.search(conn, SKB, query, 40, vss.Options(exact=True)).hits}
    assert len(dense) == 1 and abs(dense[0] - tuned[top]) < 1e-5 and abs(dense[0] - base[top]) > 1e-3
