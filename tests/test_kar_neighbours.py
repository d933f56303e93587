"""`stark.kar_neighbours` (KAR steps 3-4 in SQL) against a plain-Python breadth-first reference
(tests/kar_reference.py), on the real slice and on generated graphs whose vectors tie on purpose, so
that the cap's and DRF's tie rules decide; and DRF's order against numpy's cosine order."""

from __future__ import annotations

import json
import random

import numpy as np
import psycopg
import pytest

from kar_reference import cosines, kar_neighbours as reference
from stark_pg.db import connect
from stark_pg.index.dense import ModelTables, statement

SLICE = "stark-prime-ibd"
TOY_MODEL = "toy-4d"
# Vectors from a few exactly representable values: many nodes share one, so similarities tie exactly.
TOY_VECTORS = [(1, 0, 0, 0), (0.5, 0.5, 0, 0), (0, 1, 0, 0), (0.5, 0, 0.5, 0), (0, 0, 0, 1), (-1, 0, 0, 0)]


def run_sql(conn, skb: str, anchors, hops: int, query, k, cap, model: str, directed: bool = False,
            max_frontier: int | None = None, frontier: bool = False) -> list[tuple]:
    """stark.kar_neighbours' rows; no bound on a hop's frontier unless given (the reference has none)."""
    rows = conn.execute("select anchor, hop, relations, path, neighbour, similarity, rank, frontier "
                        "from stark.kar_neighbours(%s, %s::bigint[], %s, %s::vector, %s, %s, %s, %s, "
                        "max_frontier => %s)",
                        (skb, list(anchors), hops, None if query is None else str(list(map(float, query))), k, cap,
                         model, directed, max_frontier)).fetchall()
    return [tuple(r) if frontier else tuple(r)[:7] for r in rows]


def assert_same(got: list[tuple], want: list[tuple]) -> None:
    assert [r[:5] + (r[6],) for r in got] == [r[:5] + (r[6],) for r in want]
    for g, w in zip(got, want):
        assert (g[5] is None) == (w[5] is None)
        if g[5] is not None:
            assert g[5] == pytest.approx(w[5], abs=1e-6)


# ------------------------------------------------------------------------------------------------
# The real slice (MiniLM document vectors)

@pytest.fixture(scope="module")
def slice_graph(ibd_indexed_url):
    with connect(ibd_indexed_url) as conn:
        skb_id = conn.execute("select stark.skb_id(%s)", (SLICE,)).fetchone()[0]
        edges = conn.execute("select src, relation, dst from stark.edge where skb_id = %s", (skb_id,)).fetchall()
        vectors = {int(n): np.array(json.loads(v), dtype=np.float32) for n, v in conn.execute(
            "select node_id, vec::text from stark.emb_doc_1 where skb_id = %s", (skb_id,))}
    return ibd_indexed_url, edges, vectors


def sql_similarities(conn, anchors, hops, query, directed=False) -> dict[int, float]:
    """Every reachable node's similarity as the SQL computed it (uncapped, all of them): the reference
    ranks by these, so that floating-point near-ties cannot make the comparison flaky; the order
    against numpy's own cosines is checked separately below."""
    return {r[4]: r[5] for r in run_sql(conn, SLICE, anchors, hops, query, None, None, "all-MiniLM-L6-v2", directed)}


@pytest.mark.parametrize("hops,k,cap", [(1, 10, None), (2, 10, 100), (2, 10, 5), (2, None, 3), (3, 5, 20)])
def test_slice_equals_reference(slice_graph, hops, k, cap):
    url, edges, vectors = slice_graph
    rng = random.Random(hops * 100 + (cap or 0))
    nodes_with_edges = sorted({s for s, _, _ in edges})
    with connect(url) as conn:
        for _ in range(12):
            anchors = rng.sample(nodes_with_edges, rng.randint(1, 3))
            query = vectors[rng.choice(sorted(vectors))]
            sims = sql_similarities(conn, anchors, hops, query)
            got = run_sql(conn, SLICE, anchors, hops, query, k, cap, "all-MiniLM-L6-v2")
            assert_same(got, reference(edges, sims, anchors, hops, k, cap))
            assert got, "anchors with edges have neighbours"


