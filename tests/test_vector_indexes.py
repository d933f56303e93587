"""Vector index settings (issue 18): HNSW's m and ef_construction, halfvec storage, pgvectorscale's DiskANN,
and the search list (`-o ef_search=`, `stark.ef_search`), on the real embedded PostgreSQL.

A synthetic SKB of 3,000 nodes whose document vectors come from a pseudo-model (clustered random unit
vectors, 48 dimensions) stored with the hashes of the documents they stand for, so `build_dense` and
`stark-pg index` find nothing to embed and never load a model: they only build indexes. Each index is
checked in the catalog (access method, operator class, reloptions), and its searches against an exact
search in numpy. The SKB is small enough that the planner would search it exactly, so the searches
run with enable_sort = off (as tests/test_dense.py does) and the index's scan counter proves it was used.
"""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest
from psycopg import sql as pgsql

from conftest import cli_runner, cloned_database
from stark_pg.db import connect
from stark_pg.index.dense import IndexSettings, ModelTables, build_dense, statement, vector_index_name
from stark_pg.index.refresh import refresh_indexes
from stark_pg.options import OptionError
from stark_pg.resources import queries
from stark_pg.retrieve.vss import ef_search_set

MODEL = "clustered-test-48"
DIM = 48
K = 10


def unit_vectors(rng, centers, n):
    vectors = centers[rng.integers(0, len(centers), n)] + rng.standard_normal((n, DIM)) * 0.3
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def prepare(url: str, nodes: int = 3000) -> None:
    """SKB `syn` with pseudo-model vectors whose hashes are those of the documents a build renders."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.skb.store import load_skb

    with connect(url) as conn:
        load_skb(conn, SyntheticSource(nodes=nodes, seed=11, queries=0, edges_per_node=1), name="syn")
        row = queries().register_model(conn, name=MODEL, dim=DIM)
        tables = ModelTables(row[0], MODEL, *row[1:])
        conn.execute(statement("create_tables", tables))
        ids = [r[0] for r in conn.execute("select node_id from stark.node where skb_id = stark.skb_id('syn') "
                                          "order by node_id")]
        rng = np.random.default_rng(0)
        vectors = unit_vectors(rng, rng.standard_normal((200, DIM)), len(ids))
        conn.execute(pgsql.SQL(   # nothing is stale: a build embeds nothing and never loads a model
            "insert into {} (skb_id, node_id, doc_hash, vec) "
            "select stark.skb_id('syn'), u.id, md5(stark.render_document(stark.skb_id('syn'), u.id, true, 25)), u.v "
            "from unnest(%s::bigint[], %s::vector[]) u(id, v)").format(pgsql.Identifier("stark", tables.doc_table)),
            (ids, list(vectors)))


@pytest.fixture(scope="module")
def skb_url(server_url, template_db):
    with cloned_database(server_url, template_db, "stark_vecidx") as url:
        prepare(url)
        yield url


@pytest.fixture(scope="module")
def data(skb_url):
    """(node ids, their vectors, query vectors, exact top-K per query by numpy)."""
    with connect(skb_url) as conn:
        table = conn.execute("select doc_table from stark.embedding_model where name = %s", (MODEL,)).fetchone()[0]
        rows = conn.execute(f"select node_id, vec from stark.{table} where skb_id = stark.skb_id('syn')").fetchall()
    ids = np.array([r[0] for r in rows])
    matrix = np.vstack([r[1].to_numpy() for r in rows])
    rng = np.random.default_rng(1)
    queries_ = [matrix[i] + rng.standard_normal(DIM).astype(np.float32) * 0.05 for i in rng.integers(0, len(ids), 20)]
    truth = []
    for q in queries_:
        scores = matrix @ q / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
        truth.append(list(ids[np.argsort(-scores, kind="stable")[:K]]))
    return ids, matrix, queries_, truth


@pytest.fixture
def conn(skb_url):
    with connect(skb_url) as connection:
        yield connection


def doc_table(conn) -> str:
    return conn.execute("select doc_table from stark.embedding_model where name = %s", (MODEL,)).fetchone()[0]


def catalog(conn) -> dict:
    """{index name: (access method, operator class, reloptions, definition)} of the SKB's vector indexes."""
    rows = conn.execute(
        "select i.relname, a.amname, o.opcname, i.reloptions, pg_get_indexdef(i.oid) "
        "from pg_class i join pg_index x on x.indexrelid = i.oid join pg_am a on a.oid = i.relam "
        "join pg_opclass o on o.oid = x.indclass[0] "
        "where i.relnamespace = 'stark'::regnamespace and i.relname like %s", (f"{doc_table(conn)}\\_%\\_\\_skb%",))
    return {r[0]: r[1:] for r in rows}


