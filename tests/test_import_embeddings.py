"""Importing STaRK's published embeddings (`candidate_emb_dict.pt`, `query_emb_dict.pt`) as a stored model.

The files are written here with torch.save in STaRK's exact format: a dict of node id (or query id)
-> float tensor, of shape (1, dim) as STaRK's VSS code stores them (`emb.view(1, -1)`) or (dim,) as
its emb_generate.py does. The DB's vectors must equal the file's; vss with an imported query
vector ranks by the imported vectors' cosine (numpy reference) and embeds nothing; bad files fail
with the file named and leave the database unchanged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fake_llm_server import FakeLLMServer, embedding_requests, fake_embedding
from loaders.bundle import BundleSource
from stark_pg.index.dense import build_dense, find_model
from stark_pg.index.imported import import_embeddings
from stark_pg.options import OptionError
from stark_pg.retrieve import vss
from stark_pg.retrieve.results import search_described
from stark_pg.retrieve.vss import MissingQueryVector
from stark_pg.skb.records import LoadError
from stark_pg.skb.store import load_skb

DIM = 12
SKB = "prime-mini"
NODE_IDS = list(range(0, 30))
QUERIES_CSV = "id,query,answer_ids,split\n" + "".join(
    f'{100 + i},"question number {i} about node {i}?","[{i}]",{"train" if i % 2 else "val"}\n' for i in range(6))


def write_skb(path):
    path.mkdir(parents=True, exist_ok=True)
    (path / "nodes.jsonl").write_text("".join(
        json.dumps({"id": i, "type": "disease" if i % 3 else "drug", "name": f"node {i}",
                    "fields": {"details": f"text of node {i}"}}) + "\n" for i in NODE_IDS))
    (path / "edges.tsv").write_text("src\trelation\tdst\n" + "".join(f"{i}\tlinks\t{i + 1}\n" for i in NODE_IDS[:-1]))
    (path / "queries.csv").write_text(QUERIES_CSV)
    return path


@pytest.fixture
def skb(conn, tmp_path):
    load_skb(conn, BundleSource(write_skb(tmp_path / SKB)), SKB)
    return SKB


def stark_files(tmp_path, node_ids=NODE_IDS, query_ids=range(100, 106), dim=DIM, seed=0):
    """candidate_emb_dict.pt with (1, dim) tensors and query_emb_dict.pt with (dim,) ones, as STaRK writes."""
    generator = torch.Generator().manual_seed(seed)
    candidates = {int(i): torch.randn(1, dim, generator=generator) for i in node_ids}
    queries = {int(i): torch.randn(dim, generator=generator) for i in query_ids}
    tmp_path.mkdir(parents=True, exist_ok=True)
    torch.save(candidates, tmp_path / "candidate_emb_dict.pt")
    torch.save(queries, tmp_path / "query_emb_dict.pt")
    return tmp_path / "candidate_emb_dict.pt", tmp_path / "query_emb_dict.pt", candidates, queries


def stored(conn, model="stark-ada-002"):
    table = find_model(conn, model).doc_table
    return {n: v.to_numpy() for n, v in conn.execute(f"select node_id, vec from stark.{table} where skb_id = "
                                                     f"stark.skb_id(%s)", (SKB,))}


def state(conn):
    """What an import may change: registered models, builds and query vectors."""
    return (conn.execute("select count(*) from stark.embedding_model").fetchone()[0],
            conn.execute("select count(*) from stark.embedding_build").fetchone()[0],
            conn.execute("select count(*) from stark.query_vector").fetchone()[0],
            conn.execute("select count(*) from pg_tables where schemaname = 'stark' and tablename like 'emb_%'")
            .fetchone()[0])


def test_the_databases_vectors_are_the_files(conn, skb, tmp_path):
    cand, qry, candidates, queries = stark_files(tmp_path)
    report = import_embeddings(conn, skb, cand, qry)
    assert (report["model"], report["dim"], report["documents"], report["queries"]) == ("stark-ada-002", DIM, 30, 6)
    assert report["nodes_without_vector"] == 0 and report["queries_without_vector"] == 0
    vectors = stored(conn)
    assert set(vectors) == set(candidates)
    for node_id, tensor in candidates.items():
        np.testing.assert_array_equal(vectors[node_id], tensor.view(-1).numpy())
    rows = dict(conn.execute("select query_id, vec from stark.query_vector where model = 'stark-ada-002'").fetchall())
    for query_id, tensor in queries.items():
        np.testing.assert_array_equal(rows[query_id].to_numpy(), tensor.numpy())
    index = f"{find_model(conn, 'stark-ada-002').doc_table}_hnsw__skb"
    skb_id = conn.execute("select stark.skb_id(%s)", (skb,)).fetchone()[0]
    # the new version's index (the replaced version's stays for its readers until the next load)
    assert conn.execute("select count(*) from pg_indexes where indexname = %s", (f"{index}{skb_id}",)).fetchone()[0] == 1


def test_vss_with_an_imported_query_vector_ranks_by_cosine_and_embeds_nothing(conn, skb, tmp_path, monkeypatch):
    cand, qry, candidates, queries = stark_files(tmp_path)
    import_embeddings(conn, skb, cand, qry)

    def no_embedding(*args, **kwargs):
        raise AssertionError("an imported query vector must need no embedding")

    monkeypatch.setattr(vss, "encode_query", no_embedding)
    body = conn.execute("select body from stark.query where query_id = 103").fetchone()[0]
    hits, ranking = search_described(conn, skb, body, vss, vss.Options(model="stark-ada-002", exact=True), k=10)
    q = queries[103].double().numpy()
    matrix = {n: t.view(-1).double().numpy() for n, t in candidates.items()}
    cosine = {n: float(v @ q / np.linalg.norm(v) / np.linalg.norm(q)) for n, v in matrix.items()}
    reference = sorted(cosine, key=lambda n: -cosine[n])[:10]
    assert [h.node_id for h in hits] == reference
    np.testing.assert_allclose([h.score for h in hits], [cosine[n] for n in reference], atol=1e-5)
    assert ranking.trace["query_vector"] == "imported"
    # through the HNSW index too (a 30-node graph is searched exhaustively)
    _, indexed = search_described(conn, skb, body, vss, vss.Options(model="stark-ada-002"), k=10)
    assert indexed.node_ids == reference


def test_a_query_without_an_imported_vector_fails_clearly_or_uses_the_query_model(conn, skb, tmp_path, monkeypatch):
    cand, qry, _, _ = stark_files(tmp_path, query_ids=[100, 101])
    report = import_embeddings(conn, skb, cand, qry)
    assert report["queries_without_vector"] == 4
    with pytest.raises(MissingQueryVector, match="'stark-ada-002' holds imported vectors.*--query-model"):
        vss.search(conn, skb, "a question nobody imported", 5, vss.Options(model="stark-ada-002"))
    # re-imported with a query model: other queries are embedded by it (here a compatible server)
    server = FakeLLMServer().start()
    try:
        server.embedding_dim = DIM
        monkeypatch.setenv("STARK_PG_EMBED_BASE_URL", server.openai_url)
        import_embeddings(conn, skb, cand, qry, query_model="openai:fake-ada")
        ranking = search_described(conn, skb, "a question nobody imported", vss,
                                   vss.Options(model="stark-ada-002", exact=True), k=5)[1]
        assert ranking.trace["query_vector"] == "embedded by openai:fake-ada" and ranking.trace["llm"]["calls"] == 1
        assert embedding_requests(server)[-1]["body"]["input"] == ["a question nobody imported"]
        q = fake_embedding("a question nobody imported", DIM)
        vectors = stored(conn)
        best = max(vectors, key=lambda n: float(vectors[n] @ q) / float(np.linalg.norm(vectors[n])))
        assert ranking.node_ids[0] == best
        body = conn.execute("select body from stark.query where query_id = 100").fetchone()[0]
        calls = len(embedding_requests(server))
        assert vss.search(conn, skb, body, 5, vss.Options(model="stark-ada-002")).trace["query_vector"] == "imported"
        assert len(embedding_requests(server)) == calls
    finally:
        server.stop()


# --- bad files: the file named, the database unchanged -------------------------------------------

def test_bad_files_fail_naming_the_file_and_change_nothing(conn, skb, tmp_path):
    cand, qry, candidates, queries = stark_files(tmp_path / "good")
    before = state(conn)
    cases = {
        "a list": ([t for t in candidates.values()], "expected a dict of id -> tensor"),
        "string keys": ({str(k): v for k, v in candidates.items()}, "key '0' is not an integer id"),
        "mixed dims": ({**candidates, 29: torch.randn(1, DIM + 1)}, f"key 29 has {DIM + 1} dimensions"),
        "a matrix": ({**candidates, 5: torch.randn(2, DIM)}, r"key 5: a vector has shape \(dim,\) or \(1, dim\)"),
        "ints": ({k: torch.ones(DIM, dtype=torch.int64) for k in candidates}, "expected a float tensor"),
        "nan": ({**candidates, 3: torch.full((DIM,), float("nan"))}, "NaN"),
        "empty": ({}, "holds no vectors"),
        "unknown node ids": ({**candidates, 999: torch.randn(DIM), 1000: torch.randn(DIM)},
                             "2 of 32 node ids are not node ids of SKB 'prime-mini' \\(e.g. 999, 1000\\)"),
    }
    for case, (value, message) in cases.items():
        path = tmp_path / f"{case.replace(' ', '_')}.pt"
        torch.save(value, path)
        with pytest.raises(LoadError, match=message) as failed:
            import_embeddings(conn, skb, path, qry)
        assert str(path) in str(failed.value), case
        assert state(conn) == before, case
    wrong_dim = tmp_path / "queries_16.pt"
    torch.save({100: torch.randn(16)}, wrong_dim)
    with pytest.raises(LoadError, match=f"16-dimensional query vectors, but .* holds {DIM}-dimensional") as failed:
        import_embeddings(conn, skb, cand, wrong_dim)
    assert str(wrong_dim) in str(failed.value)
    unknown_query = tmp_path / "query_unknown.pt"
    torch.save({**queries, 7: torch.randn(DIM)}, unknown_query)
    with pytest.raises(LoadError, match="1 of 7 query ids are not query ids"):
        import_embeddings(conn, skb, cand, unknown_query)
    code = tmp_path / "code.pt"
    code.write_bytes(b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03.")
    with pytest.raises(LoadError, match="code.pt"):
        import_embeddings(conn, skb, code, None)
    assert state(conn) == before


def test_unknown_ids_can_be_skipped_and_a_reimport_replaces(conn, skb, tmp_path):
    cand, qry, candidates, _ = stark_files(tmp_path / "a", node_ids=list(range(0, 40)), query_ids=range(98, 104))
    report = import_embeddings(conn, skb, cand, qry, skip_unknown=True)
    assert report["skipped_unknown"] == {"nodes": 10, "queries": 2} and report["documents"] == 30
    assert report["queries"] == 4 and report["queries_without_vector"] == 2
    cand2, qry2, candidates2, _ = stark_files(tmp_path / "b", node_ids=list(range(0, 20)), seed=1)
    again = import_embeddings(conn, skb, cand2, qry2)
    assert again["nodes_without_vector"] == 10
    vectors = stored(conn)
    assert set(vectors) == set(range(20))
    np.testing.assert_array_equal(vectors[4], candidates2[4].view(-1).numpy())


def test_names_of_computed_models_are_refused_and_index_leaves_imported_ones_alone(conn, skb, tmp_path):
    cand, qry, _, _ = stark_files(tmp_path)
    for name in ("all-MiniLM-L6-v2", "default", "openai:text-embedding-ada-002"):
        with pytest.raises(LoadError, match="a name of their own"):
            import_embeddings(conn, skb, cand, qry, name)
    import_embeddings(conn, skb, cand, qry)
    with pytest.raises(OptionError, match="holds vectors imported into 'prime-mini'"):
        build_dense(conn, skb, model="stark-ada-002")
    other = tmp_path / "wide.pt"
    torch.save({i: torch.randn(DIM * 2) for i in NODE_IDS}, other)
    with pytest.raises(LoadError, match=f"model 'stark-ada-002' already holds {DIM}-dimensional"):
        import_embeddings(conn, skb, other, None)


# --- the CLI, and a replacing load ---------------------------------------------------------------

def test_cli_import_search_and_reload(conn, skb, cli, tmp_path):
    cand, qry, candidates, _ = stark_files(tmp_path / "files")
    report = json.loads(cli("import-embeddings", skb, "--candidates", cand, "--queries", qry, "--json").stdout)
    assert report["documents"] == 30 and report["queries"] == 6
    body = conn.execute("select body from stark.query where query_id = 101").fetchone()[0]
    found = json.loads(cli("search", skb, body, "-m", "vss", "-o", "model=stark-ada-002", "--json").stdout)
    assert found["trace"]["query_vector"] == "imported" and len(found["results"]) == 10
    done = cli("search", skb, "not imported", "-m", "vss", "-o", "model=stark-ada-002", expect=1)
    assert "error:" in done.stderr and "holds imported vectors" in done.stderr and "Traceback" not in done.stderr
    bad = tmp_path / "bad.pt"
    torch.save([1, 2], bad)
    done = cli("import-embeddings", skb, "--candidates", bad, expect=1)
    assert f"{bad}: expected a dict" in done.stderr and "Traceback" not in done.stderr
    text = cli("import-embeddings", skb, "--candidates", cand, "--queries", qry).stdout
    assert "30 document vectors, 6 query vectors" in text

    # a replacing load without node 29: its vector goes, the rest stay, the index is rebuilt
    nodes = (tmp_path / SKB / "nodes.jsonl").read_text().splitlines()[:-1]
    (tmp_path / SKB / "nodes.jsonl").write_text("\n".join(nodes) + "\n")
    (tmp_path / SKB / "edges.tsv").write_text("src\trelation\tdst\n0\tlinks\t1\n")
    cli("load", tmp_path / SKB, "--name", skb)
    vectors = stored(conn)
    assert set(vectors) == set(range(29))
    np.testing.assert_array_equal(vectors[7], candidates[7].view(-1).numpy())
    index = f"{find_model(conn, 'stark-ada-002').doc_table}_hnsw__skb"
    skb_id = conn.execute("select stark.skb_id(%s)", (skb,)).fetchone()[0]
    # the new version's index (the replaced version's stays for its readers until the next load)
    assert conn.execute("select count(*) from pg_indexes where indexname = %s", (f"{index}{skb_id}",)).fetchone()[0] == 1
    again = json.loads(cli("search", skb, body, "-m", "vss", "-o", "model=stark-ada-002", "--json").stdout)
    assert again["trace"]["query_vector"] == "imported"


def test_an_evaluation_whose_every_query_failed_exits_non_zero_with_the_first_error(conn, skb, tmp_path, cli):
    """Zeros from a run in which nothing ran are not a result: the table has a failed column, the first
    error is printed, and the command exits 1 (the run stays stored)."""
    cand, qry, _, _ = stark_files(tmp_path, query_ids=[101])       # no vector for any val question
    import_embeddings(conn, skb, cand, qry)
    done = cli("eval", SKB, "-m", "vss", "-o", "model=stark-ada-002", "--split", "val", expect=1)
    header = next(line for line in done.stdout.splitlines() if "hit@1" in line)
    assert header.split("┃")[-2].strip() == "failed"
    assert done.stdout.splitlines()[-2].split("│")[-2].strip() == "3"
    assert "vss: 3 of 3 queries failed (scored 0); the first: MissingQueryVector" in " ".join(done.stderr.split())
    assert done.stderr.strip().splitlines()[-1].startswith("error: every query of vss failed (run ")
    as_json = cli("eval", SKB, "-m", "vss", "-o", "model=stark-ada-002", "--split", "val", "--json", expect=1)
    summary = json.loads(as_json.stdout)["methods"]["vss"]
    assert summary["failed"] == summary["queries"] == 3 and summary["first_error"].startswith("MissingQueryVector")
    # one query with a vector: a partial failure is reported, and the command succeeds
    partial = cli("eval", SKB, "-m", "vss", "-o", "model=stark-ada-002", "--split", "all")
    assert "vss: 5 of 6 queries failed" in " ".join(partial.stderr.split())


def test_an_unwritable_output_folder_is_refused_before_any_query_runs(conn, skb, tmp_path, cli):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = cli("eval", SKB, "-m", "bm25", "--split", "val", "--out", blocker / "report", expect=1)
    assert done.stderr.startswith(f"error: --out {blocker / 'report'}: cannot make the folder")
    assert len(done.stderr.strip().splitlines()) == 1
    assert conn.execute("select count(*) from stark.eval_run").fetchone()[0] == 0
