"""QA-GNN's pieces shared by training (stark_pg/train/qagnn.py) and search (stark_pg/retrieve/qagnn.py):
the query's subgraph, its node features, the graph network, and the model's files and table row.

Why it is built this way:
- The subgraph comes from PostgreSQL in one statement (`qagnn_subgraph`, sql/queries/qagnn.sql): the
  first stage's candidates, the nodes the query names, the edges among them and one hop out. The
  query's names are linked without an LLM: every run of up to five of its words, compacted as
  4StepFocus compacts names (stark.focus_compact, whose index node_compact_name_idx makes it a lookup),
  is compared with the compacted node names. That is 4StepFocus's exact-name step (link.py) applied to
  the question's own words instead of an LLM's triplet constants.
- Node features are what the SKB already stores: the document vectors of the embedding model (read
  from the model's doc table, as mFAR's encoder fine-tuning reads them), their elementwise product with
  the query vector, and query-relevance numbers (cosine to the query, first-stage rank and score, the
  linked flag), plus a learned embedding of the node type. As in QA-GNN, a query node (the query
  vector) joins the graph, linked to the linked nodes and to the candidates by edges of their own types.
- Message passing is relation-aware attention in plain torch (no graph library): for an edge j -> i
  of relation r, the key and value of j are shifted by r's embeddings, i attends over its incoming
  edges (a softmax per destination node, by scatter operations), then a residual and a feed-forward
  block. Every relation also runs backwards as its own type (`~relation`), so information flows both
  ways even in SKBs that store an edge once.
- A candidate's score is an MLP of its final state, the query node's final state and its raw
  features, plus a linear term of those features. The MLP's last layer starts at zero and the linear
  term at the first stage's standardised score, so an untrained network ranks as the first stage does
  and training moves away from that only as far as it helps.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg

from stark_pg.config import home_dir
from stark_pg.resources import queries as sql
from stark_pg.skb.names import normalize

MAX_GRAM_WORDS = 5
# words that name nodes by accident ("cell", "binding" are real names, but also the questions' wording)
STOPWORDS = frozenset("""a an and are as at be by can could do does for from has have how i in is it its of on or
that the their them these this those to was what which who whom whose why with would you your""".split())
FEATURES = ("cosine", "cosine_gap", "candidate", "inverse_rank", "log_rank", "score_z", "linked", "has_vector",
            "query")
QUERY_RELATIONS = ("query:linked", "query:candidate")
INITIAL_SCORE_WEIGHT = 3.0


def query_grams(query: str, max_words: int = MAX_GRAM_WORDS) -> list[str]:
    """The compacted word n-grams of a query (1 to `max_words` words) that a node name may equal.

    Words are those of `normalize` (4StepFocus's: lower case, runs of non-alphanumerics as one space),
    compacted as stark.focus_compact compacts names (nothing but letters and digits). A single word
    must not be a stop word and a gram must have three characters at least."""
    words = normalize(query).split()
    out: dict[str, None] = {}
    for size in range(1, max_words + 1):
        for start in range(len(words) - size + 1):
            span = words[start:start + size]
            if size == 1 and span[0] in STOPWORDS:
                continue
            gram = "".join(span)
            if len(gram) >= 3:
                out[gram] = None
    return list(out)


@dataclass
class Subgraph:
    """A query's subgraph as the SQL returns it: nodes (id, type, candidate rank or -1, linked) and typed edges."""

    node_ids: np.ndarray                 # (N,) int64, ascending
    types: list[str]
    rank: np.ndarray                     # (N,) int: 1-based first-stage rank, 0 for non-candidates
    linked: np.ndarray                   # (N,) bool
    edges: list[tuple[int, str, int]]    # (src node id, relation, dst node id), sorted

    @property
    def size(self) -> dict:
        return {"nodes": int(len(self.node_ids)), "edges": len(self.edges),
                "candidates": int((self.rank > 0).sum()), "linked": int(self.linked.sum())}


def fetch_subgraph(conn: psycopg.Connection, skb_id: int, candidates: list[int], grams: list[str],
                   max_linked: int, fanout: int) -> Subgraph:
    """The subgraph of one query (sql/queries/qagnn.sql, `qagnn_subgraph`): one statement."""
    rows = sql().qagnn_subgraph(conn, skb_id=skb_id, candidates=[int(c) for c in candidates], grams=grams,
                                max_linked=max_linked, fanout=fanout)
    ids, types, ranks, linked, edges = [], [], [], [], []
    for kind, a, label, b, rank, is_linked in rows:
        if kind == "node":
            ids.append(int(a))
            types.append(label)
            ranks.append(int(rank) if rank is not None else 0)
            linked.append(bool(is_linked))
        else:
            edges.append((int(a), label, int(b)))
    edges.sort()
    return Subgraph(np.array(ids, dtype=np.int64), types, np.array(ranks, dtype=np.int64),
                    np.array(linked, dtype=bool), edges)


def node_vectors(conn: psycopg.Connection, skb_id: int, embed_model: str, node_ids) -> dict[int, np.ndarray]:
    """The stored document vectors of some nodes ({node id: vector}; nodes without one are missing)."""
    from stark_pg.index.dense import find_model, statement

    tables = find_model(conn, embed_model)
    if tables is None:
        from stark_pg.skb.records import MissingIndex

        raise MissingIndex(f"no vectors of model {embed_model!r} in this database: run `stark-pg index SKB`")
    rows = conn.execute(statement("doc_vectors_of_nodes", tables),
                        {"skb_id": skb_id, "node_ids": [int(n) for n in node_ids]})
    return {int(node): vec.to_numpy().astype(np.float32) for node, vec in rows}


@dataclass
class Vocabulary:
    """Node types and relations of the SKB the model was trained on; index 0 stands for an unknown one."""

    types: list[str]
    relations: list[str]

    def __post_init__(self):
        self._types = {t: i + 2 for i, t in enumerate(self.types)}          # 0 unknown, 1 the query node
        names = [*self.relations, *QUERY_RELATIONS]
        self._relations = {r: i + 1 for i, r in enumerate(names)}            # 0 unknown, backwards after
        self.n_forward = len(names) + 1

    @property
    def n_types(self) -> int:
        return len(self.types) + 2

    @property
    def n_relations(self) -> int:
        return 2 * self.n_forward

    def type_id(self, name: str) -> int:
        return self._types.get(name, 0)

    def relation_id(self, name: str, backwards: bool = False) -> int:
        return self._relations.get(name, 0) + (self.n_forward if backwards else 0)

    @classmethod
    def of_skb(cls, conn: psycopg.Connection, skb_id: int) -> "Vocabulary":
        rows = list(sql().qagnn_vocabulary(conn, skb_id=skb_id))
        return cls([n for k, n in rows if k == "type"], [n for k, n in rows if k == "relation"])


@dataclass
class Graph:
    """One query's subgraph as arrays for the network (node 0..N-1 the subgraph's nodes, N the query node)."""

    node_ids: np.ndarray                 # (N,) the subgraph's nodes
    features: np.ndarray                 # (N + 1, F) float32
    types: np.ndarray                    # (N + 1,) int64
    src: np.ndarray                      # (E,) int64, both directions included
    dst: np.ndarray
    relation: np.ndarray
    candidates: np.ndarray               # (n,) row of each candidate, in first-stage order
    candidate_ids: np.ndarray            # (n,) their node ids
    is_answer: np.ndarray                # (n,) bool (training and early stopping only)
    query: np.ndarray                    # (dim,) the query vector
    vector_rows: np.ndarray              # (N,) row of each node in the vector table given to `collate` (-1: none)


def build_graph(subgraph: Subgraph, candidates: list[int], scores: list[float], query_vector: np.ndarray,
                vectors: dict[int, np.ndarray], vocab: Vocabulary, row_of: dict[int, int],
                answers=()) -> Graph:
    """The arrays of one query's graph. `candidates` and `scores` are the first stage's, best first;
    `row_of` maps a node id to its row in the vector table that `collate` will be given."""
    ids = subgraph.node_ids
    index = {int(n): i for i, n in enumerate(ids)}
    n_nodes = len(ids)
    kept = [(c, s) for c, s in zip(candidates, scores) if int(c) in index]
    cand_rows = np.array([index[int(c)] for c, _ in kept], dtype=np.int64)
    cand_scores = np.array([s for _, s in kept], dtype=np.float64)

    has_vector = np.array([int(n) in vectors for n in ids], dtype=bool)
    cosine = np.zeros(n_nodes, dtype=np.float64)
    for i, n in enumerate(ids):
        vec = vectors.get(int(n))
        if vec is not None:
            cosine[i] = float(vec @ query_vector)
    feats = np.zeros((n_nodes + 1, len(FEATURES)), dtype=np.float32)
    best = cosine[cand_rows].max() if len(cand_rows) else 0.0
    feats[:n_nodes, 0] = cosine
    feats[:n_nodes, 1] = cosine - best
    feats[cand_rows, 2] = 1.0
    rank0 = np.arange(len(cand_rows), dtype=np.float64)
    feats[cand_rows, 3] = 1.0 / (1.0 + rank0)
    feats[:n_nodes, 4] = 1.0
    feats[cand_rows, 4] = np.log1p(rank0) / math.log1p(max(len(cand_rows), 1))
    if len(cand_scores) > 1 and cand_scores.std() > 1e-9:
        feats[cand_rows, 5] = (cand_scores - cand_scores.mean()) / cand_scores.std()
    feats[:n_nodes, 6] = subgraph.linked
    feats[:n_nodes, 7] = has_vector
    feats[n_nodes, 8] = 1.0

    types = np.array([vocab.type_id(t) for t in subgraph.types] + [1], dtype=np.int64)
    src, dst, rel = [], [], []
    stored = {(index[a], relation, index[b]) for a, relation, b in subgraph.edges}
    for i, relation, j in sorted(stored):
        src.append(i)
        dst.append(j)
        rel.append(vocab.relation_id(relation))
        if (j, relation, i) not in stored:       # SKBs that store both directions (PrimeKG) need no copy
            src.append(j)
            dst.append(i)
            rel.append(vocab.relation_id(relation, backwards=True))
    for name, rows in (("query:linked", np.flatnonzero(subgraph.linked)), ("query:candidate", cand_rows)):
        for i in rows:
            src += [n_nodes, int(i)]
            dst += [int(i), n_nodes]
            rel += [vocab.relation_id(name), vocab.relation_id(name, backwards=True)]
    answer_set = {int(a) for a in answers}
    cand_ids = ids[cand_rows]
    return Graph(ids, feats, types, np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                 np.array(rel, dtype=np.int64), cand_rows, cand_ids,
                 np.array([int(c) in answer_set for c in cand_ids], dtype=bool),
                 np.asarray(query_vector, dtype=np.float32),
                 np.array([row_of.get(int(n), -1) for n in ids], dtype=np.int64))


@dataclass
class Batch:
    """Graphs joined into one disjoint graph (torch tensors)."""

    vectors: object                      # (total nodes, dim): node vectors, the query vector for query nodes
    query_of_node: object                # (total nodes, dim): each node's query vector
    features: object
    types: object
    src: object
    dst: object
    relation: object
    query_rows: object                   # (graphs,) the row of each graph's query node
    candidates: list                     # per graph: rows of its candidates
    graph_of_candidate: object           # (total candidates,)
    candidate_rows: object               # (total candidates,)


def collate(graphs: list[Graph], vector_table: np.ndarray):
    """One Batch of `graphs`, whose `vector_rows` index `vector_table` (zeros where a node has no vector)."""
    import torch

    dim = vector_table.shape[1]
    vecs, queries, feats, types, src, dst, rel, query_rows, cands = [], [], [], [], [], [], [], [], []
    offset = 0
    for g in graphs:
        n = len(g.node_ids)
        rows = g.vector_rows
        block = np.zeros((n + 1, dim), dtype=np.float32)
        present = rows >= 0
        block[:n][present] = vector_table[rows[present]]
        block[n] = g.query
        vecs.append(block)
        queries.append(np.broadcast_to(g.query, (n + 1, dim)))
        feats.append(g.features)
        types.append(g.types)
        src.append(g.src + offset)
        dst.append(g.dst + offset)
        rel.append(g.relation)
        query_rows.append(offset + n)
        cands.append(g.candidates + offset)
        offset += n + 1
    graph_of_candidate = np.concatenate([np.full(len(c), i, dtype=np.int64) for i, c in enumerate(cands)])
    return Batch(torch.from_numpy(np.concatenate(vecs)), torch.from_numpy(np.ascontiguousarray(np.concatenate(queries))),
                 torch.from_numpy(np.concatenate(feats)), torch.from_numpy(np.concatenate(types)),
                 torch.from_numpy(np.concatenate(src)), torch.from_numpy(np.concatenate(dst)),
                 torch.from_numpy(np.concatenate(rel)), torch.tensor(query_rows, dtype=torch.int64),
                 [torch.from_numpy(c) for c in cands], torch.from_numpy(graph_of_candidate),
                 torch.from_numpy(np.concatenate(cands)))


def _network_classes():
    """The torch modules, defined on first use so that importing this module does not import torch."""
    import torch
    from torch import nn

    class RelationalAttention(nn.Module):
        """One layer: each node attends over its incoming edges, keys and values shifted by the relation."""

        def __init__(self, hidden: int, n_relations: int, heads: int, dropout: float):
            super().__init__()
            self.heads, self.head_dim = heads, hidden // heads
            self.q = nn.Linear(hidden, hidden)
            self.k = nn.Linear(hidden, hidden)
            self.v = nn.Linear(hidden, hidden)
            self.rel_k = nn.Embedding(n_relations, hidden)
            self.rel_v = nn.Embedding(n_relations, hidden)
            self.out = nn.Linear(hidden, hidden)
            self.norm1 = nn.LayerNorm(hidden)
            self.ff = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
            self.norm2 = nn.LayerNorm(hidden)
            self.drop = nn.Dropout(dropout)

        def forward(self, h, src, dst, relation):
            n, heads, d = h.shape[0], self.heads, self.head_dim
            q = self.q(h)[dst].view(-1, heads, d)
            k = (self.k(h)[src] + self.rel_k(relation)).view(-1, heads, d)
            v = (self.v(h)[src] + self.rel_v(relation)).view(-1, heads, d)
            logits = (q * k).sum(-1) / math.sqrt(d)                                    # (E, heads)
            index = dst.unsqueeze(1).expand(-1, heads)
            top = torch.full((n, heads), -1e30, dtype=h.dtype).scatter_reduce(0, index, logits, "amax")
            weights = torch.exp(logits - top[dst])
            total = torch.zeros((n, heads), dtype=h.dtype).index_add(0, dst, weights)
            alpha = self.drop(weights / (total[dst] + 1e-16))
            messages = torch.zeros((n, heads, d), dtype=h.dtype).index_add(0, dst, alpha.unsqueeze(-1) * v)
            h = self.norm1(h + self.drop(self.out(messages.reshape(n, heads * d))))
            return self.norm2(h + self.drop(self.ff(h)))

    class QagnnNet(nn.Module):
        def __init__(self, dim: int, n_types: int, n_relations: int, hidden: int = 128, layers: int = 2,
                     heads: int = 4, dropout: float = 0.1):
            super().__init__()
            n_feats = len(FEATURES)
            self.node_in = nn.Linear(2 * dim + n_feats, hidden)
            self.type_emb = nn.Embedding(n_types, hidden)
            self.layers = nn.ModuleList(RelationalAttention(hidden, n_relations, heads, dropout)
                                        for _ in range(layers))
            self.head = nn.Sequential(nn.Linear(2 * hidden + n_feats, hidden), nn.GELU(), nn.Dropout(dropout),
                                      nn.Linear(hidden, 1))
            self.linear = nn.Linear(n_feats, 1)
            self.drop = nn.Dropout(dropout)
            # at initialisation the score is the first stage's (standardised) score: training starts from
            # its ranking instead of a random one
            with torch.no_grad():
                self.linear.weight.zero_()
                self.linear.bias.zero_()
                self.linear.weight[0, FEATURES.index("score_z")] = INITIAL_SCORE_WEIGHT
                self.head[-1].weight.zero_()
                self.head[-1].bias.zero_()

        def forward(self, batch: Batch):
            """Scores of every batch's candidates: one 1-d tensor per graph, in first-stage order."""
            x = torch.cat([batch.vectors, batch.vectors * batch.query_of_node, batch.features], dim=1)
            h = self.drop(torch.nn.functional.gelu(self.node_in(x) + self.type_emb(batch.types)))
            for layer in self.layers:
                h = layer(h, batch.src, batch.dst, batch.relation)
            rows = batch.candidate_rows
            query_state = h[batch.query_rows][batch.graph_of_candidate]
            raw = batch.features[rows]
            scores = (self.head(torch.cat([h[rows], query_state, raw], dim=1)) + self.linear(raw)).squeeze(1)
            sizes = [len(c) for c in batch.candidates]
            return list(torch.split(scores, sizes))

    return QagnnNet


def new_network(dim: int, vocab: Vocabulary, hidden: int, layers: int, heads: int, dropout: float):
    if hidden % heads:
        raise ValueError(f"--hidden {hidden} must be a multiple of the {heads} attention heads")
    return _network_classes()(dim, vocab.n_types, vocab.n_relations, hidden, layers, heads, dropout)


# ------------------------------------------------------------------------------------------------
# The stored model: files under STARK_PG_HOME/models/qagnn/<skb>/<name>/ and a row of stark.trained_model.

def model_dir(skb: str, name: str) -> Path:
    def safe(part: str) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in part)

    return home_dir().joinpath("models", "qagnn", safe(skb), safe(name))


