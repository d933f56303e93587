"""Dense retrieval against the real embedded PostgreSQL: incremental embedding, HNSW vs exact, multi-VSS.

Small SKBs only (a 3-node bundle and a generated 300-node one, embedded once per module), since
all-MiniLM-L6-v2 embeds a few dozen passages per second on this CPU.
"""

from __future__ import annotations

import json
import random
import uuid

import numpy as np
import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pytest_postgresql.janitor import DatabaseJanitor

from conftest import _server_params
from loaders.bundle import BundleSource
from stark_pg import embed
from stark_pg.db import connect
from stark_pg.index.dense import build_dense, find_model, hnsw_index_name
from stark_pg.retrieve import MissingIndex, multivss, vss
from stark_pg.skb.catalog import drop_skb
from stark_pg.skb.store import load_skb
from test_bad_input import write_bundle

pytestmark = pytest.mark.slow


def load(conn, path, name=None, **bundle):
    summary = load_skb(conn, BundleSource(write_bundle(path, **bundle)), name=name)
    conn.commit()
    return summary


def skb_id(conn, name):
    return conn.execute("select stark.skb_id(%s)", (name,)).fetchone()[0]


def stored(conn, table, skb):
    """{key: (doc_hash, vector)} of one SKB's rows in a vector table (key: node_id, or (node_id, chunk_no))."""
    if table.startswith("emb_chunk"):
        rows = conn.execute(f"select node_id, chunk_no, doc_hash, vec from stark.{table} where skb_id = %s", (skb,))
        return {(n, c): (h, v.to_numpy()) for n, c, h, v in rows}
    rows = conn.execute(f"select node_id, doc_hash, vec from stark.{table} where skb_id = %s", (skb,))
    return {n: (h, v.to_numpy()) for n, h, v in rows}


def counts(report):
    return (report["documents"]["embedded"], report["documents"]["deleted"],
            report["chunks"]["embedded"], report["chunks"]["deleted"])


# --- incremental and resumable ------------------------------------------------------------------

def test_first_build_embeds_everything_and_a_rebuild_nothing(conn, tmp_path, monkeypatch):
    load(conn, tmp_path / "tiny")
    first = build_dense(conn, "tiny")
    # 3 documents; chunks: 3 name chunks, Aspirin's description, 2 relation chunks (target, associated with)
    assert counts(first) == (3, 0, 6, 0)
    assert first["documents"]["total"] == 3 and first["chunks"]["total"] == 6
    model = find_model(conn)
    assert set(first["indexes_built"]) == {hnsw_index_name(model.doc_table, skb_id(conn, "tiny")),
                                           hnsw_index_name(model.chunk_table, skb_id(conn, "tiny"))}

    def no_embedding(*args, **kwargs):
        raise AssertionError("an up-to-date index must not embed anything")

    monkeypatch.setattr(embed, "encode", no_embedding)
    again = build_dense(conn, "tiny")
    assert counts(again) == (0, 0, 0, 0)
    assert (again["documents"]["skipped"], again["chunks"]["skipped"], again["indexes_built"]) == (3, 6, [])


def test_a_changed_field_reembeds_only_its_node_and_chunk(conn, tmp_path):
    load(conn, tmp_path / "tiny")
    build_dense(conn, "tiny")
    model, skb = find_model(conn), skb_id(conn, "tiny")
    docs, chunks = stored(conn, model.doc_table, skb), stored(conn, model.chunk_table, skb)

    conn.execute("update stark.node_field set body = 'an antiplatelet drug against heart attacks' "
                 "where skb_id = %s and node_id = 1 and field = 'description'", (skb,))
    conn.commit()
    assert counts(build_dense(conn, "tiny")) == (1, 0, 1, 0)
    docs2, chunks2 = stored(conn, model.doc_table, skb), stored(conn, model.chunk_table, skb)
    assert [n for n in docs if docs[n][0] != docs2[n][0]] == [1]
    assert not np.allclose(docs[1][1], docs2[1][1])
    assert all(np.array_equal(docs[n][1], docs2[n][1]) for n in (2, 3))
    assert [key for key in chunks if chunks[key][0] != chunks2[key][0]] == [(1, 1)]      # the description chunk


