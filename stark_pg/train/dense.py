"""STaRK's Dense Retriever baseline: query and document encoders fine-tuned on an SKB's training pairs.

`stark-pg train dense SKB` starts from the sentence-transformers model the SKB is indexed with (or
`base`), with one encoder for both sides (`shared`) or a copy per side, and trains them with a
contrastive loss (InfoNCE, temperature 0.05 as sentence-transformers' MultipleNegativesRankingLoss):
each training query against one of its answers, its `negatives` hard negatives and every other
document of the batch (in-batch negatives; the query's other answers are masked out, never negatives).

Why it is built this way:
- Hard negatives are VSS's top false positives, mined once before training in PostgreSQL
  (`dense_shortlists` in sql/queries/dense_train.sql: the base model's exact VSS ranking, answers
  skipped), so they are by construction never an answer.
- On this CPU a training pass over a document costs about three inference passes, and a query brings
  1 + 20 documents. By default the hard negatives are therefore encoded without gradient (the query
  encoder still learns from them; the document encoder learns from the positives, which are also
  everyone else's in-batch negatives); `negative_gradients` backpropagates through them too, at about
  three times the cost. Documents are cut to `max_doc_tokens` while training (128: the doc's name,
  type and first sentences); the saved encoder keeps the base model's length for indexing.
- Early stopping on a seeded held-out part of `train` (stark_pg.eval.query_sets.hold_out, as `train
  mfar`): re-embedding the whole SKB after every epoch costs what indexing costs, so each held-out
  query is re-ranked among its base VSS top `eval_pool` (a re-ranking estimate; epoch 0 is the base
  model on the same candidates). The best epoch's weights are kept.
- The result is an embedding model like any other: files under STARK_PG_HOME/models/dense/<name>/
  (sentence-transformers save directories, `stark_pg.embed.resolve_model` picks the query or the
  document encoder), the SKB's documents re-embedded by the existing index build
  (`stark_pg.index.dense.build_dense`: its own vector table and HNSW index, resumable, progress
  bars), so `stark-pg search/eval SKB -m vss -o model=NAME` searches it. Settings, per-epoch history
  and held-out metrics are a row of stark.trained_model (kind 'dense').
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import psycopg

from stark_pg import embed
from stark_pg.eval import metrics
from stark_pg.eval.query_sets import EvalQuery, fold, from_split, hold_out, learning_splits
from stark_pg.index.dense import build_dense, find_model, statement
from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb

KIND = "dense"
STOP_METRICS = ("hit@1", "hit@5", "recall@20", "mrr")
RENDER_BATCH = 256
FOLD_SEED = 0
"""The folds of `fold` are always drawn with this seed, so that a model trained without fold k and
the fusion features that use it (stark_pg.train.fusion) agree on which queries it never saw."""


@dataclass
class DenseSettings:
    name: str | None = None              # stored model name; default dense-<skb>-shared|separate
    base: str | None = None              # default: the model the SKB is indexed with (all-MiniLM-L6-v2)
    shared: bool = True                  # one encoder for queries and documents, else a copy per side
    epochs: int = 3
    patience: int = 1                    # epochs without a better held-out MRR before stopping
    negatives: int = 20                  # hard negatives per query (VSS's top false positives)
    lr: float = 2e-5
    batch_size: int = 16                 # queries per step (each with 1 + negatives documents)
    temperature: float = 0.05
    weight_decay: float = 0.01
    warmup: float = 0.1                  # share of the steps with a linearly rising learning rate
    max_doc_tokens: int = 128            # documents are cut to this many tokens while training
    negative_gradients: bool = False     # backpropagate through the hard negatives too (several times slower)
    eval_pool: int = 20                  # held-out queries are re-ranked among their base VSS top N
    holdout: float = 0.2
    seed: int = 0
    limit: int | None = None             # only the first N training queries (quick runs, tests)
    fold: tuple[int, int] | None = None  # (k, n): train without fold k of n of train (cross-fitting)
    splits: tuple[str, ...] = ("train",)  # learned from; the holdout (and any fold) is drawn from the first only
    multi_vector: bool = False           # also embed chunks with the new document encoder (multi-VSS, mFAR)


@dataclass
class DenseReport:
    name: str
    base: str
    path: str
    best_epoch: int
    metrics: dict
    history: list
    train_seconds: float
    index: dict
    settings: dict = field(default_factory=dict)


def default_name(skb: str, shared: bool) -> str:
    return f"dense-{skb}-{'shared' if shared else 'separate'}"


def indexed_model(conn: psycopg.Connection, skb_id: int) -> str:
    """The model the SKB's documents are embedded with: the default if it is one of them, else the first
    other model that is not itself a trained dense model; the default when none is."""
    names = [name for name, _ in sql().builds_of_skb(conn, skb_id=skb_id)]
    if not names or embed.DEFAULT_MODEL in names:
        return embed.DEFAULT_MODEL
    plain = [n for n in names if embed.resolve_model(n, "document") == n]
    return plain[0] if plain else embed.DEFAULT_MODEL


def check_name(conn: psycopg.Connection, skb: str, name: str, base: str) -> None:
    """A trained model's name must be usable as a directory and as an embedding model's name that no one
    else owns: not the base, not a plain embedding model, not another SKB's dense model."""
    if not embed._TRAINED_NAME.fullmatch(name) or name == embed.DEFAULT_MODEL or embed.canonical_name(name) != name:
        raise ValueError(f"--name {name!r}: use letters, digits, '.', '_' and '-' (at most 100, not the default "
                         "model's name)")
    if name == base:
        raise ValueError(f"--name {name!r} is the base model's name: choose another")
    owners = [row[0] for row in sql().trained_model_skbs(conn, kind=KIND, name=name)]
    if any(owner != skb for owner in owners):
        raise ValueError(f"--name {name!r} is a dense model trained on {owners[0]!r} (names are global): "
                         "choose another")
    if not owners and find_model(conn, name) is not None:
        raise ValueError(f"--name {name!r} is an embedding model already registered (not a dense model of "
                         f"{skb!r}): choose another")


