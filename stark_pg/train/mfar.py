"""Training mFAR's query-conditioned weights on an SKB's training queries, with torch.

Why it is built this way: the encoder is frozen by default, so every (field, scorer) score of a
query's candidates is fixed. PostgreSQL computes them once per query (`stark.mfar_field_scores`,
the same function retrieval uses), and training only learns the gate W, b (and, with batch
normalisation, a scale per pair) over those small matrices: minutes of SQL, seconds of torch.

The loss is mFAR's contrastive loss: for each answer of a query, its score against the scores of the
query's negatives, divided by a temperature. The paper's 0.05 suits its raw scores; ours are
standardised (unit variance per pair), so the temperature was chosen again, on a holdout of the
training queries among 0.05, 0.1, 0.2, 0.5 and 1.0: 0.5 did best and is the default. Negatives are the query's candidates that are not
answers, i.e. the hard negatives of every pair's shortlist (BM25 and dense), plus `negatives`
nodes drawn at random from the whole SKB (standing in for in-batch negatives: random nodes, scored
for this query). Scores are standardised per pair with their mean and standard deviation over the
training candidates (batch normalisation's inference form); `batch_norm` also learns a scale per pair.
The epoch kept is the one with the best MRR on the early-stopping split, whose queries are ranked
exactly as at search time: over the union of shortlists only, answers not added. By default that
split is a seeded 20% of the training queries, held out of training (never val or test, which are
for reporting).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import psycopg

from stark_pg.embed import canonical_name, encode, skb_encoder
from stark_pg.eval import metrics
from stark_pg.eval.query_sets import (HOLDOUT, EvalQuery, QuerySet, from_split, from_splits,
                                     learning_sets, learning_splits)
from stark_pg.models.mfar import MfarModel, Pair, save_model, skb_fields, variant_pairs
from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb
from stark_pg.train.mfar_fit import contrastive_loss, epoch_record, gate_arrays, ranking_metrics


@dataclass
class TrainSettings:
    variant: str = "all"
    name: str | None = None              # stored model name; default: the variant
    embed_model: str | None = None       # default all-MiniLM-L6-v2 (what `stark-pg index` embedded)
    exclude: tuple[str, ...] = ()        # fields (or field:scorer) left out
    epochs: int = 40
    patience: int = 8                    # epochs without a better early-stopping MRR before stopping
    batch_size: int = 16
    lr: float = 0.01
    weight_decay: float = 0.1            # AdamW's decoupled weight decay on the gate
    temperature: float = 0.5             # of the standardised scores; see the module docstring
    pool: int = 100                      # shortlist per pair, as at search time
    negatives: int = 32                  # random nodes added to each training query's candidates
    batch_norm: bool = False
    train_split: str = "train"           # one split or several, comma-separated (`--splits train,synthetic`)
    early_stop_split: str = HOLDOUT       # a held-out part of train_split (`holdout`), or a named split
    holdout: float = 0.2                 # share of train_split held out for early stopping
    seed: int = 0
    limit: int | None = None             # only the first N queries of each split (for quick runs and tests)
    finetune_encoder: bool = False       # also fine-tune the query encoder (stark_pg/train/mfar_encoder.py)
    encoder_epochs: int = 2


@dataclass
class QueryFeatures:
    """One query's candidates and their raw score per pair (0 where a pair has no score)."""

    query: EvalQuery
    vector: np.ndarray                   # the query embedding (the gate's input)
    node_ids: np.ndarray                 # (n,)
    scores: np.ndarray                   # (n, pairs)
    is_answer: np.ndarray                # (n,) bool


@dataclass
class TrainReport:
    model: MfarModel
    feature_seconds: float
    train_seconds: float
    best_epoch: int
    history: list = field(default_factory=list)


def query_features(conn: psycopg.Connection, skb: str, pairs: list[Pair], query: EvalQuery, vector: np.ndarray,
                   embed_model: str, pool: int, include: list[int] | None) -> QueryFeatures:
    """The candidates of one query (shortlists plus `include`) with every pair's score, from PostgreSQL."""
    rows = sql().mfar_field_scores(conn, skb=skb, query=query.body, embedding=vector, model=embed_model,
                                   lexical=[p.field for p in pairs if p.scorer == "lexical"],
                                   dense=[p.field for p in pairs if p.scorer == "dense"],
                                   pool=pool, include=include or [], k1=1.2, b=0.75, engine="sql")
    column = {(p.field, p.scorer): i for i, p in enumerate(pairs)}
    index: dict[int, int] = {node: i for i, node in enumerate(include or [])}
    cells = []
    for node, name, scorer, value in rows:
        row = index.setdefault(int(node), len(index))
        cells.append((row, column[(name, scorer)], float(value)))
    scores = np.zeros((len(index), len(pairs)), dtype=np.float32)
    for row, col, value in cells:
        scores[row, col] = value
    node_ids = np.fromiter(index, dtype=np.int64, count=len(index))
    answers = set(query.answer_ids)
    return QueryFeatures(query, vector, node_ids, scores, np.array([n in answers for n in node_ids], dtype=bool))