def test_a_renamed_node_reembeds_the_documents_that_mention_it(conn, tmp_path):
    load(conn, tmp_path / "tiny")
    build_dense(conn, "tiny")
    conn.execute("update stark.node set name = 'COX-2' where skb_id = %s and node_id = 2", (skb_id(conn, "tiny"),))
    conn.commit()
    # node 2 itself, and Aspirin whose document lists its target by name; chunks: node 2's name chunk
    # and Aspirin's 'target' relation chunk
    assert counts(build_dense(conn, "tiny")) == (2, 0, 2, 0)
    # without relations, a name is only in its own node's texts
    report = build_dense(conn, "tiny", with_relations=False)
    assert report["documents"]["embedded"] == 2 and report["chunks"]["deleted"] == 2   # the relation chunks


def test_vanished_nodes_and_chunks_are_deleted(conn, tmp_path):
    load(conn, tmp_path / "tiny")
    build_dense(conn, "tiny")
    model, skb = find_model(conn), skb_id(conn, "tiny")
    conn.execute("delete from stark.edge where skb_id = %s and (src = 3 or dst = 3)", (skb,))
    conn.execute("delete from stark.node where skb_id = %s and node_id = 3", (skb,))
    conn.commit()
    # node 3's vector goes; node 2 lost its only relation: its document changes, its relation chunk goes
    assert counts(build_dense(conn, "tiny")) == (1, 1, 0, 2)
    assert set(stored(conn, model.doc_table, skb)) == {1, 2}
    assert set(stored(conn, model.chunk_table, skb)) == {(1, 0), (1, 1), (1, 2), (2, 0)}


def test_an_interrupted_build_resumes_where_it_stopped(conn, tmp_path, monkeypatch):
    nodes = [{"id": i, "type": "thing", "name": f"thing number {i}", "fields": {"note": f"note {i}"}}
             for i in range(1, 11)]
    load(conn, tmp_path / "ten", nodes=nodes, edges="src\trelation\tdst\n", queries=None)
    real_encode, calls = embed.encode, []

    def failing_encode(texts, model=None, *args, **kwargs):
        calls.append(len(texts))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_encode(texts, model, *args, **kwargs)

    monkeypatch.setattr(embed, "encode", failing_encode)
    with pytest.raises(KeyboardInterrupt):
        build_dense(conn, "ten", batch_size=4)
    model = find_model(conn)
    assert len(stored(conn, model.doc_table, skb_id(conn, "ten"))) == 4      # the first batch was kept
    monkeypatch.setattr(embed, "encode", real_encode)
    report = build_dense(conn, "ten", batch_size=4)
    assert report["documents"]["embedded"] == 6 and report["documents"]["total"] == 10


# --- dropping and replacing an SKB ----------------------------------------------------------------

def hnsw_indexes(conn):
    return {r[0] for r in conn.execute("select indexname from pg_indexes where schemaname = 'stark' "
                                       "and indexname like %s", ("%\\_hnsw\\_\\_skb%",))}


def test_dropping_or_replacing_an_skb_removes_its_vectors_and_indexes(conn, tmp_path):
    load(conn, tmp_path / "tiny")
    load(conn, tmp_path / "other", name="other")
    build_dense(conn, "tiny")
    build_dense(conn, "other", multi_vector=False)
    model, tiny, other = find_model(conn), skb_id(conn, "tiny"), skb_id(conn, "other")
    assert hnsw_indexes(conn) == {hnsw_index_name(model.doc_table, tiny), hnsw_index_name(model.chunk_table, tiny),
                                  hnsw_index_name(model.doc_table, other)}

    drop_skb(conn, "tiny")
    conn.commit()
    for table in (model.doc_table, model.chunk_table):
        assert not stored(conn, table, tiny)
    assert conn.execute("select count(*) from stark.embedding_build where skb_id = %s", (tiny,)).fetchone()[0] == 0
    assert hnsw_indexes(conn) == {hnsw_index_name(model.doc_table, other)}
    assert len(stored(conn, model.doc_table, other)) == 3                     # the other SKB is untouched

    load(conn, tmp_path / "other", name="other")                                # replace: a new skb_id
    # the replaced version's index stays for readers of the old version, until the next load
    assert not stored(conn, model.doc_table, other) and hnsw_indexes(conn) == {hnsw_index_name(model.doc_table, other)}
    load(conn, tmp_path / "tiny")
    assert hnsw_indexes(conn) == set()