@dataclass
class QagnnModel:
    name: str
    embed_model: str
    path: str
    config: dict                         # what the network and the subgraph are built with
    vocab: Vocabulary
    network: object                      # a QagnnNet in eval mode
    settings: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)


NETWORK_KEYS = ("dim", "hidden", "layers", "heads", "dropout", "first_stage", "candidates", "max_linked", "fanout")


def save_model(conn: psycopg.Connection, skb_id: int, skb: str, name: str, embed_model: str, network,
               vocab: Vocabulary, config: dict, settings: dict, history: list, metrics: dict) -> Path:
    """The weights and config as files, then the table row (replacing a model of the same name)."""
    import torch

    path = model_dir(skb, name)
    path.mkdir(parents=True, exist_ok=True)
    torch.save(network.state_dict(), path / "weights.pt")
    (path / "config.json").write_text(json.dumps({**config, "embed_model": embed_model, "types": vocab.types,
                                                  "relations": vocab.relations}, indent=1), encoding="utf-8")
    sql().qagnn_save_model(conn, skb_id=skb_id, name=name, base_model=embed_model, path=str(path),
                           settings=json.dumps(settings), history=json.dumps(history), metrics=json.dumps(metrics))
    return path


_LOADED: dict = {}


def load_model(conn: psycopg.Connection, skb_id: int, skb: str, name: str) -> QagnnModel:
    """The trained model `name` of the SKB (cached per process until its row changes); a LoadError
    saying what to run when there is none, or when its files are not on this machine."""
    import torch

    from stark_pg.skb.records import LoadError

    row = sql().qagnn_load_model(conn, skb_id=skb_id, name=name)
    if row is None:
        others = [r[0] for r in sql().qagnn_model_names(conn, skb_id=skb_id)]
        known = f" (trained: {', '.join(others)})" if others else ""
        raise LoadError(f"no QA-GNN model {name!r} trained on SKB {skb!r}{known}: run `stark-pg train qagnn {skb}"
                        + (f" --name {name}`" if name != "default" else "`"))
    _, embed_model, path, settings, history, metrics, trained_at = row
    key = (skb_id, name, trained_at, path)
    if key in _LOADED:
        return _LOADED[key]
    folder = Path(path)
    if not (folder / "weights.pt").is_file() or not (folder / "config.json").is_file():
        raise LoadError(f"QA-GNN model {name!r} of SKB {skb!r} has no files at {path} on this machine: train it "
                        f"here (`stark-pg train qagnn {skb} --name {name}`), or copy that directory")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    vocab = Vocabulary(config["types"], config["relations"])
    network = new_network(config["dim"], vocab, config["hidden"], config["layers"], config["heads"], config["dropout"])
    network.load_state_dict(torch.load(folder / "weights.pt", map_location="cpu", weights_only=True))
    network.eval()
    model = QagnnModel(name, embed_model, path, config, vocab, network, settings, history, metrics)
    _LOADED.clear()
    _LOADED[key] = model
    return model