def test_slice_without_query_equals_reference(slice_graph):
    """No query vector (KAR w/o DRF asks for this): no similarities; the cap and the order fall to node ids."""
    url, edges, _ = slice_graph
    rng = random.Random(7)
    with connect(url) as conn:
        for _ in range(10):
            anchors = rng.sample(sorted({s for s, _, _ in edges}), 2)
            got = run_sql(conn, SLICE, anchors, 2, None, None, 15, "all-MiniLM-L6-v2")
            assert_same(got, reference(edges, {}, anchors, 2, None, 15))
            assert all(r[5] is None for r in got)


def test_drf_order_equals_numpy_cosine_order(slice_graph):
    url, edges, vectors = slice_graph
    rng = random.Random(3)
    with connect(url) as conn:
        for _ in range(10):
            anchors = rng.sample(sorted({s for s, _, _ in edges}), 2)
            query = vectors[rng.choice(sorted(vectors))]
            numpy_cos = cosines(vectors, query)
            rows = run_sql(conn, SLICE, anchors, 2, query, None, None, "all-MiniLM-L6-v2")
            for anchor in anchors:
                mine = [r for r in rows if r[0] == anchor]
                assert [r[6] for r in mine] == list(range(1, len(mine) + 1))
                sims = [numpy_cos[r[4]] for r in mine]
                assert [r[5] for r in mine] == pytest.approx(sims, abs=1e-5)
                # ranks follow numpy's cosine, descending (up to float noise between near-equal values)
                assert all(a >= b - 1e-6 for a, b in zip(sims, sims[1:]))
                # and the top 10 by numpy are the top 10 the SQL keeps (ties at the border aside)
                by_numpy = sorted(mine, key=lambda r: -numpy_cos[r[4]])[:10]
                assert {r[4] for r in mine[:10]} == {r[4] for r in by_numpy} or \
                    abs(numpy_cos[mine[9][4]] - numpy_cos[by_numpy[9][4]]) < 1e-6


# ------------------------------------------------------------------------------------------------
# Generated graphs with tied vectors

def toy_bundle(directory, rng: random.Random, n_nodes: int, n_edges: int, both_ways: bool) -> list[tuple]:
    directory.mkdir()
    with open(directory / "nodes.jsonl", "w") as f:
        for i in range(1, n_nodes + 1):
            f.write(json.dumps({"id": i, "type": rng.choice(["a", "b", "c"]), "name": f"n{i}", "fields": {}}) + "\n")
    edges = set()
    hubs = [1, 2]                                 # two hubs, so the cap matters
    while len(edges) < n_edges:
        src = rng.choice(hubs) if rng.random() < 0.3 else rng.randint(1, n_nodes)
        dst = rng.randint(1, n_nodes)
        if src != dst:
            relation = rng.choice(["r1", "r2", "r3"])
            edges.add((src, relation, dst))
            if both_ways:
                edges.add((dst, relation, src))
    with open(directory / "edges.tsv", "w") as f:
        f.write("src\trelation\tdst\n")
        f.writelines(f"{s}\t{r}\t{d}\n" for s, r, d in sorted(edges))
    (directory / "queries.csv").write_text("id,query,answer_ids,split\n1,q,[1],train\n")
    return sorted(edges)


def load_toy(conn, directory, rng: random.Random, n_nodes: int, n_edges: int, both_ways: bool) -> tuple[list[tuple], int]:
    """A generated toy graph written as a bundle in `directory` and loaded as SKB `directory.name`:
    its edges (for the references) and its skb_id."""
    from loaders.bundle import BundleSource
    from stark_pg.skb.store import load_skb

    edges = toy_bundle(directory, rng, n_nodes, n_edges, both_ways)
    return edges, load_skb(conn, BundleSource(directory)).skb_id


