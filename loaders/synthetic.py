"""A synthetic SKB shaped like STaRK-Prime, with template queries whose answers are exact.

Why: the real slice has 3.4K nodes; speed and memory need SKBs of 100K to millions of nodes, and a
demo needs something to load on a fresh machine. The generator reproduces Prime's shape, not its
facts: its 10 node types in PrimeKG's proportions, its 18 relation types between the right types
in PrimeKG's proportions (each edge stored in both directions, as PrimeKG does), heavy-tailed
degrees (a few hubs, many leaves), and readable text fields. Queries follow STaRK-Prime's
relational templates ("What is the drug that targets the genes or proteins which are expressed in
<anatomy>?"); their answers are every node satisfying the template in the generated graph.

Everything is a function of the seed: node i's text comes from a generator seeded with (seed, i);
relation r's edges from one seeded with (seed, r), in fixed-size chunks, so `edges()` can be run
again (as `queries()` does) and yields the same edges. Edges are produced as numpy arrays a chunk at
a time; memory stays flat however many nodes are asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from stark_pg.skb.records import Node, Query

# PrimeKG's node counts by type (129,375 nodes in all): the proportions the generator keeps.
NODE_TYPES = {
    "biological_process": 28642, "gene/protein": 27671, "disease": 17080, "effect/phenotype": 15311,
    "anatomy": 14035, "molecular_function": 11169, "drug": 7957, "cellular_component": 4176,
    "pathway": 2516, "exposure": 818,
}


@dataclass(frozen=True)
class Relation:
    name: str
    src: str
    dst: str
    weight: float           # PrimeKG's undirected edge count for this (relation, types), in thousands


# STaRK-Prime's 18 relation names with the node types they join and PrimeKG's edge counts.
RELATIONS = (
    Relation("expression present", "anatomy", "gene/protein", 1518.2),
    Relation("synergistic interaction", "drug", "drug", 1336.0),
    Relation("ppi", "gene/protein", "gene/protein", 321.1),
    Relation("phenotype present", "disease", "effect/phenotype", 150.3),
    Relation("interacts with", "gene/protein", "biological_process", 144.8),
    Relation("interacts with", "gene/protein", "cellular_component", 83.4),
    Relation("interacts with", "gene/protein", "molecular_function", 69.5),
    Relation("interacts with", "gene/protein", "pathway", 42.6),
    Relation("interacts with", "exposure", "gene/protein", 1.2),
    Relation("side effect", "drug", "effect/phenotype", 64.8),
    Relation("associated with", "gene/protein", "disease", 80.4),
    Relation("associated with", "gene/protein", "effect/phenotype", 3.3),
    Relation("parent-child", "biological_process", "biological_process", 52.9),
    Relation("parent-child", "disease", "disease", 35.2),
    Relation("parent-child", "effect/phenotype", "effect/phenotype", 18.2),
    Relation("parent-child", "anatomy", "anatomy", 14.1),
    Relation("parent-child", "molecular_function", "molecular_function", 13.6),
    Relation("contraindication", "drug", "disease", 30.7),
    Relation("expression absent", "anatomy", "gene/protein", 19.9),
    Relation("target", "drug", "gene/protein", 16.4),
    Relation("indication", "drug", "disease", 9.4),
    Relation("enzyme", "drug", "gene/protein", 5.3),
    Relation("transporter", "drug", "gene/protein", 3.1),
    Relation("off-label use", "drug", "disease", 2.6),
    Relation("linked to", "exposure", "disease", 2.3),
    Relation("phenotype absent", "disease", "effect/phenotype", 1.5),
    Relation("carrier", "drug", "gene/protein", 0.9),
)
RELATION_NAMES = tuple(dict.fromkeys(r.name for r in RELATIONS))

_SYLLABLES = ("ba", "co", "da", "fe", "ga", "hi", "ka", "lo", "ma", "ne", "pi", "ra", "so", "ta", "vi", "xe", "zo",
              "tri", "quin", "mab", "zol", "pril", "tin", "vir", "cel", "dro", "lex", "mor", "nat", "phy")
_WORDS = {
    "gene/protein": ("kinase", "receptor", "transporter", "channel", "ligase", "factor", "binding", "signalling",
                     "membrane", "nuclear", "transcription", "phosphorylation", "domain", "subunit", "enzyme"),
    "drug": ("inhibitor", "agonist", "antagonist", "antibody", "tablet", "capsule", "oral", "injection", "dose",
             "metabolite", "prodrug", "selective", "approved", "investigational", "compound"),
    "disease": ("syndrome", "chronic", "inflammatory", "hereditary", "infection", "carcinoma", "deficiency",
                "autoimmune", "congenital", "disorder", "degenerative", "acute", "rare", "metabolic", "lesion"),
    "effect/phenotype": ("abnormality", "increased", "decreased", "morphology", "pain", "fever", "weakness",
                         "atrophy", "hypoplasia", "seizure", "delay", "rash", "tremor", "edema", "anemia"),
    "anatomy": ("tissue", "gland", "muscle", "cortex", "epithelium", "bone", "nerve", "lobe", "duct", "vessel",
                "layer", "cell", "marrow", "membrane", "organ"),
    "biological_process": ("regulation", "response", "signaling", "pathway", "development", "transport",
                           "metabolic", "process", "positive", "negative", "cellular", "biosynthesis", "repair",
                           "migration", "differentiation"),
    "molecular_function": ("activity", "binding", "catalytic", "receptor", "transferase", "hydrolase", "ion",
                           "protein", "DNA", "RNA", "oxidoreductase", "kinase", "structural", "ligand", "cofactor"),
    "cellular_component": ("complex", "membrane", "vesicle", "nucleus", "cytoplasm", "lumen", "granule",
                           "junction", "organelle", "filament", "matrix", "envelope", "cytoskeleton", "body",
                           "compartment"),
    "pathway": ("signaling", "metabolism", "cascade", "cycle", "degradation", "activation", "regulation",
                "synthesis", "transport", "response", "network", "interaction", "assembly", "uptake", "release"),
    "exposure": ("chemical", "pollutant", "smoke", "metal", "pesticide", "solvent", "radiation", "dust",
                 "compound", "toxin", "particulate", "fume", "residue", "agent", "contaminant"),
}
_GENERIC = ("associated", "observed", "reported", "human", "clinical", "studies", "expression", "function",
            "levels", "patients", "mechanism", "role", "known", "involved", "several")

# Query templates: (relation path from the answer to the anchor, anchor type, wording). Answers are
# every node of the answer type reaching the anchor along the path.
TEMPLATES = (
    (("target",), "gene/protein", "Which drugs target the gene or protein {anchor}?"),
    (("indication",), "disease", "What drugs are indicated for {anchor}?"),
    (("associated with",), "disease", "Which genes or proteins are associated with {anchor}?"),
    (("interacts with",), "pathway", "Which genes or proteins interact with the {anchor} pathway?"),
    (("target", "expression present"), "anatomy",
     "What is the drug that targets the genes or proteins which are expressed in {anchor}?"),
    (("side effect", "phenotype present"), "disease",
     "Which drugs have a side effect that is a phenotype present in {anchor}?"),
)
ANSWER_TYPE = {("target",): "drug", ("indication",): "drug", ("associated with",): "gene/protein",
               ("interacts with",): "gene/protein", ("target", "expression present"): "drug",
               ("side effect", "phenotype present"): "drug"}
_CHUNK = 1 << 20
_NODE_CHUNK = 10_000
MAX_ANSWERS = 25


def _hash(ids: np.ndarray, salt: int) -> np.ndarray:
    """A cheap integer hash (splitmix64's finaliser), vectorised: the same value for the same (id, salt)."""
    with np.errstate(over="ignore"):           # uint64 arithmetic wraps on purpose
        x = ids.astype(np.uint64) + np.uint64(salt) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (x ^ (x >> np.uint64(31))).astype(np.int64) & 0x7FFFFFFF


class SyntheticSource:
    """A Prime-shaped SKB of `nodes` nodes and about `edges_per_node` directed edges per node."""

    format = "synthetic"
    nodes_label = "synthetic nodes"
    edges_label = "synthetic edges"
    queries_label = "synthetic queries"

    def __init__(self, nodes: int = 10_000, seed: int = 0, queries: int | None = None, edges_per_node: float = 20.0):
        if nodes < 100:
            raise ValueError("a synthetic SKB needs at least 100 nodes")
        self.n, self.seed, self.edges_per_node = int(nodes), int(seed), float(edges_per_node)
        self.n_queries = queries if queries is not None else min(1000, max(60, self.n // 100))
        total = sum(NODE_TYPES.values())
        counts = [max(1, round(self.n * c / total)) for c in NODE_TYPES.values()]
        counts[0] += self.n - sum(counts)
        self.types = tuple(NODE_TYPES)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.location = f"synthetic nodes={self.n} seed={self.seed} edges_per_node={self.edges_per_node:g}"
        self.default_name = f"synthetic-{self.n}"
        self.meta = {"nodes": self.n, "seed": self.seed, "edges_per_node": self.edges_per_node,
                     "queries": self.n_queries}

    # -- nodes ---------------------------------------------------------------------------------
    def type_range(self, node_type: str) -> tuple[int, int]:
        i = self.types.index(node_type)
        return int(self.starts[i]), int(self.starts[i + 1])

    def type_of(self, node_id: int) -> str:
        return self.types[int(np.searchsorted(self.starts, node_id, side="right")) - 1]

    def name(self, node_id: int) -> str:
        return self._names(np.array([node_id], dtype=np.int64))[0]

    def _names(self, ids: np.ndarray) -> list[str]:
        """Names as a pure function of (seed, id), so a query can name its anchor without replaying nodes."""
        picks = [_hash(ids, self.seed * 16 + k) % len(_SYLLABLES) for k in range(4)]
        names = []
        for j, node_id in enumerate(ids.tolist()):
            syllables = "".join(_SYLLABLES[p[j]] for p in picks[:3])
            node_type = self.type_of(node_id)
            if node_type == "gene/protein":
                names.append(f"{syllables[:4].upper()}{node_id % 97 + 1}")
            elif node_type == "drug":
                names.append(f"{syllables.capitalize()}{node_id % 89}")
            else:
                words = _WORDS[node_type]
                names.append(f"{syllables} {words[picks[3][j] % len(words)]} {node_id % 83}")
        return names

    def nodes(self) -> Iterator[tuple[int, Node]]:
        for start in range(0, self.n, _NODE_CHUNK):
            ids = np.arange(start, min(start + _NODE_CHUNK, self.n), dtype=np.int64)
            rng = np.random.default_rng([self.seed, 2, start])
            own = rng.integers(0, 15, (len(ids), 10)).tolist()
            generic = rng.integers(0, len(_GENERIC), (len(ids), 6)).tolist()
            for node_id, name, w, g in zip(ids.tolist(), self._names(ids), own, generic):
                node_type = self.type_of(node_id)
                v = _WORDS[node_type]
                description = (f"{name} is a {node_type.replace('/', ' or ')} {v[w[0]]} {v[w[1]]}. "
                               f"It is {_GENERIC[g[0]]} with {v[w[2]]} {v[w[3]]} and {v[w[4]]} {_GENERIC[g[1]]} "
                               f"{v[w[5]]}; {_GENERIC[g[2]]} {_GENERIC[g[3]]} {v[w[6]]} {v[w[7]]} in "
                               f"{_GENERIC[g[4]]} {v[w[8]]} {v[w[9]]} {_GENERIC[g[5]]}.")
                yield node_id, Node(node_id, node_type, name, {"description": description})

    # -- edges ---------------------------------------------------------------------------------
    def relation_pairs(self, index: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(src, dst) arrays of relation RELATIONS[index], in chunks; the same ones on every call."""
        relation = RELATIONS[index]
        total_weight = sum(r.weight for r in RELATIONS)
        pairs = int(round(self.n * self.edges_per_node / 2 * relation.weight / total_weight))
        rng = np.random.default_rng([self.seed, 3, index])
        src_lo, src_hi = self.type_range(relation.src)
        dst_lo, dst_hi = self.type_range(relation.dst)
        for start in range(0, pairs, _CHUNK):
            size = min(_CHUNK, pairs - start)
            # heavy tails: u ** 3 crowds picks near the start of each type's range (its hubs)
            src = src_lo + (rng.random(size) ** 3 * (src_hi - src_lo)).astype(np.int64)
            dst = dst_lo + (rng.random(size) ** 2 * (dst_hi - dst_lo)).astype(np.int64)
            keep = src != dst
            yield src[keep], dst[keep]

    def edges(self) -> Iterator[tuple[str, int, str, int]]:
        for index, relation in enumerate(RELATIONS):
            for chunk_no, (src, dst) in enumerate(self.relation_pairs(index)):
                position = f"relation {index} chunk {chunk_no}"
                for s, d in zip(src.tolist(), dst.tolist()):
                    yield position, s, relation.name, d
                    yield position, d, relation.name, s

    # -- queries -------------------------------------------------------------------------------
    def adjacency(self, name: str):
        """Sparse matrix M with M[a, b] > 0 when an edge `name` joins a and b (either direction)."""
        from scipy.sparse import csr_matrix

        rows, cols = [], []
        for index, relation in enumerate(RELATIONS):
            if relation.name != name:
                continue
            for src, dst in self.relation_pairs(index):
                rows.append(src)
                cols.append(dst)
        src, dst = np.concatenate(rows), np.concatenate(cols)
        # stored both ways: a node reaches its neighbour whichever end it sits at
        a, b = np.concatenate([src, dst]), np.concatenate([dst, src])
        return csr_matrix((np.ones(len(a), dtype=np.int32), (a, b)), shape=(self.n, self.n))

    def queries(self) -> Iterator[tuple[str, Query]]:
        rng = np.random.default_rng([self.seed, 4])
        matrices: dict[str, object] = {}
        per_template = -(-self.n_queries // len(TEMPLATES))
        made = 0
        for t_index, (path, anchor_type, wording) in enumerate(TEMPLATES):
            for name in path:
                if name not in matrices:
                    matrices[name] = self.adjacency(name)
            lo, hi = self.type_range(anchor_type)
            answer_lo, answer_hi = self.type_range(ANSWER_TYPE[path])
            found = 0
            for anchor in rng.permutation(np.arange(lo, hi))[: per_template * 20].tolist():
                answers = self.reach(matrices, path, anchor, answer_lo, answer_hi)
                if not 1 <= len(answers) <= MAX_ANSWERS:
                    continue
                query_id = t_index * self.n + anchor
                split = ("train", "train", "train", "val", "test")[made % 5]
                yield f"template {t_index} anchor {anchor}", Query(query_id, split,
                                                                  wording.format(anchor=self.name(anchor)), answers)
                made += 1
                found += 1
                if found == per_template or made == self.n_queries:
                    break
            if made == self.n_queries:
                return

    def reach(self, matrices, path: tuple[str, ...], anchor: int, lo: int, hi: int) -> list[int]:
        """Nodes in [lo, hi) that reach `anchor` along `path` (answer -> ... -> anchor), via typed hops."""
        frontier = np.zeros(self.n, dtype=bool)
        frontier[anchor] = True
        hop_types = self._hop_types(path)
        for name, (h_lo, h_hi) in zip(reversed(path), hop_types):
            reached = matrices[name][frontier].sum(axis=0).A1 > 0 if frontier.any() else np.zeros(self.n, bool)
            mask = np.zeros(self.n, dtype=bool)
            mask[h_lo:h_hi] = True
            frontier = reached & mask
        return [int(i) for i in np.flatnonzero(frontier) if lo <= i < hi]

    def _hop_types(self, path: tuple[str, ...]) -> list[tuple[int, int]]:
        """The node-type range reached by each hop, walking from the anchor back to the answer."""
        middle = {("target", "expression present"): ["gene/protein", "drug"],
                  ("side effect", "phenotype present"): ["effect/phenotype", "drug"]}
        kinds = middle.get(path, [ANSWER_TYPE[path]])
        return [self.type_range(k) for k in kinds]