def shortlists(conn: psycopg.Connection, skb: str, queries: list[EvalQuery], vectors: np.ndarray, model: str,
               k: int, exclude_answers: bool) -> dict[int, list[int]]:
    """{query_id: node ids} of each query's exact VSS top k under `model` (answers skipped if asked), in SQL."""
    out: dict[int, list[int]] = {q.query_id: [] for q in queries}
    if not queries:
        return out
    rows = sql().dense_shortlists(conn, skb=skb, query_ids=[q.query_id for q in queries], embeddings=list(vectors),
                                  model=model, k=k, exclude_answers=exclude_answers)
    for query_id, node_id, _ in rows:
        out[int(query_id)].append(int(node_id))
    return out


def render(conn: psycopg.Connection, skb_id: int, base_tables, shape: dict, node_ids: list[int]) -> dict[int, str]:
    """{node_id: document text} as the index build renders it (stark.render_document, the base's settings)."""
    texts: dict[int, str] = {}
    for start in range(0, len(node_ids), RENDER_BATCH):
        ids = node_ids[start:start + RENDER_BATCH]
        for node, body, _ in conn.execute(statement("render_documents", base_tables),
                                          shape | {"skb_id": skb_id, "node_ids": ids}):
            texts[int(node)] = body
    return texts


@contextmanager
def max_tokens(model, n: int | None):
    """The model cuts texts to `n` tokens inside the block (None: unchanged)."""
    if n is None:
        yield
        return
    saved = model.max_seq_length
    model.max_seq_length = min(n, saved)
    try:
        yield
    finally:
        model.max_seq_length = saved


def forward(model, texts: list[str]):
    """Unit-normalised embeddings of `texts` as a torch tensor (with gradient if enabled)."""
    import torch

    prepare = getattr(model, "preprocess", None) or model.tokenize
    features = {k: v for k, v in prepare(texts).items() if isinstance(v, torch.Tensor)}
    return torch.nn.functional.normalize(model(features)["sentence_embedding"], dim=-1)


def inference(model, texts: list[str], batch: int = 32) -> np.ndarray:
    """Unit-normalised float32 embeddings, as stark_pg.embed.encode computes them (the model's own length)."""
    return np.asarray(model.encode(texts, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False), dtype=np.float32)


def rerank_metrics(queries: list[EvalQuery], pools: dict[int, list[int]], query_vectors: np.ndarray,
                   doc_vectors: dict[int, np.ndarray]) -> dict:
    """Mean held-out metrics with each query ranked among its pool by cosine (ties by node id, as stark.vss)."""
    values = []
    for query, vector in zip(queries, query_vectors):
        ids = np.array([n for n in pools[query.query_id] if n in doc_vectors], dtype=np.int64)
        scores = np.array([float(doc_vectors[int(n)] @ vector) for n in ids])
        order = np.lexsort((ids, -scores)) if len(ids) else np.array([], dtype=int)
        values.append(metrics.evaluate(ids[order].tolist(), query.answer_ids, names=STOP_METRICS))
    return metrics.mean_metrics(values)