# --- the SQL API and its errors ------------------------------------------------------------------

def test_sql_api_more_like_this_node_and_chunks(conn, tmp_path):
    load(conn, tmp_path / "tiny")
    build_dense(conn, "tiny")
    node, score = conn.execute("select * from stark.vss('tiny', stark.node_vector('tiny', 1), 1)").fetchone()
    assert node == 1 and score == pytest.approx(1.0, abs=1e-5)
    chunks = conn.execute("select kind, body from stark.document_chunks('tiny', 1)").fetchall()
    assert chunks == [("name", "name: Aspirin\ntype: drug"), ("field:description", "description: pain relief"),
                      ("relation:target", "target: PTGS2")]
    build = conn.execute("select documents, chunks, settings from stark.embedding_build b "
                         "join stark.embedding_model m using (model_id) where m.name = 'all-MiniLM-L6-v2'").fetchone()
    assert build[:2] == (3, 6) and build[2]["with_relations"] is True


def test_errors_say_what_is_missing(conn, tmp_path):
    load(conn, tmp_path / "tiny")
    query = embed.encode_query("pain")
    with pytest.raises(psycopg.errors.RaiseException, match="no SKB named 'nope'"):
        vss.search(conn, "nope", "pain", 3)
    conn.rollback()
    with pytest.raises(psycopg.errors.RaiseException, match="no vectors of model"):
        vss.search(conn, "tiny", "pain", 3)
    conn.rollback()
    build_dense(conn, "tiny", multi_vector=False)
    with pytest.raises(MissingIndex, match="no chunk vectors .*run `stark-pg index tiny --chunks`"):
        multivss.search(conn, "tiny", "pain", 3)                 # chunks are built when asked
    conn.rollback()
    with pytest.raises(psycopg.errors.RaiseException, match="3 dimensions, model 'all-MiniLM-L6-v2' has 384"):
        conn.execute("select * from stark.vss('tiny', '[1,2,3]', 3)")
    conn.rollback()
    with pytest.raises(psycopg.errors.RaiseException, match="agg must be max or mean"):
        conn.execute("select * from stark.multivss('tiny', %s, 3, agg => 'sum')", (query,))
    conn.rollback()
    with pytest.raises(ValueError, match="agg must be max or mean"):
        multivss.search(conn, "tiny", "pain", 3, multivss.Options(agg="median"))


def test_ef_search_is_raised_for_the_call_only(conn, tmp_path):
    load(conn, tmp_path / "tiny")
    build_dense(conn, "tiny")
    conn.execute("set hnsw.ef_search = 55")
    conn.execute("select * from stark.vss('tiny', %s, 200)", (embed.encode_query("pain"),)).fetchall()
    conn.execute("select * from stark.multivss('tiny', %s, 20)", (embed.encode_query("pain"),)).fetchall()
    assert conn.execute("show hnsw.ef_search").fetchone()[0] == "55"


# --- a few hundred generated nodes: HNSW against exact search, multi-VSS against numpy ------------

VOCABULARY = {
    "drug": "inhibitor antibody tablet dose treatment therapy antagonist analgesic infusion blocker".split(),
    "gene/protein": "enzyme transcription membrane signalling expression mutation domain kinase nucleus cytokine".split(),
    "disease": "inflammation chronic bowel autoimmune fever infection symptom colitis lesion syndrome".split(),
    "pathway": "cascade metabolism transduction cycle apoptosis glycolysis immunity degradation transport repair".split(),
}
FILLER = "the a which is in of and with often rarely strongly linked to observed patients cells tissue human".split()
QUERIES = ["chronic bowel inflammation", "kinase inhibitor therapy", "membrane transport of proteins",
           "autoimmune colitis treatment", "apoptosis signalling cascade", "fever after infection",
           "antibody infusion dose", "mutation in the nucleus", "glycolysis metabolism enzyme",
           "cytokine expression in tissue", "analgesic tablet", "DNA repair cycle"]