def index_scans(conn, name: str) -> int:
    """Index scans so far, this session's included (its pending statistics flushed first)."""
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    return conn.execute("select coalesce(idx_scan, 0) from pg_stat_user_indexes where indexrelname = %s",
                        (name,)).fetchone()[0]


def search(conn, q, k=K, ef=None, exact=False):
    conn.execute("set enable_sort = off")
    try:
        with ef_search_set(conn, ef):
            return conn.execute("select node_id, score from stark.vss('syn', %s, %s, %s, %s)",
                                (q, k, MODEL, exact)).fetchall()
    finally:
        conn.execute("reset enable_sort")


def overlap(found, truth) -> float:
    return float(np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth)]))


def build(conn, **settings):
    return build_dense(conn, "syn", model=MODEL, multi_vector=False, **settings)


# --- HNSW settings ------------------------------------------------------------------------------

def test_hnsw_m_and_ef_construction_are_the_index_and_a_rebuild_reuses_them(conn, data):
    report = build(conn, m=8, ef_construction=40)
    assert report["documents"]["embedded"] == 0                      # only the index was built
    name = vector_index_name(doc_table(conn), conn.execute("select stark.skb_id('syn')").fetchone()[0])
    assert report["indexes_built"] == [name]
    method, opclass, reloptions, _ = catalog(conn)[name]
    assert (method, opclass, sorted(reloptions)) == ("hnsw", "vector_cosine_ops", ["ef_construction=40", "m=8"])
    stored = dict(queries().builds_of_skb(conn, skb_id=conn.execute("select stark.skb_id('syn')").fetchone()[0]))
    assert {key: stored[MODEL][key] for key in ("index", "storage", "m", "ef_construction")} == \
        {"index": "hnsw", "storage": "vector", "m": 8, "ef_construction": 40}

    # a plain re-run, and the refresh a replacing load runs, keep the index and its settings
    assert build(conn)["indexes_built"] == []
    assert refresh_indexes(conn, "syn", ["dense"])["dense"][0]["indexes_built"] == []
    assert sorted(catalog(conn)[name][2]) == ["ef_construction=40", "m=8"]

    # other settings: the index is rebuilt with them (ef_construction as before)
    assert build(conn, m=12)["indexes_built"] == [name]
    assert sorted(catalog(conn)[name][2]) == ["ef_construction=40", "m=12"]

    _, _, queries_, truth = data
    before = index_scans(conn, name)
    found = [[r[0] for r in search(conn, q)] for q in queries_]
    assert overlap(found, truth) >= 0.9
    assert index_scans(conn, name) >= before + len(queries_)


def test_ef_search_sets_the_candidate_list_for_the_transaction_only(conn, data):
    _, _, queries_, truth = data
    build(conn, index="hnsw", storage="vector", m=16, ef_construction=64)
    conn.execute("set hnsw.ef_search = 55")
    with ef_search_set(conn, 7):
        saved = conn.execute("select stark.vector_search_settings('hnsw', 10)").fetchone()[0]
        assert conn.execute("select current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')"
                            ).fetchone() == ("7", "relaxed_order")
        conn.execute("select stark.vector_search_restore(%s)", (saved,))
    assert conn.execute("select current_setting('stark.ef_search', true)").fetchone()[0] in ("", None)
    # without stark.ef_search: at least max(k, 100)
    with conn.transaction():
        conn.execute("select stark.vector_search_settings('hnsw', 300)")
        assert conn.execute("show hnsw.ef_search").fetchone()[0] == "300"
    assert conn.execute("show hnsw.ef_search").fetchone()[0] == "55"

    # a candidate list smaller than k still gives k results (iterative scan); a larger one finds more
    low = [[r[0] for r in search(conn, q, ef=1)] for q in queries_]
    high = [[r[0] for r in search(conn, q, ef=400)] for q in queries_]
    assert all(len(f) == K for f in low)
    assert overlap(high, truth) >= overlap(low, truth)
    assert overlap(high, truth) >= 0.95
    assert conn.execute("show hnsw.ef_search").fetchone()[0] == "55"


# --- halfvec ------------------------------------------------------------------------------------