def train_dense(conn: psycopg.Connection, skb: str, settings: DenseSettings | None = None,
                progress: Reporter | None = None) -> DenseReport:
    """Fine-tune, keep the best held-out epoch, save the encoders, re-embed the SKB, record the model."""
    import torch

    settings = settings or DenseSettings()
    progress = progress or NullReporter()
    if settings.negatives < 0 or settings.epochs < 1 or settings.batch_size < 1 or settings.eval_pool < 1:
        raise ValueError("--negatives must be at least 0, --epochs, --batch-size and --eval-pool at least 1")
    if settings.lr <= 0 or settings.temperature <= 0:
        raise ValueError("--lr and --temperature must be positive")
    skb_id = require_skb(conn, skb)
    base = embed.canonical_name(settings.base) if settings.base else indexed_model(conn, skb_id)
    name = settings.name or default_name(skb, settings.shared)
    check_name(conn, skb, name, base)
    base_tables = find_model(conn, base)
    stored = base_tables and sql().build_settings(conn, skb_id=skb_id, model_id=base_tables.model_id)
    if not stored:
        raise ValueError(f"SKB {skb!r} has no document vectors of the base model {base!r}: run "
                         f"`stark-pg index {skb} --model {base}` first (hard negatives are its VSS ranking)")
    shape = {"with_relations": stored.get("with_relations", True), "max_neighbors": stored.get("max_neighbors", 25)}

    first, *added_splits = learning_splits(list(settings.splits))
    available = from_split(conn, skb_id, first)
    if settings.fold:
        available = fold(available, *settings.fold, seed=FOLD_SEED)[0]
    train_set, stop_set = hold_out(available, settings.holdout, settings.seed)
    added = [q for split in added_splits for q in from_split(conn, skb_id, split).queries]
    train_queries = [q for q in train_set.queries + added if q.answer_ids]
    if settings.limit:
        train_queries = train_queries[:settings.limit]
    stop_queries = stop_set.queries
    if not train_queries or not stop_queries:
        raise ValueError(f"SKB {skb!r} has too few queries in split {first!r} to train on and hold some out")

    started = time.perf_counter()
    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    with progress.stage("hard negatives (VSS in SQL)", total=2) as stage:
        train_vectors = embed.encode([q.body for q in train_queries], base)
        negatives = shortlists(conn, skb, train_queries, train_vectors, base, settings.negatives, True)
        stage.advance()
        stop_vectors = embed.encode([q.body for q in stop_queries], base)
        pools = shortlists(conn, skb, stop_queries, stop_vectors, base, settings.eval_pool, False)
        stage.advance()
    wanted = sorted({n for q in train_queries for n in q.answer_ids} | {n for ids in negatives.values() for n in ids}
                    | {n for ids in pools.values() for n in ids})
    texts = render(conn, skb_id, base_tables, shape, wanted)
    train_queries = [q for q in train_queries if any(a in texts for a in q.answer_ids)]
    pool_ids = sorted({n for ids in pools.values() for n in ids if n in texts})

    query_model = embed.fresh_model(base, role="query")
    doc_model = query_model if settings.shared else embed.fresh_model(base, role="document")
    params = list(query_model.parameters()) + ([] if settings.shared else list(doc_model.parameters()))
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    steps_per_epoch = -(-len(train_queries) // settings.batch_size)
    total_steps = steps_per_epoch * settings.epochs
    warmup = max(1, int(settings.warmup * total_steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total_steps - step) / max(1, total_steps - warmup))))

    def held_out() -> dict:
        query_model.eval()
        doc_model.eval()
        with torch.no_grad():
            doc_vectors = dict(zip(pool_ids, inference(doc_model, [texts[n] for n in pool_ids])))
            query_vectors = inference(query_model, [q.body for q in stop_queries])
        return rerank_metrics(stop_queries, pools, query_vectors, doc_vectors)

    def snapshot():
        return (copy.deepcopy(query_model.state_dict()),
                None if settings.shared else copy.deepcopy(doc_model.state_dict()))

    with progress.stage("held-out epoch 0", total=1) as stage:
        measured = held_out()
        stage.advance()
    history = [record(0, None, measured, time.perf_counter() - started)]
    best = (measured["mrr"], 0, snapshot())
    for epoch in range(1, settings.epochs + 1):
        order = rng.permutation(len(train_queries))
        total = 0.0
        with progress.stage(f"epoch {epoch}/{settings.epochs}", total=len(order), unit="queries") as stage:
            for start in range(0, len(order), settings.batch_size):
                batch = [train_queries[i] for i in order[start:start + settings.batch_size]]
                loss = step_loss(query_model, doc_model, batch, negatives, texts, rng, settings)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                scheduler.step()
                total += float(loss.detach()) * len(batch)
                stage.describe(f"loss {total / max(1, start + len(batch)):.4f}")
                stage.advance(len(batch))
        with progress.stage(f"held-out epoch {epoch}", total=1) as stage:
            measured = held_out()
            stage.advance()
        history.append(record(epoch, total / len(train_queries), measured, time.perf_counter() - started))
        if measured["mrr"] > best[0]:
            best = (measured["mrr"], epoch, snapshot())
        if epoch - best[1] >= settings.patience:
            break
    query_model.load_state_dict(best[2][0])
    if not settings.shared:
        doc_model.load_state_dict(best[2][1])
    train_seconds = time.perf_counter() - started
    path = save_encoders(name, query_model, doc_model, settings.shared, base)
    chosen = next(h for h in history if h["epoch"] == best[1])

    # re-embed the SKB's documents with the new document encoder: the index build, as for any model
    tables = find_model(conn, name)
    if tables is not None:
        with conn.transaction():
            conn.execute(statement("delete_skb_documents", tables), {"skb_id": skb_id})
            conn.execute(statement("delete_skb_chunks", tables), {"skb_id": skb_id})
    index = build_dense(conn, skb, name, with_relations=shape["with_relations"], max_neighbors=shape["max_neighbors"],
                        multi_vector=settings.multi_vector, progress=progress)
    kept = {k: v for k, v in chosen.items() if k.startswith("holdout_")}
    result_metrics = kept | {"epoch": best[1], "train_seconds": round(train_seconds, 1),
                             "index_seconds": index["seconds"]}
    stored_settings = asdict(settings) | {"name": name, "base": base, "train_queries": len(train_queries),
                                          "holdout_queries": len(stop_queries), **shape}
    with conn.transaction():
        sql().save_trained_model(conn, skb_id=skb_id, kind=KIND, name=name, base_model=base, path=str(path),
                                 settings=json.dumps(stored_settings), history=json.dumps(history),
                                 metrics=json.dumps(result_metrics))
    return DenseReport(name, base, str(path), best[1], result_metrics, history, train_seconds, index, stored_settings)


