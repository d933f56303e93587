"""The synthetic Prime-shaped generator: deterministic, typed, and its answers exact (checked by brute force)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from loaders.synthetic import ANSWER_TYPE, NODE_TYPES, RELATIONS, TEMPLATES, SyntheticSource


@pytest.fixture(scope="module")
def small():
    source = SyntheticSource(nodes=3000, seed=7)
    nodes = {node.node_id: node for _, node in source.nodes()}
    edges = [(s, r, d) for _, s, r, d in source.edges()]
    queries = [q for _, q in source.queries()]
    return source, nodes, edges, queries


def test_same_seed_same_skb_other_seed_other_skb(small):
    source, nodes, edges, queries = small
    again = SyntheticSource(nodes=3000, seed=7)
    assert [n for _, n in again.nodes()] == list(nodes.values())
    assert [(s, r, d) for _, s, r, d in again.edges()] == edges
    assert [q for _, q in again.queries()] == queries
    other = SyntheticSource(nodes=3000, seed=8)
    assert [(s, r, d) for _, s, r, d in other.edges()] != edges


def test_prime_types_and_relations_with_typed_endpoints(small):
    source, nodes, edges, _ = small
    assert {n.type for n in nodes.values()} == set(NODE_TYPES)
    assert len({r for _, r, _ in edges}) == 18
    allowed = {(r.name, r.src, r.dst) for r in RELATIONS} | {(r.name, r.dst, r.src) for r in RELATIONS}
    assert all((r, nodes[s].type, nodes[d].type) in allowed for s, r, d in edges)
    assert len(edges) == pytest.approx(3000 * 20, rel=0.02)
    assert all(n.name and n.fields["description"] for n in nodes.values())


def test_degrees_are_heavy_tailed(small):
    _, nodes, edges, _ = small
    degree = defaultdict(int)
    for s, _, _ in edges:
        degree[s] += 1
    values = sorted(degree.values(), reverse=True)
    assert values[0] > 20 * (sum(values) / len(nodes))            # hubs far above the mean


def test_every_answer_is_exact_by_brute_force(small):
    source, nodes, edges, queries = small
    assert len(queries) == source.n_queries and len({q.query_id for q in queries}) == len(queries)
    neighbours = defaultdict(set)                                  # (node, relation) -> nodes
    for s, r, d in edges:
        neighbours[(s, r)].add(d)
    by_wording = {t[2].split("{")[0]: t for t in TEMPLATES}
    for query in queries:
        path, anchor_type, wording = next(t for prefix, t in by_wording.items() if query.body.startswith(prefix))
        anchor = next(n for n in nodes.values() if n.type == anchor_type and wording.format(anchor=n.name) == query.body)
        answer_type = ANSWER_TYPE[path]
        expected = set()
        for node in nodes.values():
            if node.type != answer_type:
                continue
            frontier = {node.node_id}
            for hop, relation in enumerate(path):
                frontier = {m for f in frontier for m in neighbours[(f, relation)]}
                if hop < len(path) - 1:   # intermediate hops land on the template's middle type
                    frontier = {m for m in frontier if nodes[m].type == "gene/protein" or
                                (path[0] == "side effect" and nodes[m].type == "effect/phenotype")}
            if anchor.node_id in frontier:
                expected.add(node.node_id)
        assert set(query.answer_ids) == expected, query.body
        assert all(a in nodes for a in query.answer_ids)
    assert {q.split for q in queries} == {"train", "val", "test"}