def generated_bundle(n=300, seed=7):
    rnd = random.Random(seed)
    types = list(VOCABULARY)
    nodes = []
    for i in range(1, n + 1):
        kind = types[i % len(types)]

        def words(count):
            return " ".join(rnd.choice(VOCABULARY[kind] + FILLER + VOCABULARY[rnd.choice(types)]) for _ in range(count))

        fields = {"description": words(rnd.randint(8, 30)) + "."}
        if i % 3 == 0:
            fields["definition"] = words(rnd.randint(80, 160)) + "."          # long: two or three chunks
        nodes.append({"id": i, "type": kind, "name": f"{rnd.choice(VOCABULARY[kind])} {i}", "fields": fields})
    edges = ["src\trelation\tdst"] + [f"{i}\t{rnd.choice(['target', 'associated with'])}\t{rnd.randint(1, n)}"
                                      for i in range(1, n + 1) for _ in range(rnd.randint(0, 3))]
    return nodes, "\n".join(edges) + "\n"


@pytest.fixture(scope="module")
def generated(server_url, template_db, tmp_path_factory):
    """A database holding the 300-node SKB `gen` (embedded with chunks) and the 3-node `tiny`."""
    name = f"stark_dense_{uuid.uuid4().hex[:8]}"
    janitor = DatabaseJanitor(dbname=name, template_dbname=template_db, **_server_params(server_url))
    janitor.init()
    url = make_conninfo(server_url, dbname=name)
    with connect(url) as conn:
        nodes, edges = generated_bundle()
        load(conn, tmp_path_factory.mktemp("gen") / "gen", nodes=nodes, edges=edges, queries=None)
        load(conn, tmp_path_factory.mktemp("tiny") / "tiny")
        report = build_dense(conn, "gen")
        build_dense(conn, "tiny")
        yield conn, report
    janitor.drop()


def index_scans(conn, index_name):
    conn.execute("select pg_stat_force_next_flush()")
    conn.commit()
    conn.execute("select pg_stat_clear_snapshot()")
    return conn.execute("select idx_scan from pg_stat_user_indexes where indexrelname = %s", (index_name,)).fetchone()[0]


def test_generated_skb_is_embedded(generated):
    conn, report = generated
    assert report["documents"]["embedded"] == 300
    long_fields = conn.execute("select count(*) from stark.document_chunks('gen', 3) where kind = 'field:definition'")
    assert long_fields.fetchone()[0] >= 2


def test_hnsw_agrees_with_exact_search_and_is_used(generated):
    """HNSW's answers agree with exact search. pgvector 0.8 costs an HNSW scan by hnsw.ef_search (which
    stark.vss raises to 100), so on PostgreSQL 18 the planner searches a table this small (303 vectors)
    exactly, by a scan and a sort; PostgreSQL 16 with pgvector 0.6 took the index. enable_sort = off
    leaves the index as the plan, so that HNSW is what is tested here; the next test checks that the
    planner takes the index by itself where exact search costs more."""
    conn, _ = generated
    model = find_model(conn)
    index = hnsw_index_name(model.doc_table, skb_id(conn, "gen"))
    before = index_scans(conn, index)
    recalls = []
    for q in QUERIES:
        conn.execute("set enable_sort = off")
        try:
            approx = vss.search(conn, "gen", q, 10)
        finally:
            conn.execute("reset enable_sort")
        exact = vss.search(conn, "gen", q, 10, vss.Options(exact=True))
        assert len(approx.hits) == len(exact.hits) == 10
        recalls.append(len(set(approx.node_ids) & set(exact.node_ids)) / 10)
        exact_scores = {h.node_id: h.score for h in exact.hits}
        for h in approx.hits:
            if h.node_id in exact_scores:
                assert h.score == pytest.approx(exact_scores[h.node_id], abs=1e-6)
    assert np.mean(recalls) >= 0.9, recalls
    assert index_scans(conn, index) >= before + len(QUERIES)                  # the partial HNSW index did the work