def collect_features(conn: psycopg.Connection, skb: str, pairs: list[Pair], query_set: QuerySet, embed_model: str,
                     pool: int, *, training: bool, negatives: int, rng: np.random.Generator, all_nodes: np.ndarray,
                     progress: Reporter) -> list[QueryFeatures]:
    """Features of every query of a split; training queries also get their answers and random negatives."""
    vectors = encode([q.body for q in query_set.queries], embed_model, encoder=skb_encoder(conn, skb, embed_model))
    out = []
    with progress.stage(f"scores {query_set.split}", total=len(query_set.queries)) as stage:
        for query, vector in zip(query_set.queries, vectors):
            include = None
            if training:
                drawn = rng.choice(all_nodes, size=min(negatives, len(all_nodes)), replace=False).tolist()
                include = list(dict.fromkeys(list(query.answer_ids) + drawn))
            out.append(query_features(conn, skb, pairs, query, vector, embed_model, pool, include))
            stage.advance()
    return out


def train_mfar(conn: psycopg.Connection, skb: str, settings: TrainSettings | None = None,
               progress: Reporter | None = None) -> TrainReport:
    """Learn an mFAR model's weights on `train_split`, keep the best epoch on `early_stop_split`, store it."""
    settings = settings or TrainSettings()
    progress = progress or NullReporter()
    skb_id = require_skb(conn, skb)
    embed_model = canonical_name(settings.embed_model)
    pairs = variant_pairs(skb_fields(conn, skb, embed_model), settings.variant, tuple(settings.exclude))
    splits = learning_splits(settings.train_split)
    if settings.early_stop_split == HOLDOUT:
        train_set, stop_set = learning_sets(conn, skb_id, splits, settings.holdout, settings.seed)
    else:
        train_set = from_splits(conn, skb_id, splits)
        stop_set = from_split(conn, skb_id, settings.early_stop_split)
    for chosen, role in ((train_set, "training"), (stop_set, "early-stopping")):
        if settings.limit:
            chosen.queries = chosen.queries[:settings.limit]
        if not chosen.queries:
            raise ValueError(f"SKB {skb!r} has no queries in split {chosen.split!r} ({role} split)")
    rng = np.random.default_rng(settings.seed)
    all_nodes = np.array([row[0] for row in sql().node_ids(conn, skb_id=skb_id)], dtype=np.int64)

    started = time.perf_counter()
    train = collect_features(conn, skb, pairs, train_set, embed_model, settings.pool, training=True,
                             negatives=settings.negatives, rng=rng, all_nodes=all_nodes, progress=progress)
    stop = collect_features(conn, skb, pairs, stop_set, embed_model, settings.pool, training=False,
                            negatives=0, rng=rng, all_nodes=all_nodes, progress=progress)
    feature_seconds = time.perf_counter() - started

    started = time.perf_counter()
    fitted = fit_gate(train, stop, settings, len(pairs), rng, progress)
    history, best_epoch = fitted.history, fitted.best_epoch
    extra = {}
    if settings.finetune_encoder:
        from stark_pg.train.mfar_encoder import finetune_query_encoder

        def rescore_stop(vectors):
            return [query_features(conn, skb, pairs, q, v, embed_model, settings.pool, None)
                    for q, v in zip(stop_set.queries, vectors)]

        frozen = next(h for h in history if h["epoch"] == best_epoch)
        tuned = finetune_query_encoder(conn, skb, skb_id, settings.name or settings.variant, embed_model, pairs,
                                       train, stop_set.queries, fitted, settings, rescore_stop,
                                       {k: v for k, v in frozen.items() if k not in ("epoch", "loss")}, progress)
        fitted.weight, fitted.bias = tuned.weight, tuned.bias
        history = history + [{**h, "stage": "encoder"} for h in tuned.history]
        best_epoch = tuned.best_epoch
        chosen = next(h for h in tuned.history if h["epoch"] == best_epoch)
        extra = {"query_encoder": tuned.path, "encoder_best_epoch": tuned.best_epoch}
    else:
        chosen = next(h for h in history if h["epoch"] == best_epoch)
    train_seconds = time.perf_counter() - started
    model = MfarModel(
        name=settings.name or settings.variant, variant=settings.variant, embed_model=embed_model, pairs=pairs,
        gate_weight=fitted.weight, gate_bias=fitted.bias, means=fitted.means, scales=fitted.scales,
        gammas=fitted.gammas,
        settings={**asdict(settings), "exclude": list(settings.exclude), "embed_model": embed_model,
                  "train_queries": len(train), "stop_queries": len(stop),
                  "feature_seconds": round(feature_seconds, 2), "train_seconds": round(train_seconds, 2), **extra},
        history=history, metrics={k: v for k, v in chosen.items() if k not in ("epoch", "loss")} | {"epoch": best_epoch})
    save_model(conn, skb_id, model)
    return TrainReport(model, feature_seconds, train_seconds, best_epoch, history)


