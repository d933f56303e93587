"""mFAR against the real embedded PostgreSQL and the real MiniLM: fields, per-pair scores, the SQL
ranking against the training formula, training, masking, explanations and the CLI.

A generated 60-node SKB (drugs targeting genes, with text fields and relations) keeps most tests
quick; the real slice is trained on in test_mfar_quality.py.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from loaders.bundle import BundleSource
from stark_pg import embed
from stark_pg.eval.query_sets import EvalQuery
from stark_pg.index.dense import build_dense
from stark_pg.index.lexical import build_lexical, relation_scopes
from stark_pg.retrieve import mfar
from stark_pg.skb.store import load_skb
from stark_pg.models.mfar import FieldInfo, Pair, load_model, parse_mask, skb_fields, variant_pairs
from stark_pg.train.mfar import TrainSettings, query_features, train_mfar

pytestmark = pytest.mark.slow

WORDS = ("kinase inhibitor receptor antagonist enzyme membrane signalling inflammation colitis oral tablet "
         "injection protein binding transport channel metabolism liver kidney").split()


def write_pharma_bundle(path, seed: int = 3):
    """20 genes and 40 drugs; each drug targets 1-3 genes; queries name a gene and ask for its drugs."""
    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    nodes, edges = [], []
    for g in range(20):
        nodes.append({"id": g, "type": "gene/protein", "name": f"GENE{g}",
                      "fields": {"description": " ".join(rng.choices(WORDS, k=12)) + f" gene number {g}"}})
    targets = {}
    for d in range(100, 140):
        genes = rng.sample(range(20), rng.randint(1, 3))
        targets[d] = genes
        nodes.append({"id": d, "type": "drug", "name": f"drugname{d}",
                      "fields": {"description": " ".join(rng.choices(WORDS, k=15)),
                                 "indication": f"used for {rng.choice(['colitis', 'arthritis', 'asthma'])}"}})
        for g in genes:
            edges += [f"{d}\ttarget\t{g}", f"{g}\ttarget\t{d}"]
    with open(path / "nodes.jsonl", "w") as handle:
        handle.writelines(json.dumps(n) + "\n" for n in nodes)
    (path / "edges.tsv").write_text("src\trelation\tdst\n" + "\n".join(edges) + "\n")
    lines = ["id,query,answer_ids,split"]
    for g in range(20):
        answers = sorted(d for d, genes in targets.items() if g in genes)
        if answers:
            split = "val" if g % 4 == 0 else "train"
            lines.append(f'{g},Which drugs target GENE{g}?,"{json.dumps(answers)}",{split}')
    (path / "queries.csv").write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def pharma_url(server_url, template_db, tmp_path_factory):
    """One database per module with the generated SKB loaded and fully indexed (read-mostly)."""
    from conftest import cloned_database
    from stark_pg.db import connect

    with cloned_database(server_url, template_db, "stark_mfar") as url:
        with connect(url) as conn:
            load_skb(conn, BundleSource(write_pharma_bundle(tmp_path_factory.mktemp("pharma") / "pharma")))
            build_lexical(conn, "pharma", extra_scopes=relation_scopes(conn, "pharma"))
            build_dense(conn, "pharma")
        yield url


@pytest.fixture
def pconn(pharma_url):
    from stark_pg.db import connect

    with connect(pharma_url) as connection:
        yield connection


# --- fields and pairs (no database) --------------------------------------------------------------

FIELDS = [FieldInfo("document", True, True), FieldInfo("name", True, True), FieldInfo("type", True, False),
          FieldInfo("description", True, True), FieldInfo("relation:target", True, True)]


def test_variants_choose_the_papers_pairs():
    assert [str(p) for p in variant_pairs(FIELDS, "2")] == ["document:lexical", "document:dense"]
    assert [str(p) for p in variant_pairs(FIELDS, "1+n")] == [
        "document:lexical", "name:dense", "description:dense", "relation:target:dense"]
    assert all(p.scorer == "lexical" for p in variant_pairs(FIELDS, "lexical"))
    assert len(variant_pairs(FIELDS, "lexical")) == 5
    assert len(variant_pairs(FIELDS, "dense")) == 4          # type has no dense scorer
    assert len(variant_pairs(FIELDS, "all")) == 9


def test_fields_can_be_excluded_whole_or_by_scorer():
    pairs = variant_pairs(FIELDS, "all", exclude=("document", "relation:target:dense"))
    assert "document:lexical" not in map(str, pairs) and "document:dense" not in map(str, pairs)
    assert "relation:target:lexical" in map(str, pairs) and "relation:target:dense" not in map(str, pairs)
    with pytest.raises(ValueError, match="not a field of this SKB"):
        variant_pairs(FIELDS, "all", exclude=("colour",))
    with pytest.raises(ValueError, match="unknown mFAR variant"):
        variant_pairs(FIELDS, "most")


def test_unindexed_fields_are_left_out_and_nothing_indexed_is_an_error():
    bare = [FieldInfo("document", False, False), FieldInfo("name", False, False)]
    with pytest.raises(ValueError, match="--relation-fields"):
        variant_pairs(bare, "all")


def test_masks_parse_relation_names_with_colons_and_spaces():
    assert parse_mask("relation:interacts with:dense, name") == [("relation:interacts with", "dense"), ("name", None)]
    assert parse_mask(None) == []


# --- fields and per-pair scores in SQL -----------------------------------------------------------

def test_fields_are_derived_from_the_data(pconn):
    found = {f.field: (f.lexical, f.dense) for f in skb_fields(pconn, "pharma", "all-MiniLM-L6-v2")}
    assert found == {"document": (True, True), "name": (True, True), "type": (True, False),
                     "description": (True, True), "indication": (True, True), "relation:target": (True, True)}


def test_a_relation_field_lists_the_neighbours_names(pconn):
    skb = pconn.execute("select stark.skb_id('pharma')").fetchone()[0]
    body = dict(pconn.execute("select node_id, body from stark.scope_texts(%s, 'relation:target')", (skb,)).fetchall())
    drugs = [r[0] for r in pconn.execute("select src from stark.edge where skb_id = %s and dst = 0 and relation = "
                                         "'target'", (skb,))]
    assert drugs and all(f"drugname{d}" in body[0] for d in drugs)
    top = pconn.execute("select node_id from stark.bm25('pharma', 'GENE0', 50, 'relation:target')").fetchall()
    assert sorted(r[0] for r in top) == sorted(drugs)


def test_pair_scores_equal_bm25_and_the_best_chunk_similarity(pconn):
    query = "drugs for colitis that target GENE3"
    vector = embed.encode_query(query)
    skb = pconn.execute("select stark.skb_id('pharma')").fetchone()[0]
    rows = pconn.execute("select node_id, field, scorer, score from stark.mfar_field_scores('pharma', %s, %s, "
                         "'all-MiniLM-L6-v2', array['description', 'relation:target'], array['indication', 'document'],"
                         " 5)", (query, vector)).fetchall()
    got = {(n, f, s): v for n, f, s, v in rows}
    nodes = {n for n, *_ in rows}
    for scope in ("description", "relation:target"):
        expected = dict(pconn.execute("select node_id, score from stark.bm25_scores(%s, %s, %s)", (skb, scope, query)))
        for node in nodes:
            assert got.get((node, scope, "lexical"), 0.0) == pytest.approx(expected.get(node, 0.0), abs=1e-9)
    table_doc, table_chunk = pconn.execute("select doc_table, chunk_table from stark.embedding_model").fetchone()
    chunks = {}
    for node, vec in pconn.execute(f"select node_id, vec from stark.{table_chunk} where skb_id = %s and "
                                   "kind = 'field:indication'", (skb,)):
        chunks[node] = max(chunks.get(node, -2.0), float(np.dot(vec.to_numpy(), vector)))
    docs = {n: float(np.dot(v.to_numpy(), vector))
            for n, v in pconn.execute(f"select node_id, vec from stark.{table_doc} where skb_id = %s", (skb,))}
    for node in nodes:
        assert got[(node, "document", "dense")] == pytest.approx(docs[node], abs=1e-5)
        if node in chunks:
            assert got[(node, "indication", "dense")] == pytest.approx(chunks[node], abs=1e-5)
        else:
            assert (node, "indication", "dense") not in got          # genes have no indication
    # the candidates are the shortlists: the 5 best of each pair are all there
    best_docs = sorted(docs, key=lambda n: -docs[n])[:5]
    assert set(best_docs) <= nodes


def test_unknown_or_unindexed_fields_are_clear_errors(pconn):
    import psycopg

    vector = embed.encode_query("x")
    with pytest.raises(psycopg.errors.RaiseException, match="no field"):
        pconn.execute("select * from stark.mfar_field_scores('pharma', 'x', %s, 'all-MiniLM-L6-v2', "
                      "array['colour'], '{}')", (vector,))
    with pytest.raises(psycopg.errors.RaiseException, match="no dense scorer"):
        pconn.execute("select * from stark.mfar_field_scores('pharma', 'x', %s, 'all-MiniLM-L6-v2', "
                      "'{}', array['type'])", (vector,))


# --- training, and the SQL ranking against the training formula -----------------------------------

@pytest.fixture(scope="module")
def trained(pharma_url):
    from stark_pg.db import connect

    with connect(pharma_url) as conn:
        report = train_mfar(conn, "pharma", TrainSettings(variant="all", epochs=15, patience=15, negatives=8))
    return report


def test_training_stores_the_model_and_its_history(pconn, trained):
    skb = pconn.execute("select stark.skb_id('pharma')").fetchone()[0]
    model = load_model(pconn, skb, "pharma", "all")
    assert [str(p) for p in model.pairs] == [str(p) for p in trained.model.pairs]
    assert model.gate_weight.shape == (len(model.pairs), 384)
    assert len(model.history) >= 2 and model.history[0]["epoch"] == 0
    assert model.metrics["epoch"] == trained.best_epoch
    # the chosen epoch's MRR on the held-out training queries is the best seen, and at least the
    # untrained (uniform) model's; val is never looked at
    assert model.metrics["holdout_mrr"] == max(h["holdout_mrr"] for h in model.history)
    assert model.metrics["holdout_mrr"] >= model.history[0]["holdout_mrr"]
    assert not any(key.startswith("val_") for h in model.history for key in h)
    assert np.allclose(model.gate(embed.encode_query("anything")).sum(), 1.0)


def test_sql_ranking_equals_the_training_formula(pconn, trained):
    model = trained.model
    query = EvalQuery(0, "Which drugs target GENE5 and treat colitis?", [])
    vector = embed.encode_query(query.body)
    features = query_features(pconn, "pharma", model.pairs, query, vector, model.embed_model, 100, None)
    weights = model.weights(vector)
    expected = ((features.scores - model.means) / model.scales) @ weights
    order = np.lexsort((features.node_ids, -expected))[:10]
    ranking = mfar.search(pconn, "pharma", query.body, 10)
    assert ranking.node_ids == features.node_ids[order].tolist()
    assert [h.score for h in ranking.hits] == pytest.approx(expected[order].tolist(), rel=1e-5, abs=1e-4)
    assert max(abs(h.score) for h in ranking.hits) < 1e3        # standardised scores, no runaway scale


def test_a_mask_zeroes_weights_and_changes_the_ranking(pconn, trained):
    query = "Which drugs target GENE7?"
    plain = mfar.search(pconn, "pharma", query, 10)
    masked = mfar.search(pconn, "pharma", query, 10, mfar.Options(mask="relation:target,name"))
    assert all(w == 0 for pair, w in masked.trace["weights"].items()
               if pair.startswith(("relation:target:", "name:")))
    assert any(w > 0 for w in masked.trace["weights"].values())
    assert masked.node_ids != plain.node_ids
    with pytest.raises(ValueError, match="no such pair"):
        mfar.search(pconn, "pharma", query, 10, mfar.Options(mask="type:dense"))


def test_explain_shows_weights_and_contributions_that_add_up(pconn, trained):
    ranking = mfar.search(pconn, "pharma", "Which drugs target GENE2?", 5, mfar.Options(explain=True))
    assert "weights for this query" in ranking.trace["explain"]
    assert "relation:target" in ranking.trace["explain"]
    for hit in ranking.hits:
        parts = ranking.trace["contributions"][hit.node_id]
        assert sum(parts.values()) == pytest.approx(hit.score, abs=1e-3)


def test_a_missing_model_names_the_command_to_train_it(pconn):
    from stark_pg.skb.records import LoadError

    with pytest.raises(LoadError, match="stark-pg train mfar pharma --variant 2"):
        mfar.search(pconn, "pharma", "x", 5, mfar.Options(name="2"))


# --- the command line -----------------------------------------------------------------------------

def test_cli_trains_searches_explains_and_prints_the_masking_table(cli, tmp_path):
    cli("load", write_pharma_bundle(tmp_path / "pharma"), "--quiet")
    cli("index", "pharma", "--relation-fields", "--chunks", "--quiet")
    fields = json.loads(cli("train", "fields", "pharma", "--json").stdout)
    assert {"field": "relation:target", "lexical": True, "dense": True} in fields
    trained = json.loads(cli("train", "mfar", "pharma", "--variant", "2", "--epochs", "3", "--json").stdout)
    assert trained["model"] == "2" and trained["pairs"] == ["document:lexical", "document:dense"]
    found = json.loads(cli("search", "pharma", "Which drugs target GENE1?", "-m", "mfar", "-o", "name=2",
                           "--json").stdout)
    assert found["trace"]["variant"] == "2" and len(found["results"]) == 10
    shown = cli("search", "pharma", "Which drugs target GENE1?", "-m", "mfar", "-o", "name=2", "--explain").stdout
    assert "weights for this query" in shown and "document" in shown
    table = json.loads(cli("masking", "pharma", "--name", "2", "--json").stdout)
    assert [r["mask"] for r in table["rows"]] == [None, "document", "document:lexical", "document:dense"]
    assert all(set(r["delta"]) == set(table["rows"][0]["metrics"]) for r in table["rows"])
    assert table["rows"][1]["metrics"]["mrr"] == 0.0        # nothing left to score with
    bad = cli("train", "mfar", "pharma", "--variant", "most", expect=1)
    assert "unknown mFAR variant" in bad.stderr


def test_finetuning_the_query_encoder_saves_it_and_search_uses_it(pharma_url, tmp_path, monkeypatch):
    from stark_pg.db import connect
    from stark_pg.retrieve.mfar import query_encoder

    monkeypatch.setenv("STARK_PG_HOME", str(tmp_path))
    with connect(pharma_url) as conn:
        report = train_mfar(conn, "pharma", TrainSettings(variant="1+n", name="tuned", epochs=3, negatives=8,
                                                          finetune_encoder=True, encoder_epochs=1))
        model = report.model
        path = model.settings["query_encoder"]
        assert path.startswith(str(tmp_path)) and (tmp_path / "models" / "mfar" / "pharma" / "tuned").is_dir()
        assert [h.get("stage") for h in model.history][-2:] == ["encoder", "encoder"]
        assert all(h["loss"] is None or np.isfinite(h["loss"]) for h in model.history)
        stored = load_model(conn, conn.execute("select stark.skb_id('pharma')").fetchone()[0], "pharma", "tuned")
        assert query_encoder(stored) == path
        query = "Which drugs target GENE4?"
        base, tuned = embed.encode_query(query), embed.encode_query(query, path)
        assert tuned.shape == base.shape and not np.allclose(tuned, base)      # one epoch moved the encoder
        ranking = mfar.search(conn, "pharma", query, 5, mfar.Options(name="tuned"))
        assert len(ranking.hits) == 5