def test_the_ef_search_option_goes_to_the_index_search(generated):
    """`-o ef_search=N` (vss, hybrid, multivss): the search runs with hnsw.ef_search = N (SET LOCAL in its
    transaction, through stark.ef_search), and only there; a larger list agrees with exact search."""
    from stark_pg.index.lexical import build_lexical
    from stark_pg.retrieve import hybrid

    conn, _ = generated
    build_lexical(conn, "gen")                    # for hybrid
    before = conn.execute("show hnsw.ef_search").fetchone()[0]
    conn.execute("set enable_sort = off")
    try:
        for q in QUERIES[:4]:
            wide = vss.search(conn, "gen", q, 10, vss.Options(ef_search=400))
            narrow = vss.search(conn, "gen", q, 10, vss.Options(ef_search=1))
            exact = vss.search(conn, "gen", q, 10, vss.Options(exact=True))
            assert wide.node_ids == exact.node_ids and len(narrow.hits) == 10
            assert wide.trace["ef_search"] == 400
            assert len(hybrid.search(conn, "gen", q, 5, hybrid.Options(ef_search=20)).hits) == 5
            assert len(multivss.search(conn, "gen", q, 5, multivss.Options(ef_search=20)).hits) == 5
    finally:
        conn.execute("reset enable_sort")
    assert conn.execute("select current_setting('stark.ef_search', true)").fetchone()[0] in ("", None)
    assert conn.execute("show hnsw.ef_search").fetchone()[0] == before


def test_the_planner_takes_hnsw_where_exact_search_costs_more(conn):
    """stark.vss goes through the SKB's partial HNSW index, by the planner's own choice, once the SKB is
    large: 10,000 vectors here. (On PostgreSQL 18 with pgvector 0.8 and stark.vss's ef_search of 100,
    SKBs of up to a few thousand vectors alone in their table are searched exactly: the slice's 3,426
    are.) Random vectors of a pseudo-model, so no embedding model is run."""
    from psycopg import sql as pgsql

    from loaders.synthetic import SyntheticSource
    from stark_pg.index.dense import ModelTables, statement
    from stark_pg.resources import queries

    load_skb(conn, SyntheticSource(nodes=10_000, seed=5, queries=0, edges_per_node=1), name="big")
    big = skb_id(conn, "big")
    row = queries().register_model(conn, name="random-384-test", dim=384)
    tables = ModelTables(row[0], "random-384-test", *row[1:])
    conn.execute(statement("create_tables", tables))
    conn.execute(pgsql.SQL(
        "insert into {} (skb_id, node_id, doc_hash, vec) select n.skb_id, n.node_id, 'random', v.a::vector "
        "from stark.node n cross join lateral (select array_agg(random() - 0.5) as a from generate_series(1, 384) "
        "where n.node_id is not null) v where n.skb_id = %s").format(pgsql.Identifier("stark", tables.doc_table)), (big,))
    assert conn.execute(pgsql.SQL("select count(distinct vec) from {}").format(
        pgsql.Identifier("stark", tables.doc_table))).fetchone()[0] == 10_000
    index = hnsw_index_name(tables.doc_table, big)
    conn.execute(statement("create_hnsw_index", tables, index=pgsql.Identifier(index),
                           table=pgsql.Identifier("stark", tables.doc_table), skb=big, m=16, ef_construction=64))
    conn.execute(pgsql.SQL("analyze {}").format(pgsql.Identifier("stark", tables.doc_table)))
    before = index_scans(conn, index)
    for seed in range(3):
        query = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
        rows = conn.execute("select node_id from stark.vss('big', %s, 10, 'random-384-test')", (query,)).fetchall()
        assert len(rows) == 10
    assert index_scans(conn, index) >= before + 3


def test_exact_vss_is_cosine_similarity(generated):
    conn, _ = generated
    model = find_model(conn)
    vectors = stored(conn, model.doc_table, skb_id(conn, "gen"))
    ids = np.array(sorted(vectors))
    matrix = np.stack([vectors[i][1] for i in ids]).astype(np.float64)
    for q in QUERIES[:4]:
        qv = embed.encode_query(q).astype(np.float64)
        sims = matrix @ qv / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(qv))
        best = ids[np.argsort(-sims, kind="stable")[:10]]
        got = vss.search(conn, "gen", q, 10, vss.Options(exact=True))
        assert got.node_ids == best.tolist()
        assert [h.score for h in got.hits] == pytest.approx(np.sort(sims)[::-1][:10], abs=1e-5)


