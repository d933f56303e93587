"""4StepFocus substitution in SQL (stark.focus_substitute) against the plain-Python reference of
Algorithm 2 (tests/focus_reference.py): identical candidate sets for many generated triplet sets,
on the real slice and on synthetic Prime-shaped graphs, relations respected or ignored, edges
directed or not."""

from __future__ import annotations

import json
import random

import psycopg
import pytest

from focus_reference import Graph
from focus_reference import substitute as reference_substitute
from stark_pg.retrieve.focus.substitute import MAX_COST, Problem, Triplet, substitute

SETTINGS = [(False, False), (True, False), (False, True), (True, True)]   # (respect_relations, directed)


def read_graph(conn, skb: str) -> Graph:
    skb_id = conn.execute("select stark.skb_id(%s)", (skb,)).fetchone()[0]
    nodes = {n: (t, name) for n, t, name in conn.execute(
        "select node_id, type, name from stark.node where skb_id = %s", (skb_id,))}
    edges = conn.execute("select src, relation, dst from stark.edge where skb_id = %s", (skb_id,)).fetchall()
    return Graph(nodes, edges)


def generate(graph: Graph, rng: random.Random, relations: list[str], types: list[str]) -> Problem:
    """A triplet set shaped like an LLM's: a walk from an answer node, each step either a constant
    (a real neighbour, sometimes with a decoy) or a new variable, plus random extras: triplets between
    unrelated variables, wrong relations, untyped variables, constant-constant triplets."""
    ids = list(graph.nodes)
    variables: dict[str, str | None] = {}
    triplets: list[Triplet] = []
    current = rng.choice(ids)
    variables["x0"] = graph.nodes[current][0] if rng.random() < 0.85 else None
    var = "x0"
    for step in range(rng.randint(1, 4)):
        hops = [(r, d, "out") for r, d in graph.out.get(current, ())] + \
               [(r, s, "in") for r, s in graph.inc.get(current, ())]
        if not hops:
            break
        relation, other, way = rng.choice(hops)
        if rng.random() < 0.15:
            relation = rng.choice(relations)          # the LLM named another relation
        if rng.random() < 0.5:
            end: object = tuple(sorted({other} | ({rng.choice(ids)} if rng.random() < 0.3 else set())))
        else:
            end = f"x{len(variables)}"
            variables[end] = graph.nodes[other][0] if rng.random() < 0.85 else None
        triplets.append(Triplet(var, relation, end) if way == "out" else Triplet(end, relation, var))
        if isinstance(end, str) and rng.random() < 0.7:
            var, current = end, other
    for _ in range(rng.randint(0, 2)):                # extras
        kind = rng.random()
        names = list(variables)
        if kind < 0.4 and len(names) > 1:
            a, b = rng.sample(names, 2)
            triplets.append(Triplet(a, rng.choice(relations), b))
        elif kind < 0.6:
            triplets.append(Triplet((rng.choice(ids),), rng.choice(relations), (rng.choice(ids),)))
        elif kind < 0.8:
            name = f"x{len(variables)}"
            variables[name] = rng.choice(types)
            triplets.append(Triplet(rng.choice(names), None, name))
        else:
            triplets.append(Triplet(rng.choice(names), rng.choice(relations), (rng.choice(ids),)))
    return Problem(variables, tuple(triplets))


def as_reference(problem: Problem) -> list[dict]:
    return [{"head": t.head, "relation": t.relation, "tail": t.tail} for t in problem.triplets]


def sql_sets(conn, graph: Graph, skb: str, problem: Problem, respect: bool, directed: bool,
             max_cost: int | None = None) -> dict[str, set[int]]:
    """The SQL's sets, unbounded by default (max_cost None: the exact algorithm the reference runs)."""
    result = substitute(conn, skb, problem, respect_relations=respect, directed=directed, max_cost=max_cost)
    assert max_cost is not None or result.cut == 0
    out = {}
    for v, s in result.sets.items():
        if s.unconstrained:
            assert s.node_ids is None
            out[v] = graph.of_type(s.node_type)
        else:
            out[v] = set(s.node_ids)
        assert s.size == len(out[v])
    return out