def test_halfvec_storage_is_a_half_precision_index_with_the_same_results(conn, data):
    _, matrix, queries_, truth = data
    skb = conn.execute("select stark.skb_id('syn')").fetchone()[0]
    name = vector_index_name(doc_table(conn), skb)
    build(conn, index="hnsw", storage="vector", m=16, ef_construction=64)
    vector_size = conn.execute("select pg_relation_size(%s::regclass)", (f"stark.{name}",)).fetchone()[0]
    single = [search(conn, q) for q in queries_]

    report = build(conn, storage="halfvec")
    assert report["indexes_built"] == [name] and report["index"]["storage"] == "halfvec"
    method, opclass, reloptions, definition = catalog(conn)[name]
    assert (method, opclass) == ("hnsw", "halfvec_cosine_ops")
    assert f"(vec)::halfvec({DIM})" in definition and sorted(reloptions) == ["ef_construction=64", "m=16"]
    assert conn.execute("select method, storage, dim from stark.vector_index(%s, %s)", (doc_table(conn), skb)
                        ).fetchone() == ("hnsw", "halfvec", DIM)
    half_size = conn.execute("select pg_relation_size(%s::regclass)", (f"stark.{name}",)).fetchone()[0]
    assert half_size < vector_size

    before = index_scans(conn, name)
    half = [search(conn, q) for q in queries_]
    assert index_scans(conn, name) >= before + len(queries_)
    assert overlap([[r[0] for r in h] for h in half], [[r[0] for r in s] for s in single]) >= 0.9
    assert overlap([[r[0] for r in h] for h in half], truth) >= 0.9
    by_id = dict(zip(data[0], matrix))
    for q, rows in zip(queries_, half):            # scores are single precision: the table keeps full vectors
        assert [s for _, s in rows] == sorted((s for _, s in rows), reverse=True)
        for node_id, score in rows:
            v = by_id[node_id]
            assert score == pytest.approx(float(v @ q / (np.linalg.norm(v) * np.linalg.norm(q))), abs=1e-5)


# --- DiskANN ------------------------------------------------------------------------------------

def test_diskann_index_where_vectorscale_exists(conn, data):
    from stark_pg.db.extensions import extensions

    if not extensions(conn, ("vectorscale",))[0].usable:
        pytest.skip("this server has no pgvectorscale")
    _, _, queries_, truth = data
    skb = conn.execute("select stark.skb_id('syn')").fetchone()[0]
    report = build(conn, index="diskann")
    name = vector_index_name(doc_table(conn), skb, "diskann")
    assert report["indexes_built"] == [name] and report["notices"] == []
    indexes = catalog(conn)
    assert vector_index_name(doc_table(conn), skb) not in indexes            # the HNSW index it replaced is gone
    assert indexes[name][:2] == ("diskann", "vector_cosine_ops")
    assert f"WHERE (skb_id = {skb})" in indexes[name][3]
    assert sorted(conn.execute("select unnest(reloptions) from pg_class where relname = %s", (name,)).fetchall()) == [
        ("num_neighbors=50",), ("search_list_size=100",)]                  # pgvectorscale's defaults, written out
    assert conn.execute("select method from stark.vector_index(%s, %s)", (doc_table(conn), skb)).fetchone()[0] == "diskann"
    before = index_scans(conn, name)
    found = [[r[0] for r in search(conn, q, ef=200)] for q in queries_]
    assert index_scans(conn, name) >= before + len(queries_)
    assert all(len(f) == K for f in found)
    assert overlap(found, truth) >= 0.95            # 200 candidates re-scored with the full vectors, not 50
    with conn.transaction():                        # the re-scored candidates follow the search list, then go back
        before_rescore = conn.execute("select current_setting('diskann.query_rescore')").fetchone()[0]
        conn.execute("select set_config('stark.ef_search', '300', true)")
        saved = conn.execute("select stark.vector_search_settings('diskann', 10)").fetchone()[0]
        assert conn.execute("select current_setting('diskann.query_rescore'), "
                            "current_setting('diskann.query_search_list_size')").fetchone() == ("300", "300")
        conn.execute("select stark.vector_search_restore(%s)", (saved,))
        assert conn.execute("select current_setting('diskann.query_rescore')").fetchone()[0] == before_rescore
    assert build(conn)["indexes_built"] == []                               # the settings are kept
    build(conn, index="hnsw")                                               # back, for the other tests
    assert name not in catalog(conn)