def toy_vectors(conn, skb_id: int, n_nodes: int, rng: random.Random) -> dict[int, np.ndarray]:
    """A 4-d pseudo model; a tenth of the nodes get no vector (similarity NULL)."""
    row = conn.execute("select model_id, doc_table, chunk_table from stark.embedding_model where name = %s",
                       (TOY_MODEL,)).fetchone()
    if row is None:
        row = conn.execute("insert into stark.embedding_model (name, dim, doc_table, chunk_table) "
                           "values (%s, 4, 'emb_doc_toy', 'emb_chunk_toy') returning model_id, doc_table, chunk_table",
                           (TOY_MODEL,)).fetchone()
        conn.execute(statement("create_tables", ModelTables(row[0], TOY_MODEL, 4, row[1], row[2])))
    vectors = {}
    for node in range(1, n_nodes + 1):
        if rng.random() < 0.1:
            continue
        vectors[node] = np.array(rng.choice(TOY_VECTORS), dtype=np.float64)
        conn.execute(f"insert into stark.{row[1]} (skb_id, node_id, doc_hash, vec) values (%s, %s, 'toy', %s)",
                     (skb_id, node, str([float(x) for x in vectors[node]])))
    return vectors


# With the graph summary (`summary`), an SKB whose every edge is stored both ways is read through its
# outgoing edges alone (stark.edge_symmetry); one with one-way edges still reads both directions.
@pytest.mark.parametrize("seed,both_ways,summary", [(1, True, False), (2, False, False), (3, True, True),
                                                    (4, False, True)])
def test_generated_graphs_equal_reference(conn, tmp_path, seed, both_ways, summary):
    from stark_pg.index.graph import build_graph_summary

    rng = random.Random(seed)
    n_nodes = 120
    edges, skb_id = load_toy(conn, tmp_path / f"toy{seed}", rng, n_nodes, 500, both_ways)
    vectors = toy_vectors(conn, skb_id, n_nodes, rng)
    skb = f"toy{seed}"
    if summary:
        assert (build_graph_summary(conn, skb)["one_way_edges"] == 0) == both_ways
    ties = 0
    for trial in range(30):
        anchors = rng.sample([1, 2, *range(3, n_nodes + 1)], rng.randint(1, 3))
        if trial % 3 == 0:
            anchors[0] = 1                                   # a hub
        query = np.array(rng.choice(TOY_VECTORS[:5]), dtype=np.float64)
        hops, k, cap = rng.choice([1, 2, 3]), rng.choice([None, 3, 10]), rng.choice([None, 1, 4, 25])
        directed = rng.random() < 0.5
        sims = cosines(vectors, query)
        got = run_sql(conn, skb, anchors, hops, query, k, cap, TOY_MODEL, directed)
        want = reference(edges, sims, anchors, hops, k, cap, directed)
        assert_same(got, want)
        values = [r[5] for r in got]
        ties += len(values) - len(set(values))
    assert ties > 0, "the generated vectors should produce tied similarities"


def test_cap_keeps_the_most_similar_and_breaks_ties_by_node_id(conn, tmp_path):
    """A star: anchor 1 linked to 2..9; with cap 3 the three most similar are kept, and among equals
    the smaller node ids; only the kept nodes are expanded (node 10 hangs off a dropped one)."""
    from loaders.bundle import BundleSource
    from stark_pg.skb.store import load_skb

    d = tmp_path / "star"
    d.mkdir()
    (d / "nodes.jsonl").write_text("".join(json.dumps({"id": i, "type": "t", "name": f"n{i}", "fields": {}}) + "\n"
                                           for i in range(1, 12)))
    (d / "edges.tsv").write_text("src\trelation\tdst\n" + "".join(f"1\tr\t{i}\n" for i in range(2, 10))
                                 + "9\tr\t10\n3\tr\t11\n")
    (d / "queries.csv").write_text("id,query,answer_ids,split\n1,q,[1],train\n")
    skb_id = load_skb(conn, BundleSource(d)).skb_id
    rng = random.Random(0)
    toy_vectors(conn, skb_id, 0, rng)                        # registers the model only
    table = conn.execute("select doc_table from stark.embedding_model where name = %s", (TOY_MODEL,)).fetchone()[0]
    same, worse = "[0.5,0.5,0,0]", "[0,0,0,1]"
    for node, vec in [(2, worse), (3, same), (4, same), (5, same), (6, same), (7, worse), (8, worse), (9, worse),
                      (10, "[1,0,0,0]"), (11, worse)]:
        conn.execute(f"insert into stark.{table} (skb_id, node_id, doc_hash, vec) values (%s, %s, 'toy', %s)",
                     (skb_id, node, vec))
    rows = run_sql(conn, "star", [1], 2, [1, 0, 0, 0], None, 3, TOY_MODEL)
    hop1 = [r[4] for r in rows if r[1] == 1]
    assert sorted(hop1) == [3, 4, 5]                         # equal similarity: smallest ids win
    assert [r[4] for r in rows if r[1] == 2] == [11]         # 10 hangs off 9, which the cap dropped
    uncapped = run_sql(conn, "star", [1], 2, [1, 0, 0, 0], 1, None, TOY_MODEL)
    assert [(r[4], r[3]) for r in uncapped] == [(10, [9, 10])]


