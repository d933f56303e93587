"""The synthetic Prime-shaped generator: deterministic, typed like STaRK-Prime, answers exact by brute force.

Most tests check the generator's records as plain Python values; the last ones load it through the
real `stark-pg load synthetic` into the test database and ask PostgreSQL.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

import numpy as np
import psycopg
import pytest

from loaders.synthetic import RELATIONS, TEMPLATES, TRAITS, SyntheticSource
from stark_pg.skb.records import LoadError

# STaRK-Prime's node and relation types (stark's PrimeKG SKB), written out here on purpose: the
# generator must match them, not itself.
PRIME_NODE_TYPES = {"disease", "gene/protein", "molecular_function", "drug", "pathway", "anatomy", "effect/phenotype",
                    "biological_process", "cellular_component", "exposure"}
PRIME_RELATIONS = {"ppi", "carrier", "enzyme", "target", "transporter", "contraindication", "indication",
                   "off-label use", "synergistic interaction", "associated with", "parent-child", "phenotype absent",
                   "phenotype present", "side effect", "interacts with", "linked to", "expression present",
                   "expression absent"}
# The unordered pairs of node types each relation joins in PrimeKG.
GENE, DRUG, DISEASE, PHENO = "gene/protein", "drug", "disease", "effect/phenotype"
ENDPOINTS = {
    "ppi": {(GENE, GENE)},
    "carrier": {(DRUG, GENE)}, "enzyme": {(DRUG, GENE)}, "target": {(DRUG, GENE)}, "transporter": {(DRUG, GENE)},
    "contraindication": {(DRUG, DISEASE)}, "indication": {(DRUG, DISEASE)}, "off-label use": {(DRUG, DISEASE)},
    "synergistic interaction": {(DRUG, DRUG)},
    "associated with": {(GENE, DISEASE), (GENE, PHENO)},
    "parent-child": {(t, t) for t in ("biological_process", DISEASE, PHENO, "anatomy", "molecular_function",
                                      "cellular_component", "pathway", "exposure")},
    "phenotype absent": {(DISEASE, PHENO)}, "phenotype present": {(DISEASE, PHENO)},
    "side effect": {(DRUG, PHENO)},
    "interacts with": {(GENE, t) for t in ("biological_process", "cellular_component", "molecular_function",
                                           "pathway")} | {("exposure", t) for t in (GENE, "biological_process",
                                                                                     "molecular_function",
                                                                                     "cellular_component")},
    "linked to": {("exposure", DISEASE)},
    "expression present": {("anatomy", GENE)}, "expression absent": {("anatomy", GENE)},
}
# Where a description states the attribute a question may name.
ATTRIBUTE_IN_TEXT = {DRUG: re.compile(r"supplied as an? ([a-z ]+)\."),
                     DISEASE: re.compile(r" is an? ([a-z]+) disease characterised"),
                     GENE: re.compile(r"gene of the ([a-z ]+) family")}
# Where it states its trait (drugs, genes, diseases): the textual requirement questions may add.
TRAIT_IN_TEXT = re.compile(r" It is noted for ([^.]+)\.")

N = 2000


@pytest.fixture(scope="module")
def small():
    source = SyntheticSource(nodes=N, seed=7)
    nodes = {node.node_id: node for _, node in source.nodes()}
    edges = [(s, r, d) for _, s, r, d in source.edges()]
    queries = [q for _, q in source.queries()]
    return source, nodes, edges, queries


def test_protocol_attributes():
    source = SyntheticSource(nodes=10_000, seed=3, edges_per_node=62)
    assert source.format == "synthetic" and source.default_name == "synthetic-10000"
    assert source.location.startswith("synthetic nodes=10000 seed=3")
    assert (source.nodes_label, source.edges_label, source.queries_label) == (
        "synthetic nodes", "synthetic edges", "synthetic queries")
    assert source.meta["nodes"] == 10_000 and source.meta["seed"] == 3 and source.meta["edges_per_node"] == 62
    with pytest.raises(LoadError, match="--nodes must be at least 100, not 10"):
        SyntheticSource(nodes=10)
    with pytest.raises(LoadError, match="--edges-per-node must be 0 or more"):
        SyntheticSource(nodes=1000, edges_per_node=-1)


def test_same_seed_same_skb_other_seed_other_skb(small):
    source, nodes, edges, queries = small
    assert [(s, r, d) for _, s, r, d in source.edges()] == edges          # a second pass, same edges
    again = SyntheticSource(nodes=N, seed=7)
    assert [n for _, n in again.nodes()] == list(nodes.values())
    assert [(s, r, d) for _, s, r, d in again.edges()] == edges
    assert [q for _, q in again.queries()] == queries
    other = SyntheticSource(nodes=N, seed=8)
    assert [(s, r, d) for _, s, r, d in other.edges()] != edges
    assert [n.name for _, n in other.nodes()] != [n.name for n in nodes.values()]


def test_prime_types_in_prime_proportions(small):
    _, nodes, _, _ = small
    counts = Counter(n.type for n in nodes.values())
    assert set(counts) == PRIME_NODE_TYPES and len(counts) == 10
    assert sorted(nodes) == list(range(N))
    # PrimeKG: biological processes and genes lead, exposures trail
    order = [t for t, _ in counts.most_common()]
    assert order[:2] == ["biological_process", "gene/protein"] and order[-1] == "exposure"
    assert counts["gene/protein"] == pytest.approx(N * 27671 / 129375, abs=2)


def test_eighteen_relations_between_the_right_types(small):
    _, nodes, edges, _ = small
    seen = defaultdict(set)
    for s, r, d in edges:
        seen[r].add(tuple(sorted((nodes[s].type, nodes[d].type))))
    assert set(seen) == PRIME_RELATIONS and len(seen) == 18
    for relation, pairs in seen.items():
        assert pairs <= {tuple(sorted(p)) for p in ENDPOINTS[relation]}, relation
    assert {tuple(sorted((GENE, t))) for t in ("biological_process", "cellular_component", "molecular_function",
                                               "pathway")} <= seen["interacts with"]


def test_both_directions_no_duplicates_no_loops_no_dangling(small):
    _, nodes, edges, _ = small
    as_set = set(edges)
    assert len(as_set) == len(edges)
    assert all((d, r, s) in as_set for s, r, d in edges)
    assert all(s != d for s, _, d in edges)
    assert all(s in nodes and d in nodes for s, _, d in edges)


def test_edge_count_follows_edges_per_node():
    for n, per_node in ((N, 20), (20_000, 62)):
        source = SyntheticSource(nodes=n, edges_per_node=per_node)
        directed = 2 * sum(len(s) for i in range(len(RELATIONS)) for s, _ in source.relation_pairs(i))
        # at 2,000 nodes the 123 drugs cannot hold all their synergistic pairs: a little short
        assert directed == pytest.approx(n * per_node, rel=0.03 if n == N else 0.001)


def test_degrees_are_heavy_tailed(small):
    _, nodes, edges, _ = small
    degree = Counter(s for s, _, _ in edges)
    values = sorted((degree[i] for i in nodes), reverse=True)
    mean = sum(values) / len(values)
    assert values[0] > 20 * mean                          # hubs far above the mean
    assert values[len(values) // 2] < mean / 2            # most nodes well below it
    assert values[len(values) // 100] > 5 * mean          # a fat top percentile, not a single outlier


def test_traits_are_distinct_phrases_without_shared_words():
    for node_type, traits in TRAITS.items():
        assert len(traits) == len(set(traits)) == 24, node_type
        words = [w for t in traits for w in set(re.findall(r"[a-z0-9]{3,}", t.lower())) if w not in ("the", "and")]
        assert len(words) == len(set(words)), (node_type, [w for w in words if words.count(w) > 1])


def test_names_unique_and_text_states_the_attribute(small):
    source, nodes, _, _ = small
    names = [n.name for n in nodes.values()]
    assert all(names) and len(set(names)) == len(names)
    for node in nodes.values():
        text = node.fields["description"]
        assert text.startswith((node.name, f"The {node.name}"))
        assert len(text.split(". ")) >= 2
        if node.type in ATTRIBUTE_IN_TEXT:
            (value,) = node.attrs.values()
            assert ATTRIBUTE_IN_TEXT[node.type].search(text).group(1) == value
        else:
            assert node.attrs is None
        stated = TRAIT_IN_TEXT.search(text)
        assert (stated.group(1) if stated else None) == source.traits([node.node_id])[0]
        assert (stated is not None) == (node.type in TRAITS)
    big = SyntheticSource(nodes=200_000, seed=1)
    sample = np.arange(0, 200_000, 7)
    assert len(set(big.names(sample))) == len(sample)


def _wording_regex(wording: str) -> re.Pattern:
    parts = re.split(r"(\{\w+\})", wording)
    return re.compile("^" + "".join(f"(?P<{p[1:-1]}>.+)" if p.startswith("{") else re.escape(p) for p in parts) + "$")


def test_queries_cover_templates_and_splits(small):
    source, nodes, _, queries = small
    assert len(queries) == source.n_queries == 100
    assert [q.query_id for q in queries] == list(range(100))
    assert Counter(q.split for q in queries) == {"train": 60, "val": 20, "test": 20}
    used = Counter(next(t.key for t in TEMPLATES if _wording_regex(t.wording).match(q.body)) for q in queries)
    assert set(used) == {t.key for t in TEMPLATES}
    assert all(1 <= len(q.answer_ids) <= 25 and q.answer_ids == sorted(set(q.answer_ids)) for q in queries)
    assert all(a in nodes for q in queries for a in q.answer_ids)


def test_every_answer_set_is_exact_by_brute_force(small):
    """Read each question back (template, anchors by name, attribute value) and find all nodes satisfying it."""
    _, nodes, edges, queries = small
    by_name = {n.name: n for n in nodes.values()}
    neighbours = defaultdict(set)                              # (node, relation) -> nodes
    for s, r, d in edges:
        neighbours[(s, r)].add(d)

    def reachable(start: int, path) -> set[int]:
        """Nodes reached from `start` along path's (relation, type) hops, each hop landing on its type."""
        frontier = {start}
        for relation, node_type in path:
            frontier = {m for f in frontier for m in neighbours[(f, relation)] if nodes[m].type == node_type}
        return frontier

    def attribute(node) -> str | None:
        pattern = ATTRIBUTE_IN_TEXT.get(node.type)
        return pattern.search(node.fields["description"]).group(1) if pattern else None

    def trait(node) -> str | None:
        stated = TRAIT_IN_TEXT.search(node.fields["description"])
        return stated.group(1) if stated else None

    checked = Counter()
    for query in queries:
        template, match = next((t, m) for t in TEMPLATES if (m := _wording_regex(t.wording).match(query.body)))
        anchors = [by_name[match.group(f"anchor{k}")] for k in range(len(template.paths))]
        for anchor, path in zip(anchors, template.paths):
            assert anchor.type == path[-1][1]
        expected = set()
        for node in nodes.values():
            if node.type != template.answer:
                continue
            if not all(a.node_id in reachable(node.node_id, path) for a, path in zip(anchors, template.paths)):
                continue
            if template.attribute and attribute(node) != match.group("value"):
                continue
            if template.trait and trait(node) != match.group("trait"):
                continue
            expected.add(node.node_id)
        assert set(query.answer_ids) == expected, query.body
        checked[template.key] += 1
    assert len(checked) == len(TEMPLATES)


