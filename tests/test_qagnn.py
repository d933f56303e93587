"""QA-GNN (issue 16): the subgraph SQL equals a plain-Python reference on the real slice, a tiny
training run learns a task only the graph can solve, the method's ranking equals a direct torch
forward on the same subgraph, candidates beyond n keep the first stage's order, and the command line
trains, searches and explains a missing model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import IBD
from stark_pg.db import connect
from stark_pg.embed import encode_query
from stark_pg.retrieve import get_method
from stark_pg.skb.records import LoadError
from stark_pg.models.qagnn import (Subgraph, Vocabulary, build_graph, fetch_subgraph, graph_for_query, load_model,
                                   new_network, query_grams, rerank, score_graph, torch_threads)
from stark_pg.retrieve.qagnn import first_stage
from stark_pg.train import qagnn as train_module

SKB = "syn-qagnn"


# --------------------------------------------------------------------------------------------
# The subgraph statement against a plain-Python reference, on the real slice

def compact(name: str | None) -> str | None:
    """Python's twin of stark.focus_compact: lower case, nothing but letters and digits."""
    return None if name is None else "".join(c for c in name.lower() if c.isalnum())


def reference_subgraph(nodes: dict, edges: list, candidates: list[int], grams: list[str], max_linked: int,
                       fanout: int) -> Subgraph:
    """The subgraph as sql/queries/qagnn.sql defines it, from every node and edge of the SKB in Python."""
    rank: dict[int, int] = {}
    for i, c in enumerate(candidates, start=1):
        if c in nodes:
            rank.setdefault(c, i)
    wanted = set(grams)
    named = [n for n, (_, name) in nodes.items() if compact(name) in wanted]
    linked = set(sorted(named, key=lambda n: (-len(nodes[n][1]), n))[:max_linked])
    seeds = set(rank) | linked
    found = {(s, r, d) for s, r, d in edges if s in seeds and d in seeds}
    members = set(seeds)
    for seed in seeds:
        out = sorted(((r, d) for s, r, d in edges if s == seed and d not in seeds))[:fanout]
        into = sorted(((r, s) for s, r, d in edges if d == seed and s not in seeds))[:fanout]
        found |= {(seed, r, d) for r, d in out} | {(s, r, seed) for r, s in into}
        members |= {d for _, d in out} | {s for _, s in into}
    ids = sorted(members)
    return Subgraph(np.array(ids, dtype=np.int64), [nodes[n][0] for n in ids],
                    np.array([rank.get(n, 0) for n in ids], dtype=np.int64),
                    np.array([n in linked for n in ids], dtype=bool), sorted(found))


@pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")
def test_subgraph_sql_equals_a_python_reference_on_the_real_slice(conn):
    from loaders.bundle import BundleSource
    from stark_pg.skb.store import load_skb

    skb_id = load_skb(conn, BundleSource(IBD)).skb_id
    nodes = {int(n): (t, name) for n, t, name in
             conn.execute("select node_id, type, name from stark.node where skb_id = %s", (skb_id,))}
    edges = [(int(s), r, int(d)) for s, r, d in
             conn.execute("select src, relation, dst from stark.edge where skb_id = %s", (skb_id,))]
    degree: dict[int, int] = {}
    for s, _, _ in edges:
        degree[s] = degree.get(s, 0) + 1
    hubs = sorted(degree, key=lambda n: (-degree[n], n))[:3]          # they hit the fanout limit
    queries = conn.execute("select body, answer_ids from stark.query where skb_id = %s and split = 'train' "
                           "order by query_id limit 40", (skb_id,)).fetchall()
    rng = np.random.default_rng(0)
    all_ids = sorted(nodes)
    linked_somewhere = limited = 0
    for body, answers in queries:
        candidates = [int(a) for a in answers] + hubs + [int(n) for n in rng.choice(all_ids, 40, replace=False)]
        candidates.append(candidates[-1])                               # a duplicate keeps its first rank
        grams = query_grams(body)
        got = fetch_subgraph(conn, skb_id, candidates, grams, max_linked=5, fanout=3)
        want = reference_subgraph(nodes, edges, candidates, grams, max_linked=5, fanout=3)
        assert got.node_ids.tolist() == want.node_ids.tolist(), body
        assert got.types == want.types
        assert got.rank.tolist() == want.rank.tolist()
        assert got.linked.tolist() == want.linked.tolist(), body
        assert got.edges == want.edges, body
        linked_somewhere += bool(got.linked.any())
        seeds = set(want.node_ids[(want.rank > 0) | want.linked].tolist())
        limited += any(sum(1 for s, _, d in want.edges if s == h and d not in seeds) == 3 for h in hubs)
    assert linked_somewhere >= 5          # names in the questions do link (e.g. a gene's symbol)
    assert limited == len(queries)        # and the fanout limit was exercised