@dataclass
class FittedGate:
    weight: np.ndarray
    bias: np.ndarray
    gammas: np.ndarray
    means: np.ndarray
    scales: np.ndarray
    history: list
    best_epoch: int


def fit_gate(train: list[QueryFeatures], stop: list[QueryFeatures], settings: TrainSettings, n_pairs: int,
             rng: np.random.Generator, progress: Reporter | None = None) -> FittedGate:
    """Learn the gate (and batch-norm scales) on fixed candidate scores; keep the best early-stopping epoch."""
    import torch

    progress = progress or NullReporter()
    stacked = np.concatenate([f.scores for f in train]).astype(np.float64)
    means = stacked.mean(axis=0)
    scales = stacked.std(axis=0)
    scales[scales < 1e-6] = 1.0          # a pair constant over the training candidates carries nothing to scale
    torch.manual_seed(settings.seed)
    dim = len(train[0].vector)
    gate = torch.nn.Linear(dim, n_pairs)
    torch.nn.init.zeros_(gate.weight)
    torch.nn.init.zeros_(gate.bias)
    log_gamma = torch.nn.Parameter(torch.zeros(n_pairs), requires_grad=settings.batch_norm)
    params = list(gate.parameters()) + ([log_gamma] if settings.batch_norm else [])
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)

    def tensors(features: list[QueryFeatures]):
        return [(torch.tensor(f.vector, dtype=torch.float32),
                 torch.tensor((f.scores - means) / scales, dtype=torch.float32),
                 torch.tensor(f.is_answer)) for f in features]

    train_t = [t for t in tensors(train) if t[2].any()]
    stop_t = tensors(stop)

    def scores_of(vector, standardised):
        weights = torch.softmax(gate(vector), dim=-1) * torch.exp(log_gamma)
        return standardised @ weights

    def stop_metrics() -> dict:
        with torch.no_grad():
            return metrics.mean_metrics([ranking_metrics(f, scores_of(vector, standardised).numpy())
                                         for f, (vector, standardised, _) in zip(stop, stop_t)])

    history = [epoch_record(0, None, 0, settings.early_stop_split, stop_metrics())]
    best = (history[0][f"{settings.early_stop_split}_mrr"], 0, _snapshot(gate, log_gamma))
    with progress.stage("epochs", total=settings.epochs) as stage:
        for epoch in range(1, settings.epochs + 1):
            order = rng.permutation(len(train_t))
            total = 0.0
            for start in range(0, len(order), settings.batch_size):
                optimizer.zero_grad()
                losses = []
                for i in order[start:start + settings.batch_size]:
                    vector, standardised, is_answer = train_t[i]
                    if not (~is_answer).any():
                        continue
                    losses.append(contrastive_loss(scores_of(vector, standardised) / settings.temperature,
                                                   is_answer))
                if not losses:
                    continue
                loss = torch.stack(losses).mean()
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * len(losses)
            measured = stop_metrics()
            history.append(epoch_record(epoch, total, len(train_t), settings.early_stop_split, measured))
            if measured["mrr"] > best[0]:
                best = (measured["mrr"], epoch, _snapshot(gate, log_gamma))
            stage.advance()
            if epoch - best[1] >= settings.patience:
                break
    weight, bias, gammas = best[2]
    return FittedGate(weight, bias, gammas, means, scales, history, best[1])


def _snapshot(gate, log_gamma) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (*gate_arrays(gate), np.exp(log_gamma.detach().numpy().astype(np.float64)))