def reference_multivss(conn, query, k, agg, top):
    """Multi-VSS in numpy over every chunk of the SKB: max, or mean of the `top` best chunks per node."""
    model = find_model(conn)
    chunks = stored(conn, model.chunk_table, skb_id(conn, "gen"))
    qv = embed.encode_query(query).astype(np.float64)
    per_node: dict[int, list[float]] = {}
    for (node, _), (_, vec) in chunks.items():
        vec = vec.astype(np.float64)
        per_node.setdefault(node, []).append(float(vec @ qv / (np.linalg.norm(vec) * np.linalg.norm(qv))))
    scores = {n: max(s) if agg == "max" else float(np.mean(sorted(s, reverse=True)[:top])) for n, s in per_node.items()}
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k], scores


@pytest.mark.parametrize("agg", ["max", "mean"])
def test_multivss_matches_a_numpy_reference(generated, agg):
    conn, _ = generated
    recalls = []
    for q in QUERIES:
        expected, all_scores = reference_multivss(conn, q, 10, agg, 3)
        exact = multivss.search(conn, "gen", q, 10, multivss.Options(agg=agg, exact=True))
        assert exact.node_ids == [n for n, _ in expected]
        assert [h.score for h in exact.hits] == pytest.approx([s for _, s in expected], abs=1e-5)
        approx = multivss.search(conn, "gen", q, 10, multivss.Options(agg=agg))
        for h in approx.hits:            # candidates from HNSW, but each scored over all its chunks
            assert h.score == pytest.approx(all_scores[h.node_id], abs=1e-5)
        recalls.append(len(set(approx.node_ids) & set(exact.node_ids)) / 10)
    assert np.mean(recalls) >= 0.9, recalls


def test_multivss_max_and_mean_differ_sensibly(generated):
    conn, _ = generated
    differ = 0
    for q in QUERIES:
        best = {h.node_id: h.score for h in multivss.search(conn, "gen", q, 300,
                                                            multivss.Options(agg="max", exact=True)).hits}
        mean = {h.node_id: h.score for h in multivss.search(conn, "gen", q, 300,
                                                            multivss.Options(agg="mean", exact=True)).hits}
        top1 = {h.node_id: h.score for h in multivss.search(conn, "gen", q, 300,
                                                            multivss.Options(agg="mean", top=1, exact=True)).hits}
        assert set(best) == set(mean) == set(top1) and len(best) == 300
        assert all(mean[n] <= best[n] + 1e-9 for n in best)                  # a mean never beats the best chunk
        assert all(top1[n] == pytest.approx(best[n], abs=1e-9) for n in best)  # the mean of one chunk is the max
        assert any(mean[n] < best[n] - 1e-3 for n in best)
        differ += sorted(best, key=lambda n: -best[n])[:10] != sorted(mean, key=lambda n: -mean[n])[:10]
    assert differ >= len(QUERIES) // 2                                        # the two rank differently


def test_skbs_sharing_a_table_stay_apart(generated):
    conn, _ = generated
    tiny = vss.search(conn, "tiny", "pain relief", 10)
    assert sorted(tiny.node_ids) == [1, 2, 3]                                 # only tiny's 3 nodes, not gen's
    assert len(multivss.search(conn, "tiny", "pain relief", 10).hits) == 3
    assert tiny.trace["sql"].startswith("stark.vss(") and tiny.trace["model"] == "all-MiniLM-L6-v2"


# --- the command line ----------------------------------------------------------------------------

def test_index_and_search_from_the_command_line(cli, tmp_path):
    cli("load", write_bundle(tmp_path / "tiny"))
    first = json.loads(cli("index", "tiny", "--no-lexical", "--chunks", "--json").stdout)["dense"]
    assert first["documents"]["embedded"] == 3
    again = json.loads(cli("index", "tiny", "--no-lexical", "--json").stdout)["dense"]    # chunks as the last build
    assert again["documents"]["embedded"] == 0 and again["chunks"]["embedded"] == 0
    found = json.loads(cli("search", "tiny", "a painkiller", "-m", "vss", "--json").stdout)
    assert found["results"][0]["name"] == "Aspirin" and found["trace"]["method"] == "vss"
    mean = json.loads(cli("search", "tiny", "a painkiller", "-m", "multivss", "-o", "agg=mean", "--json").stdout)
    assert mean["results"][0]["name"] == "Aspirin" and mean["trace"]["agg"] == "mean"