# --------------------------------------------------------------------------------------------
# Training on a synthetic task that only the graph solves

def synthetic_examples(count: int, seed: int):
    """Per query: 20 candidates with random first-stage scores and random vectors; the answer is the one
    candidate with an edge from the node the query names (linked). Only message passing can tell."""
    rng = np.random.default_rng(seed)
    vocab = Vocabulary(["drug", "gene"], ["target", "interacts with"])
    dim = 16
    examples, vectors, table_rows = [], {}, {}
    for q in range(count):
        base = 1000 * (q + 1)
        cands = [base + i for i in range(20)]
        linked = base + 500
        answer = int(rng.choice(cands))
        edges = [(linked, "target", answer), (answer, "target", linked)]
        for other in rng.choice([c for c in cands if c != answer], 6, replace=False):   # noise edges
            hub = base + 600
            edges += [(int(other), "interacts with", hub), (hub, "interacts with", int(other))]
        ids = sorted(set(cands) | {linked, base + 600})
        for n in ids:
            vectors[n] = rng.normal(size=dim).astype(np.float32) / 4
            table_rows[n] = len(table_rows)
        rank = {c: i + 1 for i, c in enumerate(cands)}
        sub = Subgraph(np.array(ids, dtype=np.int64), ["drug" if n in rank else "gene" for n in ids],
                       np.array([rank.get(n, 0) for n in ids]), np.array([n == linked for n in ids]), sorted(edges))
        query = rng.normal(size=dim).astype(np.float32)
        query /= np.linalg.norm(query)
        scores = sorted(rng.random(20).tolist(), reverse=True)
        graph = build_graph(sub, cands, scores, query, vectors, vocab, table_rows, [answer])
        examples.append(train_module.Example(graph, [answer]))
    table = np.stack([vectors[n] for n in sorted(table_rows, key=table_rows.get)])
    return examples, table, vocab, dim


def test_a_tiny_training_run_learns_a_task_only_the_graph_solves():
    examples, table, vocab, dim = synthetic_examples(80, seed=3)
    train, stop = examples[:60], examples[60:]
    torch.manual_seed(0)
    network = new_network(dim, vocab, hidden=32, layers=2, heads=4, dropout=0.0)
    before = train_module.evaluate(network, stop, table)
    assert before == pytest.approx(train_module.first_stage_metrics(stop))   # untrained: the first stage's order
    settings = train_module.TrainSettings(epochs=25, patience=25, batch_size=8, lr=3e-3, hidden=32)
    _, history, best = train_module.fit(network, train, stop, table, settings)
    after = train_module.evaluate(network, stop, table)
    assert before["mrr"] < 0.4
    assert after["mrr"] > 0.9 and after["hit@1"] > 0.85
    assert history[-1]["loss"] < history[0]["loss"]
    assert after["mrr"] == pytest.approx(max(h["holdout_mrr"] for h in history), abs=1e-4)


# --------------------------------------------------------------------------------------------
# Search with a trained model on an indexed synthetic SKB

@pytest.fixture(scope="module")
def trained(server_url, template_db):
    from conftest import indexed_synthetic

    with indexed_synthetic(server_url, template_db, "stark_qagnn", SKB, seed=5) as url:
        with connect(url) as conn:
            report = train_module.train_qagnn(conn, SKB, train_module.TrainSettings(
                name="tiny", candidates=30, hidden=32, layers=2, epochs=2, limit=12))
        yield url, report