def check_many(conn, skb: str, count: int, seed: int, max_cost: int | None = None) -> int:
    graph = read_graph(conn, skb)
    relations = sorted({r for adj in graph.out.values() for r, _ in adj})
    types = sorted({t for t, _ in graph.nodes.values()})
    rng = random.Random(seed)
    nonempty = 0
    for i in range(count):
        problem = generate(graph, rng, relations, types)
        respect, directed = SETTINGS[i % len(SETTINGS)]
        expected = reference_substitute(graph, problem.variables, as_reference(problem),
                                        respect_relations=respect, directed=directed)
        got = sql_sets(conn, graph, skb, problem, respect, directed, max_cost)
        assert got == expected, f"problem {json.dumps(problem.as_json())} respect={respect} directed={directed}"
        nonempty += any(0 < len(s) < len(graph.nodes) for s in expected.values())
    return nonempty


@pytest.mark.parametrize("summary", [False, True], ids=["edges", "typed-link summary"])
def test_sql_matches_reference_on_the_slice(ibd_indexed_url, summary):
    """With and without the typed-link summary (stark.edge_type_link), which changes how sets are
    revised, never what they hold; the summary is built in a transaction that is rolled back."""
    with psycopg.connect(ibd_indexed_url, autocommit=True) as conn, conn.transaction(force_rollback=True):
        if summary:
            assert conn.execute("select stark.edge_type_link_build('stark-prime-ibd')").fetchone()[0] > 0
        # with the default bound on a revision's cost (MAX_COST), which the slice never reaches: exact sets
        nonempty = check_many(conn, "stark-prime-ibd", 240, seed=11, max_cost=MAX_COST)
    assert nonempty > 100          # the generated sets narrow something, not just empty everything


# The 12,000-node graph has types of over 1,000 nodes, large enough for the summary's shortcuts
# (a set cut before probing, one revised through the nodes of its type that the other set lacks).
@pytest.mark.parametrize("seed,nodes,per_node,summary", [(1, 1500, 8, False), (2, 3000, 20, False),
                                                          (1, 1500, 8, True), (2, 3000, 20, True),
                                                          (3, 12000, 6, True)])
def test_sql_matches_reference_on_synthetic_graphs(conn, seed, nodes, per_node, summary):
    from loaders.synthetic import SyntheticSource
    from stark_pg.index.graph import build_graph_summary
    from stark_pg.skb.store import load_skb

    load_skb(conn, SyntheticSource(nodes=nodes, seed=seed, edges_per_node=per_node), "synthetic-focus")
    if summary:
        assert build_graph_summary(conn, "synthetic-focus")["rows"] > 0
    nonempty = check_many(conn, "synthetic-focus", 120, seed=seed)
    assert nonempty > 40


def test_the_typed_link_summary_counts_every_edge(conn):
    """stark.edge_type_link equals a count over the edges in Python: per (node type, relation,
    direction, other end's type), each node with such edges and how many; built once per version."""
    from collections import Counter

    from loaders.synthetic import SyntheticSource
    from stark_pg.index.graph import build_graph_summary
    from stark_pg.skb.store import load_skb

    load_skb(conn, SyntheticSource(nodes=800, seed=5, edges_per_node=6), "synthetic-focus")
    first = build_graph_summary(conn, "synthetic-focus")
    assert first["built"] and first["rows"] > 0
    graph = read_graph(conn, "synthetic-focus")
    skb_id = conn.execute("select stark.skb_id('synthetic-focus')").fetchone()[0]
    type_of = {n: t for n, (t, _) in graph.nodes.items()}
    expected: dict[tuple, Counter] = {}
    for src, relation, dst in conn.execute("select src, relation, dst from stark.edge where skb_id = %s", (skb_id,)):
        expected.setdefault((type_of[src], relation, True, type_of[dst]), Counter())[src] += 1
        expected.setdefault((type_of[dst], relation, False, type_of[src]), Counter())[dst] += 1
    got = {(t, r, out, o): dict(zip(ids, counts)) for t, r, out, o, ids, counts in conn.execute(
        "select node_type, relation, out, other_type, node_ids, edges from stark.edge_type_link "
        "where skb_id = %s", (skb_id,))}
    assert got == {k: dict(v) for k, v in expected.items()}
    assert all(ids == sorted(ids) for (ids,) in conn.execute(
        "select node_ids from stark.edge_type_link where skb_id = %s", (skb_id,)))
    again = build_graph_summary(conn, "synthetic-focus")
    assert not again["built"] and again["rows"] == first["rows"]
    assert build_graph_summary(conn, "synthetic-focus", rebuild=True)["built"]


