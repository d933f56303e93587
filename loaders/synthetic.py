"""A synthetic SKB shaped like STaRK-Prime, with template queries whose answers are exact.

Why: the real slice has 3.4K nodes; speed and memory need SKBs of 100K to millions of nodes, and a
demo needs something to load on a fresh machine. The generator reproduces Prime's shape, not its
facts:

- Prime's 10 node types in PrimeKG's proportions, with unique, identifier-like names (gene symbols
  such as `KOBA7`, drug names with real drug stems such as `Tefumab`, "Rikado syndrome", ...);
- its 18 relation types, split like PrimeKG into 33 (relation, source type, target type) kinds in
  PrimeKG's proportions; each undirected pair is stored in both directions, as PrimeKG does, and
  appears once (no duplicate edges, no self-loops);
- heavy-tailed degrees: a node's popularity rank r within its type is drawn as floor(m * u**a), so
  edge counts fall off with rank like a Zipf law (a few hubs, many leaves); ranks are scrambled
  onto node ids so that hubs are not simply the first ids;
- a `description` of two to four sentences per node from templates, a type vocabulary and a long
  tail of pseudo-terms (so BM25 sees rare as well as common terms), naming the node's attribute
  (a drug's form, a disease's category, a gene's family), which `attrs` also carries, and for drugs,
  genes and diseases a trait ("It is noted for renal excretion.");
- queries from STaRK-Prime-style templates (1-hop, 2-hop, two anchors, relation + text attribute,
  relation + textual requirement), e.g. "What is the drug that targets the genes or proteins which
  are expressed in <anatomy>?" or "Which drugs target the gene or protein <gene> and are noted for
  renal excretion?"; a query's answers are *all* nodes satisfying it in the generated graph and text.

Why the textual requirements: STaRK's questions join a relation to what the answers' text says, so
that neither text nor graph alone answers them. Here too: text retrieval finds a trait's holders
(about 4% of a type) but not which of them the relation reaches; the relation's neighbours are in
the graph (and in the relation fields `stark-pg index --relation-fields` builds), not in the text.

Everything is a pure function of the seed: node text comes from generators seeded with (seed, chunk)
and hashes of (seed, id); a relation's edges come in blocks of popularity rank, each from a generator
seeded with (seed, relation, block), so `edges()` yields the same edges on every call and the loader
never holds more than a block (about a million directed edges of numpy ints) at a time. Queries
need the adjacency of the relation kinds they walk (scipy sparse rows, no Python objects per edge).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from stark_pg.skb.records import LoadError, Node, Query

# PrimeKG's node counts by type (129,375 nodes in all): the proportions the generator keeps.
NODE_TYPES = {
    "biological_process": 28642, "gene/protein": 27671, "disease": 17080, "effect/phenotype": 15311,
    "anatomy": 14035, "molecular_function": 11169, "drug": 7957, "cellular_component": 4176,
    "pathway": 2516, "exposure": 818,
}


@dataclass(frozen=True)
class Relation:
    """One kind of PrimeKG edge: a STaRK relation name between two node types."""

    name: str
    src: str
    dst: str
    weight: float           # PrimeKG's undirected edge count for this kind, in thousands
    src_skew: float = 3.0   # popularity exponent a of the source end (rank = floor(m * u**a))
    dst_skew: float = 2.0   # ... of the target end; for same-type kinds, d = floor(s * v**a) < s

    @property
    def same_type(self) -> bool:
        return self.src == self.dst


# STaRK-Prime's 18 relation names over the 33 (relation, type, type) kinds of PrimeKG (its 30
# relations, drug_protein split into target / enzyme / transporter / carrier), with PrimeKG's counts.
RELATIONS = (
    Relation("expression present", "anatomy", "gene/protein", 1518.2),
    Relation("synergistic interaction", "drug", "drug", 1336.3, 1.5, 1.5),
    Relation("ppi", "gene/protein", "gene/protein", 321.1, 1.5, 2.0),
    Relation("phenotype present", "disease", "effect/phenotype", 150.3),
    Relation("interacts with", "gene/protein", "biological_process", 144.8),
    Relation("interacts with", "gene/protein", "cellular_component", 83.4),
    Relation("associated with", "gene/protein", "disease", 80.4),
    Relation("interacts with", "gene/protein", "molecular_function", 69.5),
    Relation("side effect", "drug", "effect/phenotype", 64.8),
    Relation("parent-child", "biological_process", "biological_process", 52.9, 1.0, 1.5),
    Relation("interacts with", "gene/protein", "pathway", 42.6),
    Relation("parent-child", "disease", "disease", 35.2, 1.0, 1.5),
    Relation("contraindication", "drug", "disease", 30.7),
    Relation("expression absent", "anatomy", "gene/protein", 19.9),
    Relation("parent-child", "effect/phenotype", "effect/phenotype", 18.7, 1.0, 1.5),
    Relation("target", "drug", "gene/protein", 16.4),
    Relation("parent-child", "anatomy", "anatomy", 14.0, 1.0, 1.5),
    Relation("parent-child", "molecular_function", "molecular_function", 13.6, 1.0, 1.5),
    Relation("indication", "drug", "disease", 9.4),
    Relation("enzyme", "drug", "gene/protein", 5.3),
    Relation("parent-child", "cellular_component", "cellular_component", 4.8, 1.0, 1.5),
    Relation("associated with", "gene/protein", "effect/phenotype", 3.3),
    Relation("transporter", "drug", "gene/protein", 3.1),
    Relation("off-label use", "drug", "disease", 2.6),
    Relation("parent-child", "pathway", "pathway", 2.5, 1.0, 1.5),
    Relation("linked to", "exposure", "disease", 2.3),
    Relation("parent-child", "exposure", "exposure", 2.2, 1.0, 1.5),
    Relation("interacts with", "exposure", "biological_process", 1.6),
    Relation("phenotype absent", "disease", "effect/phenotype", 1.5),
    Relation("interacts with", "exposure", "gene/protein", 1.2),
    Relation("carrier", "drug", "gene/protein", 0.9),
    Relation("interacts with", "exposure", "molecular_function", 0.045),
    Relation("interacts with", "exposure", "cellular_component", 0.01),
)

# -- text material -----------------------------------------------------------------------------
_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")      # 70, all two letters
# Drug stems: none is a run of consonant-vowel syllables followed by another stem, so a drug name
# (syllables + stem) can be read back one way only: names stay unique.
_DRUG_STEMS = ("mab", "nib", "pril", "stat", "vir", "sartan", "cillin", "floxacin", "dronate", "parin",
               "lukast", "setron", "gliptin", "triptan", "xaban", "zepam")
_NAME_PATTERNS = {
    "disease": ("{W} syndrome", "{W} disease", "{W} dystrophy", "{W} carcinoma", "{W} deficiency",
                "{W} ataxia", "{W} myopathy", "{W} neuropathy", "{W} dysplasia", "{W} anemia"),
    "effect/phenotype": ("abnormal {w} morphology", "increased {w} level", "decreased {w} level",
                         "{w} hypoplasia", "{w} atrophy", "recurrent {w} infections", "{w} aplasia"),
    "anatomy": ("{w} gland", "{w} cortex", "{w} epithelium", "{w} nerve", "{w} duct", "{w} muscle",
                "{w} lobe", "{w} vessel"),
    "biological_process": ("regulation of {w} signaling", "{w} biosynthetic process", "response to {w}",
                           "{w} catabolic process", "positive regulation of {w} transport",
                           "negative regulation of {w} activity"),
    "molecular_function": ("{w} binding", "{w} kinase activity", "{w} transporter activity",
                           "{w} hydrolase activity", "{w} receptor activity"),
    "cellular_component": ("{w} complex", "{w} membrane", "{w} vesicle", "{w} granule", "{w} filament"),
    "pathway": ("{W} signaling pathway", "Metabolism of {w}", "{W} degradation", "Activation of {w} receptors",
                "Transport of {w}"),
    "exposure": ("{w} compound", "{w}ic acid", "{w} dust", "{w} pesticide"),
}
_GENE_SUFFIXES = 20          # gene symbols: syllables + a number 1..20

# The attribute a question can name, per type: values and their relative frequencies.
ATTRIBUTES = {
    "drug": ("form", ("tablet", "capsule", "injection", "oral solution", "topical cream", "inhalation aerosol"),
             (35, 20, 20, 10, 8, 7)),
    "disease": ("category", ("hereditary", "autoimmune", "infectious", "metabolic", "neoplastic", "degenerative"),
                (30, 12, 15, 18, 15, 10)),
    "gene/protein": ("family", ("kinase", "receptor", "transporter", "ion channel", "transcription factor",
                                "enzyme", "structural protein"), (12, 15, 10, 6, 14, 30, 13)),
}

# A finer property each drug, gene and disease has, stated in its description ("It is noted for ...") and
# asked for by the questions that combine a relation with a textual requirement, as STaRK-Prime's do:
# the text narrows the nodes a relation reaches. 24 per type, so each is held by about 4% of the type;
# within a type no content word is shared, so a requirement's words pick out its holders.
TRAITS = {
    "drug": ("blood-brain barrier penetration", "renal excretion", "hepatic clearance by CYP3A4",
             "a long elimination half-life", "a narrow therapeutic index", "photosensitivity reactions",
             "QT interval prolongation", "once-weekly administration", "extensive plasma protein binding",
             "poor oral bioavailability", "teratogenic risk in pregnancy", "reversible neutropenia",
             "rapid onset", "enterohepatic recirculation", "autoinduction of its own metabolism",
             "ototoxicity", "orphan designation", "paediatric use", "tolerance with prolonged therapy",
             "withdrawal symptoms after abrupt cessation", "pH-dependent absorption", "lactic acidosis warnings",
             "grapefruit juice interactions", "refrigerated storage"),
    "gene/protein": ("imprinted expression", "mitochondrial localisation", "many splice isoforms",
                     "X-linked inheritance", "haploinsufficiency", "circadian oscillation",
                     "tumour suppressor function", "oncogenic fusion transcripts", "germline restriction",
                     "zinc finger motifs", "leucine-rich repeats", "ubiquitin ligase partners",
                     "glycosylphosphatidylinositol anchoring", "secretion into plasma", "heat shock induction",
                     "hypoxia responsiveness", "interferon inducibility", "embryonic lethality in knockout mice",
                     "copy number variation", "microRNA control", "CpG island methylation",
                     "nonsense-mediated decay", "lysosomal targeting", "ciliary trafficking"),
    "disease": ("childhood onset", "autosomal recessive inheritance", "maternal transmission", "episodic flares",
                "high mortality", "female predominance", "late-life emergence", "founder mutations",
                "progressive hearing loss", "intellectual disability", "cardiac involvement", "renal cysts",
                "skin photosensitivity", "endemic tropical distribution", "seasonal outbreaks",
                "spontaneous remission", "genetic anticipation", "consanguineous families",
                "elevated serum ferritin", "neonatal presentation", "painless jaundice", "ocular manifestations",
                "a chronic relapsing course", "occupational exposure"),
}

_VOCABULARY = {
    "gene/protein": ("kinase", "receptor", "transporter", "channel", "ligase", "factor", "binding", "signalling",
                     "membrane", "nuclear", "transcription", "phosphorylation", "domain", "subunit", "isoform"),
    "drug": ("inhibitor", "agonist", "antagonist", "antibody", "modulator", "blocker", "dose", "metabolite",
             "prodrug", "selective", "approved", "investigational", "compound", "analogue", "derivative"),
    "disease": ("onset", "inflammation", "lesions", "infection", "malformation", "deficiency", "progression",
                "relapse", "fibrosis", "degeneration", "tumours", "seizures", "weakness", "pain", "atrophy"),
    "effect/phenotype": ("abnormality", "morphology", "pain", "fever", "weakness", "atrophy", "hypoplasia",
                         "seizure", "delay", "rash", "tremor", "edema", "anemia", "stiffness", "fatigue"),
    "anatomy": ("tissue", "gland", "muscle", "cortex", "epithelium", "bone", "nerve", "lobe", "duct", "vessel",
                "layer", "cells", "marrow", "membrane", "organ"),
    "biological_process": ("regulation", "response", "signaling", "development", "transport", "metabolism",
                           "assembly", "cellular", "biosynthesis", "repair", "migration", "differentiation",
                           "homeostasis", "secretion", "proliferation"),
    "molecular_function": ("activity", "binding", "catalytic", "receptor", "transferase", "hydrolase", "ion",
                           "protein", "DNA", "RNA", "oxidoreductase", "kinase", "structural", "ligand", "cofactor"),
    "cellular_component": ("complex", "membrane", "vesicle", "nucleus", "cytoplasm", "lumen", "granule",
                           "junction", "organelle", "filament", "matrix", "envelope", "cytoskeleton", "body",
                           "compartment"),
    "pathway": ("signaling", "metabolism", "cascade", "cycle", "degradation", "activation", "regulation",
                "synthesis", "transport", "response", "network", "interaction", "assembly", "uptake", "release"),
    "exposure": ("chemical", "pollutant", "smoke", "metal", "pesticide", "solvent", "radiation", "dust",
                 "residue", "toxin", "particulate", "fume", "agent", "contaminant", "vapour"),
}
_GENERIC = ("associated", "observed", "reported", "clinical", "common", "rare", "frequent", "known", "involved",
            "documented", "altered", "elevated", "reduced", "specific", "variable")
_FIRST_SENTENCE = {
    "gene/protein": "{name} is a protein-coding gene of the {attr} family; its product is a {v0} {v1} protein.",
    "drug": "{name} is a {v0} {v1} supplied as {article} {attr}.",
    "disease": "{name} is {article} {attr} disease characterised by {v0} and {v1}.",
    "effect/phenotype": "{name} is a clinical feature describing {v0} and {v1}.",
    "anatomy": "The {name} is an anatomical structure of the {v0} {v1}.",
    "biological_process": "{name} is a biological process involving {v0} and {v1}.",
    "molecular_function": "{name} is a molecular function of {v0} {v1}.",
    "cellular_component": "{name} is a cellular component, part of the {v0} {v1}.",
    "pathway": "{name} is a pathway of {v0} and {v1}.",
    "exposure": "{name} is an environmental exposure to {v0} {v1}.",
}
_SECOND_SENTENCE = ("It is {g0} with {x0} {v2} and {v3} {x1}.",
                    "{G0} findings connect it to {x0} {v2} and {x1} {v3}.",
                    "Its {v2} {x0} is {g0} in {x1} {v3}.",
                    "Reports describe {x0} {v2} together with {v3} {x1}.")
_THIRD_SENTENCE = (" {X2} {v4} is {g1} in {g2} cases.", " Also known for {x2} {v4}.", "")
_LEXICON_SIZE = 4000


def _lexicon() -> tuple[str, ...]:
    """4,000 pseudo-terms (three syllables and a final letter): the long tail of the descriptions."""
    finals = "nlrsx"
    out = []
    for j in range(_LEXICON_SIZE):
        a, b, c, f = j % 70, (j // 70) % 70, (j * 7 + j // 4900) % 70, j % 5
        out.append(_SYLLABLES[(a * 37 + 11) % 70] + _SYLLABLES[(b * 23 + 5) % 70] + _SYLLABLES[c] + finals[f])
    return tuple(dict.fromkeys(out))


_LEXICON = _lexicon()


# -- query templates -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Template:
    """Answers: nodes of type `answer` that reach every anchor along its path, with `attribute` if set.

    A path is a tuple of (relation, node type) hops walked from the answer; the last hop's type is the
    anchor's. Wording names anchors {anchor0}, {anchor1}, the attribute value {value} and, when `trait`
    is set, the trait {trait} the answers share (a textual requirement: the answers' descriptions state
    it, so text finds them among the nodes the relation reaches).
    """

    key: str
    answer: str
    paths: tuple[tuple[tuple[str, str], ...], ...]
    attribute: str | None
    wording: str
    trait: bool = False


TEMPLATES = (
    Template("drug-target", "drug", ((("target", "gene/protein"),),), None,
             "Which drugs target the gene or protein {anchor0} and are noted for {trait}?", trait=True),
    Template("form-drug-target", "drug", ((("target", "gene/protein"),),), "form",
             "Can you list {value} medications that target {anchor0}?"),
    Template("drug-indication", "drug", ((("indication", "disease"),),), None,
             "What drugs indicated for {anchor0} are noted for {trait}?", trait=True),
    Template("gene-disease", "gene/protein", ((("associated with", "disease"),),), None,
             "Which genes or proteins associated with {anchor0} are noted for {trait}?", trait=True),
    Template("disease-gene", "disease", ((("associated with", "gene/protein"),),), None,
             "Which diseases linked to the gene {anchor0} are noted for {trait}?", trait=True),
    Template("family-gene-disease", "gene/protein", ((("associated with", "disease"),),), "family",
             "Which {value} genes or proteins are associated with {anchor0}?"),
    Template("gene-pathway", "gene/protein", ((("interacts with", "pathway"),),), None,
             "Which genes or proteins noted for {trait} interact with the pathway {anchor0}?", trait=True),
    Template("drug-target-expressed", "drug", ((("target", "gene/protein"), ("expression present", "anatomy")),),
             None, "What is the drug that targets the genes or proteins which are expressed in {anchor0}?"),
    Template("drug-side-effect-of-disease", "drug",
             ((("side effect", "effect/phenotype"), ("phenotype present", "disease")),), None,
             "Which drugs have a side effect that is also a phenotype of {anchor0}?"),
    Template("component-of-drug-targets", "cellular_component",
             ((("interacts with", "gene/protein"), ("target", "drug")),), None,
             "Which cellular components interact with the genes or proteins targeted by {anchor0}?"),
    Template("anatomy-lacking-disease-genes", "anatomy",
             ((("expression absent", "gene/protein"), ("associated with", "disease")),), None,
             "Which anatomical structures lack expression of genes or proteins associated with {anchor0}?"),
    Template("ppi-expressed", "gene/protein", ((("ppi", "gene/protein"),), (("expression present", "anatomy"),)),
             None, "Which genes or proteins interact with {anchor0} and are expressed in {anchor1}?"),
    Template("indication-side-effect", "drug", ((("indication", "disease"),), (("side effect", "effect/phenotype"),)),
             None, "Which drugs are indicated for {anchor0} and can cause {anchor1} as a side effect?"),
    Template("category-disease-phenotype", "disease", ((("phenotype present", "effect/phenotype"),),), "category",
             "Which {value} diseases present with {anchor0}?"),
)
MAX_ANSWERS = 25             # STaRK-Prime's questions have a handful of answers; larger sets are skipped
_MAX_FRONTIER = 5000         # anchors whose intermediate sets exceed this are skipped (answers would too)
_SPLITS = ("train", "train", "train", "val", "test")      # 60 / 20 / 20, round robin
_PAIR_BLOCK = 1 << 19        # pairs per generation block (about a million directed edges)
_DRAW_ROUNDS = 12            # rounds of redrawing a block's repeated pairs before settling for fewer pairs
_NODE_CHUNK = 10_000         # nodes whose descriptions share one batch of random draws


def _hash(ids: np.ndarray, salt: int) -> np.ndarray:
    """A cheap integer hash (splitmix64's finaliser), vectorised: the same value for the same (id, salt)."""
    with np.errstate(over="ignore"):           # uint64 arithmetic wraps on purpose
        x = ids.astype(np.uint64) + np.uint64(salt % (1 << 64)) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return ((x ^ (x >> np.uint64(31))) & np.uint64(0x7FFFFFFF)).astype(np.int64)


def _coprime_near(m: int, fraction: float) -> int:
    """A multiplier near m * fraction sharing no factor with m, so that x -> a*x mod m is a bijection."""
    a = max(1, int(m * fraction)) | 1
    while math.gcd(a, m) != 1:
        a += 2
    return a % m if m > 1 else 0


class _Scramble:
    """A bijection of 0..m-1 (x -> (a*x + b) mod m): ranks or name numbers onto a type's local ids."""

    def __init__(self, m: int, fraction: float, offset: int):
        self.m, self.a, self.b = m, _coprime_near(m, fraction), offset % max(m, 1)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x * self.a + self.b) % self.m if self.m > 1 else np.zeros_like(x)