def record(epoch: int, loss: float | None, measured: dict, seconds: float) -> dict:
    return {"epoch": epoch, "loss": None if loss is None else round(loss, 5), "seconds": round(seconds, 1),
            **{f"holdout_{k}": round(v, 4) for k, v in measured.items()}}


def step_loss(query_model, doc_model, batch: list[EvalQuery], negatives: dict[int, list[int]], texts: dict[int, str],
              rng: np.random.Generator, settings: DenseSettings):
    """InfoNCE of one batch: each query's sampled answer against its hard negatives and every other
    document of the batch (its other answers masked out). Documents are embedded once per batch."""
    import torch

    positives = [int(rng.choice([a for a in q.answer_ids if a in texts])) for q in batch]
    with_grad = list(dict.fromkeys(positives))
    others = [n for q in batch for n in negatives[q.query_id] if n in texts and n not in set(with_grad)]
    others = list(dict.fromkeys(others))
    if settings.negative_gradients:
        with_grad, others = with_grad + others, []
    query_model.train()
    doc_model.train()
    queries = forward(query_model, [q.body for q in batch])
    with max_tokens(doc_model, settings.max_doc_tokens):
        docs = forward(doc_model, [texts[n] for n in with_grad])
        if others:
            # in train mode like the positives: negatives embedded without dropout (eval mode) would be
            # told apart from the positives by the noise alone, a shortcut that search never offers
            with torch.no_grad():
                fixed = forward(doc_model, [texts[n] for n in others])
            docs = torch.cat([docs, fixed])
    ids = with_grad + others
    column = {n: j for j, n in enumerate(ids)}
    logits = queries @ docs.T / settings.temperature
    mask = torch.zeros_like(logits, dtype=torch.bool)
    for i, q in enumerate(batch):
        for answer in q.answer_ids:
            j = column.get(answer)
            if j is not None and answer != positives[i]:
                mask[i, j] = True
    logits = logits.masked_fill(mask, float("-inf"))
    target = torch.tensor([column[p] for p in positives])
    return torch.nn.functional.cross_entropy(logits, target)


def save_encoders(name: str, query_model, doc_model, shared: bool, base: str):
    """Save the encoders into a new sub-directory of models/dense/<name>/, then point dense.json at it
    (replaced atomically) and remove older ones: a model being read meanwhile is never half-written."""
    root = embed.trained_dense_dir(name)
    run = root / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 1_000_000:06d}"
    run.mkdir(parents=True)
    if shared:
        query_model.save(str(run / "encoder"))
        roles = {"query": f"{run.name}/encoder", "document": f"{run.name}/encoder"}
    else:
        query_model.save(str(run / "query"))
        doc_model.save(str(run / "document"))
        roles = {"query": f"{run.name}/query", "document": f"{run.name}/document"}
    manifest = root / embed.DENSE_MANIFEST
    partial = root / (embed.DENSE_MANIFEST + ".tmp")
    partial.write_text(json.dumps(roles | {"base": base, "shared": shared}, indent=1))
    partial.replace(manifest)
    for old in root.glob("run-*"):
        if old.is_dir() and old != run:
            shutil.rmtree(old, ignore_errors=True)
    return root