def one_way_edges(conn, skb_id: int) -> int:
    """Edges whose reverse (same relation, ends swapped) is not stored, counted in Python."""
    edges = conn.execute("select src, relation, dst from stark.edge where skb_id = %s", (skb_id,)).fetchall()
    stored = set(edges)
    return sum((dst, relation, src) not in stored for src, relation, dst in edges)


def test_edge_symmetry_counts_edges_without_their_reverse(conn):
    """stark.edge_symmetry equals a count in Python: 0 for the generator's graphs (every edge stored
    both ways, as PrimeKG stores them), the number of edges removed from one direction otherwise; a
    summary built before the symmetry existed (an SKB indexed before migration 0030) gets it at the
    next build, which says it built something. stark.edge_both_ways says whether that count is 0, and
    is false before the symmetry is built."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.index.graph import build_graph_summary
    from stark_pg.skb.store import load_skb

    load_skb(conn, SyntheticSource(nodes=600, seed=4, edges_per_node=6), "synthetic-focus")
    skb_id = conn.execute("select stark.skb_id('synthetic-focus')").fetchone()[0]

    def both_ways() -> bool:
        return conn.execute("select stark.edge_both_ways(%s)", (skb_id,)).fetchone()[0]

    assert both_ways() is False                                     # not built yet: not assumed
    report = build_graph_summary(conn, "synthetic-focus")
    assert report["one_way_edges"] == 0 == one_way_edges(conn, skb_id)
    assert both_ways() is True
    assert conn.execute("select edges from stark.edge_symmetry where skb_id = %s",
                        (skb_id,)).fetchone()[0] == conn.execute(
        "select count(*) from stark.edge where skb_id = %s", (skb_id,)).fetchone()[0]
    removed = conn.execute("delete from stark.edge where skb_id = %s and src < dst and (src + dst) %% 5 = 0",
                           (skb_id,)).rowcount
    assert removed > 0
    conn.execute("delete from stark.edge_symmetry where skb_id = %s", (skb_id,))
    again = build_graph_summary(conn, "synthetic-focus")
    assert again["built"] and again["one_way_edges"] == removed == one_way_edges(conn, skb_id)
    assert both_ways() is False


@pytest.mark.parametrize("summary", [False, True], ids=["edges", "typed-link summary"])
def test_sql_matches_reference_with_one_way_edges(conn, summary):
    """A graph where some edges are stored one way only is not read as symmetric: the sets still
    equal the reference's, directed or not, with and without the summary."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.index.graph import build_graph_summary
    from stark_pg.skb.store import load_skb

    load_skb(conn, SyntheticSource(nodes=1500, seed=6, edges_per_node=8), "synthetic-focus")
    skb_id = conn.execute("select stark.skb_id('synthetic-focus')").fetchone()[0]
    assert conn.execute("delete from stark.edge where skb_id = %s and src < dst and (src + dst) %% 3 = 0",
                        (skb_id,)).rowcount > 0
    if summary:
        assert build_graph_summary(conn, "synthetic-focus")["one_way_edges"] > 0
    assert check_many(conn, "synthetic-focus", 120, seed=6) > 40