@dataclass(frozen=True)
class _TextDraws:
    """The random choices behind a chunk of descriptions: drawn at once with numpy, read row by row."""

    vocab: list[list[int]]       # five words of the type's vocabulary
    generic: list[list[int]]     # three generic words
    lex: list[list[int]]         # three long-tail terms
    second: list[int]            # which second sentence
    third: list[int]             # which third sentence (one is empty)

    @classmethod
    def draw(cls, rng: np.random.Generator, size: int) -> _TextDraws:
        vocab = rng.integers(0, 15, (size, 5)).tolist()
        generic = rng.integers(0, len(_GENERIC), (size, 3)).tolist()
        # the long tail: term j is drawn with probability falling off like a power of j
        lex = (len(_LEXICON) * rng.random((size, 3)) ** 2.5).astype(np.int64).tolist()
        second = rng.integers(0, len(_SECOND_SENTENCE), size).tolist()
        third = rng.integers(0, len(_THIRD_SENTENCE), size).tolist()
        return cls(vocab, generic, lex, second, third)


def _describe(node_type: str, name: str, attr: str | None, trait: str | None, draws: _TextDraws, row: int) -> str:
    """Two to four sentences: the first names the node (and its attribute, which a question may ask
    for), then its trait where its type has one ("It is noted for ..."), the others mix the type's
    vocabulary, generic words and long-tail terms, the mix of common and rare terms BM25 meets in real
    descriptions."""
    vocabulary = _VOCABULARY[node_type]
    v, g, x = draws.vocab[row], draws.generic[row], draws.lex[row]
    words = {"v0": vocabulary[v[0]], "v1": vocabulary[v[1]], "v2": vocabulary[v[2]], "v3": vocabulary[v[3]],
             "v4": vocabulary[v[4]], "g0": _GENERIC[g[0]], "G0": _GENERIC[g[0]].capitalize(),
             "g1": _GENERIC[g[1]], "g2": _GENERIC[g[2]], "x0": _LEXICON[x[0]], "x1": _LEXICON[x[1]],
             "x2": _LEXICON[x[2]], "X2": _LEXICON[x[2]].capitalize()}
    article = "an" if attr and attr[0] in "aeiou" else "a"
    return (_FIRST_SENTENCE[node_type].format(name=name, attr=attr, article=article, **words)
            + (f" It is noted for {trait}." if trait else "")
            + " " + _SECOND_SENTENCE[draws.second[row]].format(**words)
            + _THIRD_SENTENCE[draws.third[row]].format(**words))