def test_diskann_where_vectorscale_cannot_be_created_is_hnsw_with_a_notice(db_url):
    """A role that may build indexes but not create the (untrusted) vectorscale extension, in a database
    that does not have it yet: as on a managed server without pgvectorscale."""
    import uuid

    from psycopg.conninfo import make_conninfo

    prepare(db_url, nodes=300)
    role = f"vec_nosuper_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(pgsql.SQL("create role {} login").format(pgsql.Identifier(role)))
        admin.execute(pgsql.SQL("grant postgres to {}").format(pgsql.Identifier(role)))   # owns what postgres owns
    try:
        with connect(make_conninfo(db_url, options=f"-c role={role}")) as conn:     # SET ROLE at the start
            assert conn.execute("select current_user").fetchone()[0] == role
            assert not conn.execute("select rolsuper from pg_roles where rolname = current_user").fetchone()[0]
            report = build(conn, index="diskann")
            assert report["notices"] == ["vectorscale (pgvectorscale) is not available on this server: "
                                         "built HNSW instead of DiskANN"]
            assert report["index"]["index"] == "hnsw"
            assert {v[0] for v in catalog(conn).values()} == {"hnsw"}
            assert conn.execute("select count(*) from pg_extension where extname = 'vectorscale'").fetchone()[0] == 0
    finally:
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute(pgsql.SQL("drop owned by {}").format(pgsql.Identifier(role)))
            admin.execute(pgsql.SQL("drop role {}").format(pgsql.Identifier(role)))


# --- bad values ---------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, message", [
    ({"m": 1}, "HNSW m 1: must be an integer from 2 to 100"),
    ({"m": 101}, "HNSW m 101: must be an integer from 2 to 100"),
    ({"ef_construction": 2000}, "HNSW ef_construction 2000: must be an integer from 4 to 1000"),
    ({"m": 32, "ef_construction": 40}, "HNSW ef_construction 40 must be at least 2 \\* m \\(64\\)"),
    ({"storage": "float16"}, "storage 'float16': expected one of vector, halfvec"),
    ({"index": "ivfflat"}, "vector index 'ivfflat': expected one of hnsw, diskann"),
    ({"index": "diskann", "storage": "halfvec"}, "DiskANN indexes single-precision vectors only"),
])
def test_bad_index_settings_are_one_line_errors(conn, settings, message):
    with pytest.raises(OptionError, match=message):
        IndexSettings.resolve(None, **settings)
    with pytest.raises(OptionError, match=message):
        build(conn, **settings)


def test_a_bad_stark_ef_search_is_a_clear_sql_error(conn, data):
    _, _, queries_, _ = data
    for value in ("0", "1001", "many"):
        with conn.transaction():
            conn.execute("select set_config('stark.ef_search', %s, true)", (value,))
            with pytest.raises(psycopg.errors.InvalidParameterValue,
                               match="stark.ef_search must be an integer from 1 to 1000"):
                with conn.transaction():
                    conn.execute("select * from stark.vss('syn', %s, 10, %s)", (queries_[0], MODEL))


def test_the_cli_builds_and_reports_index_settings(skb_url):
    cli = cli_runner(skb_url)
    done = cli("index", "syn", "--no-lexical", "--no-multi-vector", "--model", MODEL, "--hnsw-m", "10",
               "--hnsw-ef-construction", "50", "--json")
    report = json.loads(done.stdout)["dense"]
    assert report["index"] == {"index": "hnsw", "storage": "vector", "m": 10, "ef_construction": 50}
    done = cli("index", "syn", "--no-lexical", "--no-multi-vector", "--model", MODEL)
    assert "0 HNSW (m=10, ef_construction=50, vector) indexes built" in " ".join(done.stdout.split())
    for args, message in ((["--hnsw-m", "0"], "error: HNSW m 0: must be an integer from 2 to 100"),
                          (["--storage", "half"], "error: storage 'half': expected one of vector, halfvec"),
                          (["--vector-index", "diskann", "--storage", "halfvec"],
                           "error: storage halfvec: DiskANN indexes single-precision vectors only")):
        done = cli("index", "syn", "--no-lexical", "--model", MODEL, *args, expect=1)
        assert done.stderr.strip().splitlines() == [message] or message in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    for option in ("ef_search=0", "ef_search=1001", "ef_search=many"):
        done = cli("search", "syn", "x", "--method", "vss", "-o", option, expect=1)
        assert f"--option '{option}'" in done.stderr and len(done.stderr.strip().splitlines()) == 1