def test_the_methods_ranking_equals_a_direct_torch_forward_and_the_tail_keeps_the_first_stage_order(trained):
    url, report = trained
    assert report.train_queries == 12 and report.stop_queries == 12 and len(report.history) == 2
    method = get_method("qagnn")
    with connect(url) as conn:
        skb_id = conn.execute("select skb_id from stark.skb where name = %s", (SKB,)).fetchone()[0]
        row = conn.execute("select base_model, settings, metrics, jsonb_array_length(history) from stark.trained_model "
                           "where skb_id = %s and kind = 'qagnn' and name = 'tiny'", (skb_id,)).fetchone()
        assert row[0] == "all-MiniLM-L6-v2" and row[1]["candidates"] == 30 and row[3] == 2
        assert "holdout_mrr" in row[2] and "first_stage_holdout_mrr" in row[2]
        model = load_model(conn, skb_id, SKB, "tiny")
        questions = [q for (q,) in conn.execute("select body from stark.query where skb_id = %s and split = 'val' "
                                                "order by query_id limit 3", (skb_id,))]
        for question in questions:
            ranking = method.search(conn, SKB, question, 80, method.Options(name="tiny"))
            ids, scores, _ = first_stage(conn, SKB, question, 80, "vss", model.embed_model)
            graph, subgraph, table = graph_for_query(conn, skb_id, question, encode_query(question, model.embed_model),
                                                     ids[:30], scores[:30], model.embed_model, model.vocab,
                                                     model.config)
            with torch.no_grad(), torch_threads(1):
                direct = model.network(train_module.collate([graph], table))[0].numpy()
            expected = [n for n, _ in rerank(graph.candidate_ids, direct.astype(np.float64))]
            assert ranking.node_ids[:30] == expected
            assert sorted(expected) == sorted(ids[:30])
            assert ranking.node_ids[30:] == ids[30:80]                      # beyond n: the first stage's order
            assert all(a.score > b.score for a, b in zip(ranking.hits, ranking.hits[1:]))
            assert ranking.trace["subgraph"]["nodes"] == len(subgraph.node_ids) >= 30
            assert ranking.trace["first_stage"] == "vss" and ranking.trace["gnn_ms"] >= 0
            assert np.allclose(score_graph(model.network, graph, table), direct)
        assert method.search(conn, SKB, questions[0], 5, method.Options(name="tiny")).node_ids == \
            method.search(conn, SKB, questions[0], 80, method.Options(name="tiny")).node_ids[:5]
        with pytest.raises(LoadError, match="run `stark-pg train qagnn syn-qagnn --name nosuch`"):
            method.search(conn, SKB, questions[0], 10, method.Options(name="nosuch"))


def test_train_and_search_from_the_command_line(trained):
    from conftest import cli_runner

    url, _ = trained
    cli = cli_runner(url)
    done = cli("train", "qagnn", SKB, "--name", "cli", "--candidates", "20", "--hidden", "16", "--layers", "1",
               "--epochs", "1", "--limit", "6", "--first-stage", "hybrid", "--json", "-q")
    report = json.loads(done.stdout)
    assert report["name"] == "cli" and report["train_queries"] == 6 and len(report["history"]) == 1
    assert report["path"].endswith("models/qagnn/syn-qagnn/cli")
    done = cli("search", SKB, "which drugs target genes", "-m", "qagnn", "-o", "name=cli", "-k", "25", "--json")
    assert "hybrid" in done.stdout
    bad = cli("search", SKB, "drugs", "-m", "qagnn", "-o", "name=nosuch", expect=1)
    assert "run `stark-pg train qagnn" in bad.stderr and "Traceback" not in bad.stderr
    bad = cli("train", "qagnn", SKB, "--first-stage", "bm25", expect=None)
    assert bad.returncode != 0 and "--first-stage" in bad.stderr and "Traceback" not in bad.stderr