def test_the_frontier_bound_scores_the_most_linked_and_says_when_it_cut(conn, tmp_path):
    """A star of 8 around anchor 1, hop 2 behind it: `frontier` is the most new nodes a hop reached (8,
    before the bound); max_frontier 3 scores the three new nodes with the most edges from the kept ones
    (then the smallest ids), and the rows say it reached more; a bound at the frontier changes nothing."""
    from loaders.bundle import BundleSource
    from stark_pg.skb.store import load_skb

    d = tmp_path / "fan"
    d.mkdir()
    (d / "nodes.jsonl").write_text("".join(json.dumps({"id": i, "type": "t", "name": f"n{i}", "fields": {}}) + "\n"
                                           for i in range(1, 13)))
    # 1 -> 2..9; 6 and 8 also reach 10, 9 reaches 10, 11 and 12 (hop 2: 10 via three kept nodes)
    (d / "edges.tsv").write_text("src\trelation\tdst\n" + "".join(f"1\tr\t{i}\n" for i in range(2, 10))
                                 + "6\tr\t10\n8\tr\t10\n9\tr\t10\n9\tr\t11\n9\tr\t12\n")
    (d / "queries.csv").write_text("id,query,answer_ids,split\n1,q,[1],train\n")
    skb_id = load_skb(conn, BundleSource(d)).skb_id
    toy_vectors(conn, skb_id, 0, random.Random(0))
    table = conn.execute("select doc_table from stark.embedding_model where name = %s", (TOY_MODEL,)).fetchone()[0]
    for node in range(2, 13):
        conn.execute(f"insert into stark.{table} (skb_id, node_id, doc_hash, vec) values (%s, %s, 'toy', %s)",
                     (skb_id, node, "[1,0,0,0]" if node == 12 else "[0.5,0.5,0,0]"))
    exact = run_sql(conn, "fan", [1], 2, [1, 0, 0, 0], None, None, TOY_MODEL, frontier=True)
    assert {r[7] for r in exact} == {8} and {r[4] for r in exact} == set(range(2, 13))
    assert run_sql(conn, "fan", [1], 2, [1, 0, 0, 0], None, None, TOY_MODEL, max_frontier=8, frontier=True) == exact
    bounded = run_sql(conn, "fan", [1], 2, [1, 0, 0, 0], None, None, TOY_MODEL, max_frontier=3, frontier=True)
    assert {r[7] for r in bounded} == {8}                   # reached 8 at hop 1: more than the bound
    assert sorted(r[4] for r in bounded if r[1] == 1) == [2, 3, 4]      # each linked once: the smallest ids
    assert [r[4] for r in bounded if r[1] == 2] == []       # hop 2 from the kept 2, 3, 4 reaches nothing new
    deep = run_sql(conn, "fan", [6, 8, 9], 1, [1, 0, 0, 0], None, None, TOY_MODEL, max_frontier=1, frontier=True)
    assert {r[0]: r[4] for r in deep} == {6: 1, 8: 1, 9: 1}        # one link each: the smallest id, 1
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="max_frontier must be positive"):
        run_sql(conn, "fan", [1], 2, [1, 0, 0, 0], None, None, TOY_MODEL, max_frontier=0)
    from stark_pg.retrieve.expand import kar

    lines = kar.explain([], [], "", kar.Options(max_frontier=3), {1: 8})["3-4. neighbours"]
    assert any("reached 8 new nodes; the 3 most linked were scored" in line for line in lines)