def test_hand_checked_example(ibd_indexed_url):
    """Drugs that target a gene which interacts with a biological process SMAD3 interacts with:
    three variables, one constant, checked against a join written by hand."""
    with psycopg.connect(ibd_indexed_url, autocommit=True) as conn:
        smad3 = conn.execute("select node_id from stark.node where name = 'SMAD3'").fetchone()[0]
        problem = Problem({"d": "drug", "g": "gene/protein", "p": "biological_process"},
                          (Triplet("d", "target", "g"), Triplet("g", "interacts with", "p"),
                           Triplet("p", "interacts with", (smad3,))))
        result = substitute(conn, "stark-prime-ibd", problem, respect_relations=True, directed=True)
        by_hand = {r[0] for r in conn.execute("""
            select distinct d.src from stark.edge d
            join stark.edge g on g.skb_id = d.skb_id and g.src = d.dst and g.relation = 'interacts with'
            join stark.edge p on p.skb_id = d.skb_id and p.src = g.dst and p.relation = 'interacts with' and p.dst = %s
            join stark.node dn on dn.skb_id = d.skb_id and dn.node_id = d.src and dn.type = 'drug'
            join stark.node gn on gn.skb_id = d.skb_id and gn.node_id = g.src and gn.type = 'gene/protein'
            join stark.node pn on pn.skb_id = d.skb_id and pn.node_id = p.src and pn.type = 'biological_process'
            where d.skb_id = stark.skb_id('stark-prime-ibd') and d.relation = 'target'""", (smad3,))}
        assert by_hand and set(result.sets["d"].node_ids) == by_hand
        assert result.rounds >= 2
        # the trace's SQL is the statement that ran: pasted back, it gives the same sets
        again = conn.execute(result.sql).fetchall()
        assert {r[0]: sorted(r[4] or []) for r in again}["d"] == sorted(by_hand)


def test_bad_problems_are_named(ibd_indexed_url):
    with psycopg.connect(ibd_indexed_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.RaiseException, match="no SKB named 'nope'"):
            substitute(conn, "nope", Problem({"x": None}, ()))
        with pytest.raises(psycopg.errors.RaiseException, match="names variable .*y"):
            substitute(conn, "stark-prime-ibd", Problem({"x": None}, (Triplet("x", None, "y"),)))


def test_a_revision_over_max_cost_is_left_out_counted_and_keeps_a_superset(conn):
    """The tail's bound: with a tiny max_cost the revisions between two sets are left out; the call says
    how many (`cut`), and every set is a superset of the exact one (no answer lost). Unbounded: cut 0."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.retrieve import focus

    load_skb = __import__("stark_pg.skb.store", fromlist=["load_skb"]).load_skb
    load_skb(conn, SyntheticSource(nodes=1500, seed=4, edges_per_node=8), "synthetic-cut")
    graph = read_graph(conn, "synthetic-cut")
    relations = sorted({r for adj in graph.out.values() for r, _ in adj})
    types = sorted({t for t, _ in graph.nodes.values()})
    rng = random.Random(4)
    cut_sets = 0
    for _ in range(60):
        problem = generate(graph, rng, relations, types)
        exact = sql_sets(conn, graph, "synthetic-cut", problem, False, False)
        bounded = substitute(conn, "synthetic-cut", problem, max_cost=1)
        assert substitute(conn, "synthetic-cut", problem, max_cost=None).cut == 0
        for v, s in bounded.sets.items():
            assert s.unconstrained or exact[v] <= set(s.node_ids)
        if bounded.cut:
            cut_sets += 1
            assert "max_cost" in bounded.sql
    assert cut_sets > 5
    # 4StepFocus's explanation says so (the trace carries the count)
    options = focus.Options(max_cost=1)
    trace = {"substitution": {"rounds": 2, "sql_ms": 1.0, "sizes": {"x1": 10}, "unconstrained": [], "cut": 3},
             "sql": "select ...", "filter": "candidates", "filtered_in_top": 0, "links": [], "dropped": [],
             "linked": [], "target": {"variable": "x1", "node_type": None},
             "triplets": {"target": "x1", "triplets": []}, "llm_triplets": {"calls": 1, "cache_hits": 0, "seconds": 1},
             "target_type": {"probabilities": {}, "votes": [], "llm_type": None}}
    lines = focus.explain(trace, options, [])["3. substitute"]
    assert any("3 revisions left out over max_cost 1" in line for line in lines)
    with pytest.raises(Exception, match="max_cost"):
        focus.Options(max_cost=-1).check()