def _distinct_pairs(rng: np.random.Generator, relation: Relation, m_src: int, m_dst: int,
                    ranks: tuple[int, int], u_range: tuple[float, float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """`size` distinct (source rank, target rank) pairs with source ranks in `ranks`, in draw order.

    Popular ranks are drawn again and again, so repeats are dropped and more pairs drawn, for up to
    _DRAW_ROUNDS rounds (a block that is nearly full may end with fewer pairs). For a same-type kind
    the target's rank is below the source's (d = floor(s * v**b) < s): an unordered pair has one
    (s, d) form only, and there are no loops.
    """
    lo, hi = ranks
    a, b = relation.src_skew, relation.dst_skew
    keys = np.zeros(0, dtype=np.int64)
    draw = size + size // 8 + 16
    for _ in range(_DRAW_ROUNDS):
        s = np.clip((m_src * rng.uniform(u_range[0], u_range[1], draw) ** a).astype(np.int64), lo, hi - 1)
        if relation.same_type:               # the minimum guards float rounding of s * v**b up to s
            d = np.minimum((s * rng.random(draw) ** b).astype(np.int64), s - 1)
        else:
            d = np.minimum((m_dst * rng.random(draw) ** b).astype(np.int64), m_dst - 1)
        keys = np.concatenate([keys, s * m_dst + d])
        unique, first_seen = np.unique(keys, return_index=True)
        if len(unique) >= size:
            break
        draw = 2 * (size - len(unique)) + 16
    keys = keys[np.sort(first_seen)[:size]]
    return keys // m_dst, keys % m_dst


class _Adjacency:
    """One relation kind as a sparse matrix over the two types' local ids (scipy CSR), kept both ways round.

    Why: the queries' exact answers walk a relation from a frontier of nodes. At a million nodes the
    kinds the templates use hold millions of pairs; CSR rows keep them as compact int arrays and
    gather a whole frontier's neighbours in one vectorised call.
    """

    def __init__(self, source: SyntheticSource, index: int):
        relation = self.relation = RELATIONS[index]
        self.src_lo, self.dst_lo = source.type_range(relation.src)[0], source.type_range(relation.dst)[0]
        pairs = list(source.relation_pairs(index))
        src = np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0, np.int64)
        dst = np.concatenate([p[1] for p in pairs]) if pairs else np.zeros(0, np.int64)
        shape = (source.type_size(relation.src), source.type_size(relation.dst))
        self.forward = sparse.csr_array((np.ones(len(src), dtype=bool), (src - self.src_lo, dst - self.dst_lo)),
                                        shape=shape)
        self.backward = self.forward.T.tocsr()

    def neighbours(self, nodes: np.ndarray, from_type: str) -> np.ndarray:
        """Sorted unique ids joined to any of `nodes` (all of type `from_type`) by this relation kind."""
        found = [np.zeros(0, dtype=np.int64)]
        if from_type == self.relation.src:
            found.append(self.forward[nodes - self.src_lo].indices + self.dst_lo)
        if from_type == self.relation.dst:
            found.append(self.backward[nodes - self.dst_lo].indices + self.src_lo)
        return np.unique(np.concatenate(found).astype(np.int64))

    def has_neighbours(self, from_type: str) -> np.ndarray:
        """Ids of `from_type` nodes with at least one neighbour by this relation kind."""
        ids = [np.zeros(0, dtype=np.int64)]
        if from_type == self.relation.src:
            ids.append(np.flatnonzero(np.diff(self.forward.indptr)) + self.src_lo)
        if from_type == self.relation.dst:
            ids.append(np.flatnonzero(np.diff(self.backward.indptr)) + self.dst_lo)
        return np.unique(np.concatenate(ids))


def relation_kind(name: str, a: str, b: str) -> int:
    """Index in RELATIONS of relation `name` between node types a and b (either way round)."""
    for index, r in enumerate(RELATIONS):
        if r.name == name and {r.src, r.dst} == {a, b}:
            return index
    raise KeyError(f"no relation {name!r} between {a} and {b}")


class SyntheticSource:
    """A Prime-shaped SKB of `nodes` nodes and about `edges_per_node` directed edges per node."""

    format = "synthetic"
    nodes_label = "synthetic nodes"
    edges_label = "synthetic edges"
    queries_label = "synthetic queries"

    def __init__(self, nodes: int = 10_000, seed: int = 0, queries: int | None = None, edges_per_node: float = 20.0):
        if nodes < 100:
            raise LoadError(f"synthetic: --nodes must be at least 100, not {nodes}")
        if not edges_per_node >= 0:
            raise LoadError(f"synthetic: --edges-per-node must be 0 or more, not {edges_per_node:g}")
        if queries is not None and queries < 0:
            raise LoadError(f"synthetic: the number of queries must be 0 or more, not {queries}")
        self.n, self.seed, self.edges_per_node = int(nodes), int(seed), float(edges_per_node)
        self.n_queries = int(queries) if queries is not None else min(1000, max(100, self.n // 100))
        total = sum(NODE_TYPES.values())
        counts = [max(1, round(self.n * c / total)) for c in NODE_TYPES.values()]
        counts[0] += self.n - sum(counts)
        self.types = tuple(NODE_TYPES)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.location = f"synthetic nodes={self.n} seed={self.seed} edges_per_node={self.edges_per_node:g}"
        self.default_name = f"synthetic-{self.n}"
        self.meta = {"nodes": self.n, "seed": self.seed, "edges_per_node": self.edges_per_node,
                     "queries": self.n_queries, "generator": "stark-prime-shaped/3"}
        salt = self.seed * 1_000_003
        self._rank = {t: _Scramble(counts[i], 0.6180339887, int(_hash(np.array([i]), salt + 1)[0]))
                      for i, t in enumerate(self.types)}
        self._naming = {t: _Scramble(counts[i], 0.4142135623, int(_hash(np.array([i]), salt + 2)[0]))
                        for i, t in enumerate(self.types)}
        self._syllable_offsets = {t: _hash(np.arange(8) + 16 * i, salt + 3) % len(_SYLLABLES)
                                  for i, t in enumerate(self.types)}
        self._pairs = self._pair_targets()

    def _pair_targets(self) -> list[int]:
        """Undirected pairs per relation kind: n * edges_per_node / 2 shared out by PrimeKG's counts, at
        most as many as the two types allow (a small SKB's 100-odd drugs cannot hold all their pairs)."""
        weight = sum(r.weight for r in RELATIONS)
        targets = []
        for r in RELATIONS:
            m_src, m_dst = self.type_size(r.src), self.type_size(r.dst)
            possible = m_src * (m_src - 1) // 2 if r.same_type else m_src * m_dst
            wanted = max(1, round(self.n * self.edges_per_node / 2 * r.weight / weight)) if self.edges_per_node else 0
            targets.append(min(wanted, possible))
        return targets

    # -- node types ------------------------------------------------------------------------------
    def type_range(self, node_type: str) -> tuple[int, int]:
        """The ids of a type: [lo, hi). Types take consecutive id ranges, in NODE_TYPES order."""
        i = self.types.index(node_type)
        return int(self.starts[i]), int(self.starts[i + 1])

    def type_size(self, node_type: str) -> int:
        lo, hi = self.type_range(node_type)
        return hi - lo

    # -- names and attributes (pure functions of seed and id) ------------------------------------
    def names(self, ids: np.ndarray) -> list[str]:
        """Names of `ids` (any types), unique across the SKB."""
        out: list[str | None] = [None] * len(ids)
        for node_type, where, local in self._by_type(ids):
            for j, name in zip(where.tolist(), self._type_names(node_type, local)):
                out[j] = name
        return out  # type: ignore[return-value]

    def attribute(self, ids: np.ndarray) -> list[str | None]:
        """The attribute value of each id (drug form, disease category, gene family), None for other types."""
        out: list[str | None] = [None] * len(ids)
        for node_type, where, local in self._by_type(ids):
            if node_type in ATTRIBUTES:
                for j, value in zip(where.tolist(), self._type_attributes(node_type, local)):
                    out[j] = value
        return out

    def traits(self, ids: np.ndarray) -> list[str | None]:
        """The trait of each id (TRAITS: drugs, genes, diseases), None for other types."""
        out: list[str | None] = [None] * len(ids)
        for node_type, where, local in self._by_type(ids):
            if node_type in TRAITS:
                for j, value in zip(where.tolist(), self._type_traits(node_type, local)):
                    out[j] = value
        return out

    def _by_type(self, ids: np.ndarray) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        """Group ids by type, in type order: (type, positions in `ids`, ids local to the type)."""
        ids = np.asarray(ids, dtype=np.int64)
        kinds = np.searchsorted(self.starts, ids, side="right") - 1
        for k in np.unique(kinds).tolist():
            where = np.flatnonzero(kinds == k)
            yield self.types[k], where, ids[where] - self.starts[k]

    def _type_attributes(self, node_type: str, local: np.ndarray) -> list[str]:
        """Attribute values drawn by hashing (seed, id) against the values' frequencies: no stored state."""
        _, values, weights = ATTRIBUTES[node_type]
        cut = np.cumsum(weights) / sum(weights) * 0x7FFFFFFF
        picks = np.searchsorted(cut, _hash(local, self.seed * 1_000_003 + 7 + self.types.index(node_type)),
                                side="right")
        return [values[p] for p in np.minimum(picks, len(values) - 1).tolist()]

    def _type_traits(self, node_type: str, local: np.ndarray) -> list[str]:
        """Traits drawn uniformly by hashing (seed, id), like attributes: no stored state."""
        values = TRAITS[node_type]
        picks = _hash(local, self.seed * 1_000_003 + 13 + self.types.index(node_type)) % len(values)
        return [values[p] for p in picks.tolist()]

    def _words(self, node_type: str, numbers: np.ndarray) -> list[str]:
        """Injective: number -> two-letter syllables, a hashed first one and then the number's base-70 digits.

        Same number of syllables and same digits only for the same number, so words never collide; the
        hashed syllable in front keeps small numbers from all starting alike.
        """
        base = len(_SYLLABLES)
        offsets = self._syllable_offsets[node_type].tolist()
        lengths = np.ones(len(numbers), dtype=np.int64)
        while (grow := numbers >= base ** lengths).any():
            lengths += grow
        width = int(lengths.max()) if len(numbers) else 0
        digits = [((numbers // base ** k + offsets[k]) % base).tolist() for k in range(width)]
        heads = (_hash(numbers, self.seed * 1_000_003 + 11 + self.types.index(node_type)) % base).tolist()
        return [_SYLLABLES[heads[j]] + "".join(_SYLLABLES[digits[k][j]] for k in range(length - 1, -1, -1))
                for j, length in enumerate(lengths.tolist())]

    def _type_names(self, node_type: str, local: np.ndarray) -> list[str]:
        """Names of one type's local ids: a scrambled number split into a word and a suffix or pattern.

        Unique because the word is injective in the number and the suffix (gene number, drug stem,
        name pattern) can be read back from the name one way only.
        """
        number = self._naming[node_type](local)
        if node_type == "gene/protein":
            words = self._words(node_type, number // _GENE_SUFFIXES)
            return [f"{w.upper()}{r + 1}" for w, r in zip(words, (number % _GENE_SUFFIXES).tolist())]
        if node_type == "drug":
            k = len(_DRUG_STEMS)
            words = self._words(node_type, number // k)
            return [f"{w.capitalize()}{_DRUG_STEMS[r]}" for w, r in zip(words, (number % k).tolist())]
        patterns = _NAME_PATTERNS[node_type]
        k = len(patterns)
        words = self._words(node_type, number // k)
        return [patterns[r].format(w=w, W=w.capitalize()) for w, r in zip(words, (number % k).tolist())]

    # -- nodes -----------------------------------------------------------------------------------
    def nodes(self) -> Iterator[tuple[int, Node]]:
        """Every node with its description, in id order; the random draws are per chunk of _NODE_CHUNK."""
        for start in range(0, self.n, _NODE_CHUNK):
            yield from self._node_chunk(start, min(start + _NODE_CHUNK, self.n))

    def _node_chunk(self, start: int, stop: int) -> Iterator[tuple[int, Node]]:
        ids = np.arange(start, stop, dtype=np.int64)
        draws = _TextDraws.draw(np.random.default_rng([self.seed, 2, start]), len(ids))
        row = 0
        for node_type, _, local in self._by_type(ids):          # consecutive ids: one run per type
            names = self._type_names(node_type, local)
            has_attribute = node_type in ATTRIBUTES
            attrs = self._type_attributes(node_type, local) if has_attribute else [None] * len(local)
            traits = self._type_traits(node_type, local) if node_type in TRAITS else [None] * len(local)
            for name, attr, trait in zip(names, attrs, traits):
                text = _describe(node_type, name, attr, trait, draws, row)
                yield start + row, Node(start + row, node_type, name, {"description": text},
                                        {ATTRIBUTES[node_type][0]: attr} if has_attribute else None)
                row += 1

    # -- edges -----------------------------------------------------------------------------------
    def relation_pairs(self, index: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(src, dst) id arrays of RELATIONS[index], block by block; the same ones on every call.

        Blocks partition the source end's popularity ranks, so a pair can only come from one block and
        de-duplicating within a block is enough.
        """
        relation, total = RELATIONS[index], self._pairs[index]
        if total == 0:
            return
        m_src, m_dst = self.type_size(relation.src), self.type_size(relation.dst)
        src_lo, dst_lo = self.type_range(relation.src)[0], self.type_range(relation.dst)[0]
        for block, ranks, u_range, size in self._rank_blocks(relation, total):
            rng = np.random.default_rng([self.seed, 3, index, block])
            src_rank, dst_rank = _distinct_pairs(rng, relation, m_src, m_dst, ranks, u_range, size)
            yield src_lo + self._rank[relation.src](src_rank), dst_lo + self._rank[relation.dst](dst_rank)

    def _rank_blocks(self, relation: Relation, total: int):
        """Blocks of source ranks holding about _PAIR_BLOCK pairs each: (block, ranks, u range, pairs).

        Source ranks are s = floor(m * u**a) with u uniform, so a block of ranks [lo, hi) gets the share
        of the pairs that its stretch of u, [(lo/m)**(1/a), (hi/m)**(1/a)), has of the whole. Why
        blocks: memory stays at one block's arrays, whatever the SKB's size.
        """
        m_src, a = self.type_size(relation.src), relation.src_skew
        first = 1 if relation.same_type else 0                  # rank 0 has no more popular partner
        u_first = (first / m_src) ** (1 / a)
        blocks = max(1, -(-total // _PAIR_BLOCK))
        bounds = np.unique(np.round(m_src * (u_first + (1 - u_first) * np.arange(blocks + 1) / blocks) ** a)
                           .astype(np.int64))
        bounds[0], bounds[-1] = first, m_src
        bounds = np.unique(bounds)
        u = (bounds / m_src) ** (1 / a)
        cumulative = np.round(total * (u - u[0]) / (u[-1] - u[0])).astype(np.int64)
        for block in range(len(bounds) - 1):
            size = int(cumulative[block + 1] - cumulative[block])
            if size > 0:
                yield (block, (int(bounds[block]), int(bounds[block + 1])), (float(u[block]), float(u[block + 1])),
                       size)

    def edges(self) -> Iterator[tuple[str, int, str, int]]:
        """Every pair in both directions, as PrimeKG stores its undirected relations."""
        for index, relation in enumerate(RELATIONS):
            name = relation.name
            for block, (src, dst) in enumerate(self.relation_pairs(index)):
                position = f"relation {index} ({name}: {relation.src} -> {relation.dst}) block {block}"
                for s, d in zip(src.tolist(), dst.tolist()):
                    yield position, s, name, d
                    yield position, d, name, s

    # -- queries ---------------------------------------------------------------------------------
    def queries(self) -> Iterator[tuple[str, Query]]:
        """Template queries, round robin over the templates, each with every node that satisfies it."""
        adjacency = self._template_adjacency()
        active = [self._template_queries(t_index, template, adjacency) for t_index, template in enumerate(TEMPLATES)]
        made = 0
        while active and made < self.n_queries:
            for producer in list(active):
                found = next(producer, None)
                if found is None:
                    active.remove(producer)
                    continue
                key, body, answers = found
                yield f"template {key} query {made}", Query(made, _SPLITS[made % len(_SPLITS)], body, answers)
                made += 1
                if made == self.n_queries:
                    return

    def _template_adjacency(self) -> dict[int, _Adjacency]:
        """The adjacency of every relation kind some template walks, by index in RELATIONS."""
        adjacency: dict[int, _Adjacency] = {}
        for template in TEMPLATES:
            for path in template.paths:
                types = [template.answer] + [t for _, t in path]
                for (relation, _), a, b in zip(path, types, types[1:]):
                    index = relation_kind(relation, a, b)
                    if index not in adjacency:
                        adjacency[index] = _Adjacency(self, index)
        return adjacency

    def _reach(self, adjacency, path, answer_type: str, anchor: int) -> np.ndarray | None:
        """Nodes of `answer_type` joined to `anchor` along `path` (walked back from the anchor); None if too many."""
        types = [answer_type] + [t for _, t in path]
        frontier = np.array([anchor], dtype=np.int64)
        for hop in range(len(path) - 1, -1, -1):
            kind = adjacency[relation_kind(path[hop][0], types[hop], types[hop + 1])]
            frontier = kind.neighbours(frontier, types[hop + 1])
            if len(frontier) > _MAX_FRONTIER:
                return None
        return frontier

    def _walk(self, adjacency, path, answer_type: str, start: int) -> np.ndarray:
        """Anchors reachable from the answer `start` along `path`."""
        types = [answer_type] + [t for _, t in path]
        frontier = np.array([start], dtype=np.int64)
        for hop, (relation, _) in enumerate(path):
            frontier = adjacency[relation_kind(relation, types[hop], types[hop + 1])].neighbours(frontier, types[hop])
        return frontier

    def _template_queries(self, t_index: int, template: Template, adjacency) -> Iterator[tuple[str, str, list[int]]]:
        """One template's queries: anchors tried in a seeded random order, kept when the answers number 1 to
        MAX_ANSWERS and a second anchor or an attribute, if the template has one, removes some of them."""
        rng = np.random.default_rng([self.seed, 4, t_index])
        first_path = template.paths[0]
        anchor_type = first_path[-1][1]
        before = template.answer if len(first_path) == 1 else first_path[-2][1]
        last = adjacency[relation_kind(first_path[-1][0], before, anchor_type)]
        candidates = rng.permutation(last.has_neighbours(anchor_type))
        tries = max(500, 60 * -(-self.n_queries // len(TEMPLATES)))
        for anchor in candidates[:tries].tolist():
            answers = self._reach(adjacency, first_path, template.answer, anchor)
            if answers is None or len(answers) == 0:
                continue
            anchors = [anchor]
            if len(template.paths) > 1:
                second = self._second_anchor(adjacency, template, answers, rng)
                if second is None:
                    continue
                anchors.append(second[0])
                answers = second[1]
            value = trait = None
            if template.attribute:
                value, answers = self._narrow_by_attribute(answers, rng)
                if value is None:
                    continue
            if template.trait:
                trait, answers = self._narrow_by_trait(answers, rng)
            if not 1 <= len(answers) <= MAX_ANSWERS:
                continue
            names = self.names(np.array(anchors, dtype=np.int64))
            body = template.wording.format(value=value, trait=trait,
                                           **{f"anchor{k}": name for k, name in enumerate(names)})
            yield template.key, body, sorted(int(a) for a in answers)

    def _second_anchor(self, adjacency, template: Template, answers: np.ndarray,
                       rng: np.random.Generator) -> tuple[int, np.ndarray] | None:
        """A second anchor reached from one of the answers, and the answers that reach both; None when
        it would not narrow them (the question must need both anchors)."""
        path = template.paths[1]
        pivot = int(answers[rng.integers(len(answers))])
        options = self._walk(adjacency, path, template.answer, pivot)
        if len(options) == 0:
            return None
        second = int(options[rng.integers(len(options))])
        others = self._reach(adjacency, path, template.answer, second)
        if others is None:
            return None
        narrowed = np.intersect1d(answers, others)
        return None if len(narrowed) == len(answers) else (second, narrowed)

    def _narrow_by_trait(self, answers: np.ndarray, rng: np.random.Generator) -> tuple[str, np.ndarray]:
        """One answer's trait and the answers that share it. Unlike an attribute, a trait is asked for
        even when every answer has it: a question states what its answers are like, as STaRK's do."""
        trait = self.traits(answers[[rng.integers(len(answers))]])[0]
        return trait, answers[np.array([t == trait for t in self.traits(answers)], dtype=bool)]

    def _narrow_by_attribute(self, answers: np.ndarray, rng: np.random.Generator) -> tuple[str | None, np.ndarray]:
        """One answer's attribute value and the answers that share it; (None, answers) when all do (the
        question must need the attribute)."""
        value = self.attribute(answers[[rng.integers(len(answers))]])[0]
        keep = np.array([v == value for v in self.attribute(answers)], dtype=bool)
        return (None, answers) if keep.all() else (value, answers[keep])