def test_bad_arguments_are_named(conn):
    with pytest.raises(psycopg.errors.RaiseException, match="no SKB named 'nope'"):
        conn.execute("select * from stark.kar_neighbours('nope', array[1]::bigint[])")
    for args, message in [("hops => 0", "hops must be between 1 and 6"), ("k => 0", "k must be positive"),
                          ("per_hop_cap => -1", "per_hop_cap must be positive")]:
        with pytest.raises(psycopg.errors.RaiseException, match=message):
            conn.execute("insert into stark.skb (name) values ('x') on conflict do nothing")
            conn.execute(f"select * from stark.kar_neighbours('x', array[1]::bigint[], {args})")


# ------------------------------------------------------------------------------------------------
# last_hop => 'index': the last hop walks the HNSW index (approximate). Its rows must still be valid
# (each neighbour reached at that hop, through that path and those relations, never earlier), its top
# k close to the exact one, and an anchor whose last frontier is small must get exactly the exact rows.

def run_index(conn, skb: str, anchors, hops: int, query, k, cap, model: str, directed: bool = False,
              min_rows: int = 0, overfetch: int | None = None) -> list[tuple]:
    conn.execute("select set_config('stark.kar_index_min_rows', %s, false), "
                 "set_config('stark.kar_index_overfetch', %s, false)", (str(min_rows), str(overfetch or "")))
    rows = conn.execute("select anchor, hop, relations, path, neighbour, similarity, rank "
                        "from stark.kar_neighbours(%s, %s::bigint[], %s, %s::vector, %s, %s, %s, %s, 'index')",
                        (skb, list(anchors), hops, str(list(map(float, query))), k, cap, model, directed)).fetchall()
    return [tuple(r) for r in rows]


def edge_rows(adj, frontiers, hops: int, cap) -> int:
    """The edge rows the exact last hop (hops >= 2) would read from the previous hop's kept nodes (what
    stark.kar_index_min_rows is compared with)."""
    kept = frontiers[hops - 2] if cap is None else frontiers[hops - 2][:cap]
    return sum(len(adj.get(node, ())) for node, *_ in kept)


def assert_valid(rows: list[tuple], adj, sims: dict[int, float], anchors, hops: int, k: int, cap) -> None:
    """Every row: a node first reached at its hop (so never earlier), among the nodes the cap kept for
    hops before the last, with the path, relations and similarity the exact hop gives it; at most k
    rows per anchor, ranked 1.. by similarity."""
    from kar_reference import hop_frontiers

    for anchor in set(anchors):
        mine = [r for r in rows if r[0] == anchor]
        assert len(mine) <= k
        assert [r[6] for r in mine] == list(range(1, len(mine) + 1))
        assert all(b[5] is None or (a[5] is not None and a[5] >= b[5] - 1e-9) for a, b in zip(mine, mine[1:]))
        frontiers = hop_frontiers(adj, sims, anchor, hops, cap)
        for _, hop, relations, path, node, similarity, _ in mine:
            assert 1 <= hop <= len(frontiers)
            at_hop = {n: (list(rel), list(p), s) for n, rel, p, s in
                      (frontiers[hop - 1] if hop == hops or cap is None else frontiers[hop - 1][:cap])}
            assert node in at_hop, f"{node} is not reached at hop {hop} from {anchor}"
            assert (relations, path) == at_hop[node][:2]
            assert similarity == pytest.approx(at_hop[node][2], abs=1e-5)


def top_k_recall(got: list[tuple], want: list[tuple]) -> list[float]:
    sets = {}
    for r in got:
        sets.setdefault(r[0], set()).add(r[4])
    out = []
    for anchor in {r[0] for r in want}:
        truth = {r[4] for r in want if r[0] == anchor}
        out.append(len(sets.get(anchor, set()) & truth) / len(truth))
    return out


