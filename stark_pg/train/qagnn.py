"""Training QA-GNN (Yasunaga et al. 2021, as STaRK runs it: a re-ranker of a first stage's candidates).

Why it is built this way: everything but the network is fixed during training (the first stage's
candidates, the subgraph, the stored vectors), so each training query's subgraph is fetched from
PostgreSQL once per run and kept in memory as arrays; the vectors of all the subgraphs' nodes are
read in one statement into one table the batches index. An epoch is then torch alone, seconds.

The loss is cross-entropy over a query's candidates with every answer among them positive
(-log of the softmax mass on the answers); queries none of whose answers the first stage found teach
nothing and are skipped. The epoch kept is the one with the best MRR on the early-stopping queries, a
seeded share of `train` held out (stark_pg.eval.query_sets.hold_out, as mFAR does), ranked exactly as
search ranks them: the re-ranked candidates. val and test are never looked at.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import psycopg

from stark_pg.embed import canonical_name, skb_query_vector
from stark_pg.eval import metrics
from stark_pg.eval.query_sets import QuerySet, learning_sets, learning_splits
from stark_pg.progress import NullReporter, Reporter
from stark_pg.models.qagnn import (Graph, Vocabulary, build_graph, collate, fetch_subgraph, new_network,
                                   node_vectors, query_grams, rerank, save_model, torch_threads)
from stark_pg.retrieve.qagnn import FIRST_STAGES, first_stage
from stark_pg.skb.catalog import require_skb

STOP_METRICS = ("hit@1", "hit@5", "recall@20", "mrr")


@dataclass
class TrainSettings:
    name: str = "default"
    first_stage: str = "vss"             # vss | hybrid
    candidates: int = 100                # the first stage's top n, re-ranked
    layers: int = 2
    hidden: int = 128
    heads: int = 4
    dropout: float = 0.1
    epochs: int = 30
    patience: int = 8                    # epochs without a better held-out MRR before stopping
    batch_size: int = 8                  # graphs per optimiser step
    lr: float = 1e-3
    weight_decay: float = 0.01
    holdout: float = 0.2                 # share of train held out for early stopping
    seed: int = 0
    max_linked: int = 20                 # nodes linked from the query's words, longest names first
    fanout: int = 20                     # edges one hop out per seed node and direction
    embed_model: str | None = None       # default all-MiniLM-L6-v2 (what `stark-pg index` embedded)
    train_split: str = "train"           # one split or several, comma-separated (`--splits train,synthetic`)
    limit: int | None = None             # only the first N queries of each part (quick runs)
    threads: int = 1                     # torch threads while training (see `fit`)

    def checked(self) -> "TrainSettings":
        if self.first_stage not in FIRST_STAGES:
            raise ValueError(f"--first-stage must be one of {', '.join(FIRST_STAGES)}, not {self.first_stage!r}")
        for name, low in (("candidates", 2), ("layers", 0), ("hidden", 4), ("epochs", 1), ("batch_size", 1),
                          ("max_linked", 0), ("fanout", 0), ("heads", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"--{name.replace('_', '-')} must be at least {low}, not {getattr(self, name)}")
        if not 0 < self.lr < 1:
            raise ValueError(f"--lr must be in (0, 1), not {self.lr}")
        if self.hidden % self.heads:
            raise ValueError(f"--hidden {self.hidden} must be a multiple of the {self.heads} attention heads")
        return self


@dataclass
class TrainReport:
    name: str
    path: str
    best_epoch: int
    metrics: dict
    first_stage_metrics: dict
    subgraph_seconds: float
    train_seconds: float
    train_queries: int
    stop_queries: int
    mean_nodes: float
    mean_edges: float
    history: list = field(default_factory=list)


@dataclass
class Example:
    graph: Graph
    answers: list


def collect(conn: psycopg.Connection, skb: str, skb_id: int, query_set: QuerySet, settings: TrainSettings,
            embed_model: str, vocab: Vocabulary, progress: Reporter):
    """The graphs of a query set (each query's first stage, subgraph and features) and their vector table."""
    raw = []
    with progress.stage(f"subgraphs {query_set.label}", total=len(query_set.queries)) as stage:
        for query in query_set.queries:
            ids, scores, _ = first_stage(conn, skb, query.body, settings.candidates, settings.first_stage, embed_model)
            vector = skb_query_vector(conn, skb, query.body, embed_model)
            subgraph = fetch_subgraph(conn, skb_id, ids, query_grams(query.body), settings.max_linked, settings.fanout)
            raw.append((query, ids, scores, vector, subgraph))
            stage.advance()
    wanted = sorted({int(n) for *_, s in raw for n in s.node_ids})
    vectors = node_vectors(conn, skb_id, embed_model, wanted)
    order = sorted(vectors)
    table = np.stack([vectors[n] for n in order]) if order else np.zeros((0, 1), dtype=np.float32)
    row_of = {n: i for i, n in enumerate(order)}
    examples = [Example(build_graph(s, ids, scores, vector, vectors, vocab, row_of, q.answer_ids), list(q.answer_ids))
                for q, ids, scores, vector, s in raw]
    return examples, table, [len(s.node_ids) for *_, s in raw], [len(s.edges) for *_, s in raw]


def answer_loss(scores, is_answer):
    """-log of the softmax mass on the answers among one query's candidates."""
    import torch

    return torch.logsumexp(scores, 0) - torch.logsumexp(scores[is_answer], 0)


def evaluate(network, examples: list[Example], table: np.ndarray, batch_size: int = 32) -> dict:
    """Mean held-out metrics of re-ranked candidates (answers the first stage missed count as missed)."""
    import torch

    network.eval()
    per_query = []
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            chunk = examples[start:start + batch_size]
            for ex, scores in zip(chunk, network(collate([e.graph for e in chunk], table))):
                ranked = [n for n, _ in rerank(ex.graph.candidate_ids, scores.numpy().astype(np.float64))]
                per_query.append(metrics.evaluate(ranked, ex.answers, names=STOP_METRICS))
    return metrics.summarize(per_query) if per_query else {m: 0.0 for m in STOP_METRICS}


def first_stage_metrics(examples: list[Example]) -> dict:
    per_query = [metrics.evaluate(e.graph.candidate_ids.tolist(), e.answers, names=STOP_METRICS) for e in examples]
    return metrics.summarize(per_query) if per_query else {m: 0.0 for m in STOP_METRICS}


def fit(network, train: list[Example], stop: list[Example], table: np.ndarray, settings: TrainSettings,
        progress: Reporter | None = None) -> tuple[dict, list, int]:
    """Train `network` in place and load its best epoch's weights; (best state, history, best epoch)."""
    progress = progress or NullReporter()
    rng = np.random.default_rng(settings.seed)
    with torch_threads(max(1, settings.threads)):      # one by default: see torch_threads
        return _fit(network, train, stop, table, settings, progress, rng)


def _fit(network, train, stop, table, settings, progress, rng):
    """The epochs of `fit`: a pass over the training graphs, then the held-out metrics; stop on patience."""
    import torch

    usable = [e for e in train if e.graph.is_answer.any() and (~e.graph.is_answer).any()]
    optimizer = torch.optim.AdamW(network.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    history, best = [], (-1.0, 0, None)
    with progress.stage("epochs", total=settings.epochs) as stage:
        for epoch in range(1, settings.epochs + 1):
            started = time.perf_counter()
            network.train()
            order = rng.permutation(len(usable))
            total = 0.0
            for start in range(0, len(order), settings.batch_size):
                chunk = [usable[i] for i in order[start:start + settings.batch_size]]
                optimizer.zero_grad()
                scores = network(collate([e.graph for e in chunk], table))
                loss = torch.stack([answer_loss(s, torch.from_numpy(e.graph.is_answer))
                                    for s, e in zip(scores, chunk)]).mean()
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * len(chunk)
            measured = evaluate(network, stop, table)
            history.append({"epoch": epoch, "loss": round(total / max(len(usable), 1), 5),
                            **{f"holdout_{k}": round(v, 4) for k, v in measured.items()},
                            "seconds": round(time.perf_counter() - started, 2)})
            if measured["mrr"] > best[0]:
                best = (measured["mrr"], epoch, copy.deepcopy(network.state_dict()))
            stage.advance()
            if epoch - best[1] >= settings.patience:
                break
    network.load_state_dict(best[2])
    network.eval()
    return best[2], history, best[1]


def train_qagnn(conn: psycopg.Connection, skb: str, settings: TrainSettings | None = None,
                progress: Reporter | None = None) -> TrainReport:
    """Train a QA-GNN re-ranker on the SKB's training queries and store it (files and stark.trained_model)."""
    import torch

    settings = (settings or TrainSettings()).checked()
    progress = progress or NullReporter()
    skb_id = require_skb(conn, skb)
    embed_model = canonical_name(settings.embed_model)
    vocab = Vocabulary.of_skb(conn, skb_id)
    train_set, stop_set = learning_sets(conn, skb_id, learning_splits(settings.train_split), settings.holdout,
                                        settings.seed)
    for chosen, role in ((train_set, "training"), (stop_set, "early-stopping")):
        if settings.limit:
            chosen.queries = chosen.queries[:settings.limit]
        if not chosen.queries:
            raise ValueError(f"SKB {skb!r} has no queries for {role} in split {settings.train_split!r}")

    started = time.perf_counter()
    both = QuerySet(f"{train_set.label}+holdout", settings.train_split, train_set.queries + stop_set.queries)
    examples, table, nodes, edges = collect(conn, skb, skb_id, both, settings, embed_model, vocab, progress)
    train, stop = examples[:len(train_set.queries)], examples[len(train_set.queries):]
    subgraph_seconds = time.perf_counter() - started

    started = time.perf_counter()
    torch.manual_seed(settings.seed)
    network = new_network(table.shape[1], vocab, settings.hidden, settings.layers, settings.heads, settings.dropout)
    _, history, best_epoch = fit(network, train, stop, table, settings, progress)
    train_seconds = time.perf_counter() - started

    chosen = next(h for h in history if h["epoch"] == best_epoch)
    baseline = first_stage_metrics(stop)
    kept = {k: v for k, v in chosen.items() if k.startswith("holdout_")}
    config = {"dim": int(table.shape[1]), "hidden": settings.hidden, "layers": settings.layers,
              "heads": settings.heads, "dropout": settings.dropout, "first_stage": settings.first_stage,
              "candidates": settings.candidates, "max_linked": settings.max_linked, "fanout": settings.fanout}
    stored_settings = {**asdict(settings), "embed_model": embed_model, "train_queries": len(train),
                       "stop_queries": len(stop), "subgraph_seconds": round(subgraph_seconds, 2),
                       "train_seconds": round(train_seconds, 2),
                       "mean_nodes": round(float(np.mean(nodes)), 1), "mean_edges": round(float(np.mean(edges)), 1)}
    stored_metrics = {**kept, "epoch": best_epoch,
                      **{f"first_stage_holdout_{k}": round(v, 4) for k, v in baseline.items()},
                      "train_seconds": round(subgraph_seconds + train_seconds, 2)}
    path = save_model(conn, skb_id, skb, settings.name, embed_model, network, vocab, config, stored_settings, history,
                      stored_metrics)
    return TrainReport(settings.name, str(path), best_epoch, kept, {k: round(v, 4) for k, v in baseline.items()},
                       subgraph_seconds, train_seconds, len(train), len(stop), float(np.mean(nodes)),
                       float(np.mean(edges)), history)