def test_cli_load_stores_the_generator_output_and_sql_finds_the_same_answers(cli, db_url):
    """Through the real CLI and store: counts as generated, no duplicate edge, and each one-hop query's
    answers found again by SQL from the anchor's name (names must pick out one node in the database too)."""
    summary = json.loads(cli("load", "synthetic", "--nodes", "3000", "--seed", "5", "--edges-per-node", "12",
                             "--json").stdout)
    source = SyntheticSource(nodes=3000, seed=5, edges_per_node=12)
    queries = [q for _, q in source.queries()]
    assert (summary["nodes"], summary["edges"], summary["queries"]) == (3000, sum(1 for _ in source.edges()),
                                                                        len(queries))
    one_hop = {t.wording: t for t in TEMPLATES if len(t.paths) == 1 and len(t.paths[0]) == 1}
    checked = 0
    with psycopg.connect(db_url) as c:
        skb_id = c.execute("select skb_id from stark.skb where name = 'synthetic-3000'").fetchone()[0]
        assert c.execute("select count(*) - count(distinct (src, relation, dst)) from stark.edge where skb_id = %s",
                         (skb_id,)).fetchone()[0] == 0
        assert c.execute("select count(*) - count(distinct lower(name)) from stark.node where skb_id = %s",
                         (skb_id,)).fetchone()[0] == 0
        for query in queries:
            template, match = next(((t, m) for w, t in one_hop.items() if (m := _wording_regex(w).match(query.body))),
                                   (None, None))
            if template is None:
                continue
            (relation, anchor_type), = template.paths[0]
            found = c.execute(
                """select array_agg(distinct n.node_id order by n.node_id)
                   from stark.node a
                   join stark.edge e on e.skb_id = a.skb_id and e.dst = a.node_id and e.relation = %(relation)s
                   join stark.node n on n.skb_id = e.skb_id and n.node_id = e.src and n.type = %(answer)s
                   where a.skb_id = %(skb)s and a.name = %(anchor)s and a.type = %(anchor_type)s
                     and (%(key)s::text is null or n.attrs ->> %(key)s = %(value)s)
                     and (%(trait)s::text is null or exists (
                          select 1 from stark.node_field f
                          where f.skb_id = n.skb_id and f.node_id = n.node_id and f.field = 'description'
                            and strpos(f.body, ' It is noted for ' || %(trait)s || '.') > 0))""",
                {"relation": relation, "answer": template.answer, "skb": skb_id, "anchor": match.group("anchor0"),
                 "anchor_type": anchor_type, "key": template.attribute,
                 "value": match.group("value") if template.attribute else None,
                 "trait": match.group("trait") if template.trait else None}).fetchone()[0]
            assert found == query.answer_ids, query.body
            checked += 1
    assert checked >= 40


def test_cli_rejects_bad_generator_settings_naming_the_option_and_loads_nothing(cli):
    failed = cli("load", "synthetic", "--nodes", "10", expect=1)
    assert "--nodes must be at least 100" in failed.stderr and "Traceback" not in failed.stderr
    failed = cli("load", "synthetic", "--edges-per-node", "-2", expect=1)
    assert "--edges-per-node must be 0 or more" in failed.stderr
    assert "no SKBs loaded yet" in cli("info").stdout