def test_index_last_hop_on_the_slice_is_valid_and_close_to_exact(slice_graph):
    from kar_reference import adjacency

    url, edges, vectors = slice_graph
    adj = adjacency(edges, False)
    rng = random.Random(13)
    nodes_with_edges = sorted({s for s, _, _ in edges})
    recalls, walked = [], 0
    with connect(url) as conn:
        for trial in range(30):
            anchors = rng.sample(nodes_with_edges, rng.randint(1, 3))
            query = vectors[rng.choice(sorted(vectors))]
            hops, cap = (2, 100) if trial % 3 else (3, 20)
            sims = sql_similarities(conn, anchors, hops, query)
            got = run_index(conn, SLICE, anchors, hops, query, 10, cap, "all-MiniLM-L6-v2")   # every anchor walks
            assert_valid(got, adj, sims, anchors, hops, 10, cap)
            want = run_sql(conn, SLICE, anchors, hops, query, 10, cap, "all-MiniLM-L6-v2")
            recalls += top_k_recall(got, want)
            walked += sum(r[1] == hops for r in got)
    assert walked > 100, "the walk should find last-hop nodes"
    assert np.mean(recalls) >= 0.9, f"recall of the exact top 10: {np.mean(recalls):.3f}"


def test_small_frontiers_take_the_exact_last_hop(slice_graph):
    """Per anchor: fewer edge rows to follow than stark.kar_index_min_rows, exactly the exact rows; at or
    above, valid rows from the walk; both kinds in the same calls."""
    from kar_reference import adjacency, hop_frontiers

    url, edges, vectors = slice_graph
    adj = adjacency(edges, False)
    rng = random.Random(17)
    nodes_with_edges = sorted({s for s, _, _ in edges})
    small = large = mixed = 0
    with connect(url) as conn:
        for _ in range(40):
            anchors = sorted(set(rng.sample(nodes_with_edges, 3)))
            query = vectors[rng.choice(sorted(vectors))]
            sims = sql_similarities(conn, anchors, 2, query)
            rows = {a: edge_rows(adj, hop_frontiers(adj, sims, a, 2, 100), 2, 100) for a in anchors}
            min_rows = sorted(rows.values())[1]                   # the median anchor is at the bound: it walks
            got = run_index(conn, SLICE, anchors, 2, query, 10, 100, "all-MiniLM-L6-v2", min_rows=min_rows)
            want = run_sql(conn, SLICE, anchors, 2, query, 10, 100, "all-MiniLM-L6-v2")
            assert_valid(got, adj, sims, anchors, 2, 10, 100)
            for a in anchors:
                if rows[a] < min_rows:
                    assert_same([r for r in got if r[0] == a], [r for r in want if r[0] == a])
                    small += 1
                else:
                    large += 1
            mixed += min(rows.values()) < min_rows
        # a bound above every anchor's rows: the whole call is the exact one
        anchors = rng.sample(nodes_with_edges, 3)
        query = vectors[rng.choice(sorted(vectors))]
        assert_same(run_index(conn, SLICE, anchors, 2, query, 10, 100, "all-MiniLM-L6-v2", min_rows=10 ** 8),
                    run_sql(conn, SLICE, anchors, 2, query, 10, 100, "all-MiniLM-L6-v2"))
    assert small >= 20 and large >= 40 and mixed >= 20


def random_vectors_with_hnsw(conn, skb_id: int, n_nodes: int, rng: random.Random, dim: int = 8) -> dict:
    """A pseudo-model of random (continuous: no ties) vectors for every node, with the SKB's HNSW index."""
    from psycopg import sql as pgsql

    from stark_pg.index.dense import hnsw_index_name

    name = f"rand-{dim}d"
    row = conn.execute("select model_id, doc_table, chunk_table from stark.embedding_model where name = %s",
                       (name,)).fetchone()
    if row is None:
        row = conn.execute("insert into stark.embedding_model (name, dim, doc_table, chunk_table) values "
                           "(%s, %s, %s, %s) returning model_id, doc_table, chunk_table",
                           (name, dim, f"emb_doc_rand{dim}", f"emb_chunk_rand{dim}")).fetchone()
    tables = ModelTables(row[0], name, dim, row[1], row[2])
    conn.execute(statement("create_tables", tables))
    vectors = {node: np.array([rng.gauss(0, 1) for _ in range(dim)]) for node in range(1, n_nodes + 1)}
    with conn.cursor().copy(pgsql.SQL("copy {} (skb_id, node_id, doc_hash, vec) from stdin").format(
            pgsql.Identifier("stark", tables.doc_table))) as copy:
        for node, v in vectors.items():
            copy.write_row((skb_id, node, "rand", "[" + ",".join(map(str, v)) + "]"))
    conn.execute(statement("create_hnsw_index", tables, index=pgsql.Identifier(hnsw_index_name(tables.doc_table, skb_id)),
                           table=pgsql.Identifier("stark", tables.doc_table), skb=skb_id, m=16, ef_construction=64))
    return vectors