def graph_for_query(conn: psycopg.Connection, skb_id: int, query: str, query_vector: np.ndarray,
                    candidates: list[int], scores: list[float], embed_model: str, vocab: Vocabulary, config: dict,
                    answers=()) -> tuple[Graph, Subgraph, np.ndarray]:
    """Subgraph, vectors and arrays of one query, with a vector table of its own nodes (search's path)."""
    subgraph = fetch_subgraph(conn, skb_id, candidates, query_grams(query), config["max_linked"], config["fanout"])
    vectors = node_vectors(conn, skb_id, embed_model, subgraph.node_ids)
    order = [int(n) for n in subgraph.node_ids if int(n) in vectors]
    table = np.stack([vectors[n] for n in order]) if order else np.zeros((0, len(query_vector)), dtype=np.float32)
    row_of = {n: i for i, n in enumerate(order)}
    graph = build_graph(subgraph, candidates, scores, query_vector, vectors, vocab, row_of, answers)
    return graph, subgraph, table


@contextmanager
def torch_threads(count: int = 1):
    """Torch's intra-op threads set to `count` for a block. The graphs are small (hundreds of nodes, a
    few thousand edges): splitting so little work between threads costs more in synchronisation than it
    gains, and far more on a machine whose cores other jobs share, so search and training run one."""
    import torch

    before = torch.get_num_threads()
    if before != count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if before != count:
            torch.set_num_threads(before)


def score_graph(network, graph: Graph, table: np.ndarray) -> np.ndarray:
    """The network's scores of one graph's candidates (first-stage order), without gradients."""
    import torch

    with torch.no_grad(), torch_threads(1):
        return network(collate([graph], table))[0].numpy().astype(np.float64)


def rerank(candidate_ids: np.ndarray, scores: np.ndarray) -> list[tuple[int, float]]:
    """Candidates by score, best first; ties keep the first stage's order (a stable sort)."""
    order = np.argsort(-scores, kind="stable")
    return [(int(candidate_ids[i]), float(scores[i])) for i in order]