@pytest.mark.parametrize("seed,both_ways", [(5, True), (6, False)])
def test_index_last_hop_on_generated_graphs_is_valid_and_close_to_exact(conn, tmp_path, seed, both_ways):
    from kar_reference import adjacency
    from stark_pg.index.graph import build_graph_summary

    rng = random.Random(seed)
    n_nodes = 1500
    edges, skb_id = load_toy(conn, tmp_path / f"walk{seed}", rng, n_nodes, 12_000, both_ways)
    build_graph_summary(conn, f"walk{seed}")                 # both ways: outgoing edges alone (same rows)
    vectors = random_vectors_with_hnsw(conn, skb_id, n_nodes, rng)
    recalls, walked = [], 0
    for trial in range(30):
        anchors = rng.sample(range(1, n_nodes + 1), rng.randint(1, 3))
        if trial % 3 == 0:
            anchors[0] = 1                                   # a hub
        query = np.array([rng.gauss(0, 1) for _ in range(8)])
        hops, cap, k = rng.choice([(2, 25, 10), (2, None, 10), (3, 10, 5), (1, 50, 10)])
        directed = trial % 2 == 1
        adj = adjacency(edges, directed)
        sims = cosines(vectors, query)
        got = run_index(conn, f"walk{seed}", anchors, hops, query, k, cap, "rand-8d", directed)
        assert_valid(got, adj, sims, anchors, hops, k, cap)
        want = reference(edges, sims, anchors, hops, k, cap, directed)
        recalls += top_k_recall(got, want)
        walked += sum(r[1] == hops for r in got)
    assert walked > 100
    assert np.mean(recalls) >= 0.9, f"recall of the exact top k: {np.mean(recalls):.3f}"


def test_index_last_hop_arguments_are_checked(slice_graph):
    url, _, vectors = slice_graph
    query = str(list(map(float, next(iter(vectors.values())))))
    with connect(url) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="last_hop must be exact or index, not 'fast'"):
            conn.execute("select * from stark.kar_neighbours('stark-prime-ibd', array[1]::bigint[], "
                         "query => %s::vector, last_hop => 'fast')", (query,))
        conn.execute("set stark.kar_index_min_rows = 'many'")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="kar_index_min_rows must be"):
            conn.execute("select * from stark.kar_neighbours('stark-prime-ibd', array[1]::bigint[], "
                         "query => %s::vector, last_hop => 'index')", (query,))
        conn.execute("reset stark.kar_index_min_rows")
        # without a query or a k there is no walk: the exact rows, no index needed
        assert run_sql(conn, SLICE, [1], 2, None, None, 5, "all-MiniLM-L6-v2") == [tuple(r) for r in conn.execute(
            "select * from stark.kar_neighbours('stark-prime-ibd', array[1]::bigint[], 2, null, null, 5, "
            "last_hop => 'index')")]


def test_index_last_hop_needs_an_hnsw_index(conn, tmp_path):
    rng = random.Random(8)
    _, skb_id = load_toy(conn, tmp_path / "noindex", rng, 50, 200, True)
    toy_vectors(conn, skb_id, 50, rng)                       # no HNSW index over these
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="needs an HNSW index"):
        run_index(conn, "noindex", [1], 2, [1, 0, 0, 0], 10, 100, TOY_MODEL)


def test_kar_option_last_hop_is_checked(conn):
    from stark_pg.options import OptionError
    from stark_pg.retrieve.expand import kar

    with pytest.raises(OptionError, match="kar last_hop must be exact or index, not 'fast'"):
        kar.search(conn, "x", "q", options=kar.Options(last_hop="fast"))
