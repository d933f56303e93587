"""Fine-tuning mFAR's query encoder (`stark-pg train mfar --finetune-encoder`), documents left as indexed.

Why only the query side: the documents' field vectors live in PostgreSQL behind HNSW indexes, and
re-embedding every field of every node after each epoch costs what indexing costs (tens of minutes
on a CPU for the slice alone). Moving only the query encoder keeps the index valid, so search just
embeds the query with the fine-tuned copy. The gate starts from the frozen-encoder training and is
trained on together with the encoder.

Each training query keeps a small candidate set (its answers and the negatives the frozen model
scores highest, i.e. the hardest ones); the dense scores of those candidates are recomputed in torch
from their stored vectors (a field's score is its best chunk, as in stark.mfar_field_scores), the
lexical ones stay fixed. After each epoch the early-stopping queries are re-scored through
PostgreSQL with the new query vectors, exactly as search does, and the best epoch is saved.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import psycopg

from stark_pg.config import home_dir
from stark_pg.embed import fresh_model
from stark_pg.eval import metrics
from stark_pg.index.dense import find_model, statement
from stark_pg.models.mfar import Pair, gate_softmax
from stark_pg.progress import NullReporter, Reporter
from stark_pg.train.mfar_fit import contrastive_loss, epoch_record, gate_arrays, ranking_metrics

HARD_NEGATIVES = 31
ENCODER_LR = 2e-5


@dataclass
class EncoderResult:
    path: str
    weight: np.ndarray
    bias: np.ndarray
    history: list
    best_epoch: int


def encoder_dir(skb: str, name: str):
    """Where a fine-tuned query encoder is saved: STARK_PG_HOME/models/mfar/<skb>/<model name>."""
    def safe(part: str) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in part)

    return home_dir().joinpath("models", "mfar", safe(skb), safe(name))


def _stored_vectors(conn, skb_id: int, embed_model: str, node_ids: list[int]) -> dict:
    """{(node_id, kind or 'document'): (n, dim) array} of the given nodes' stored vectors."""
    tables = find_model(conn, embed_model)
    out: dict = {}
    for node, kind, vec in conn.execute(statement("chunk_vectors_of_nodes", tables),
                                        {"skb_id": skb_id, "node_ids": node_ids}):
        out.setdefault((node, kind), []).append(vec.to_numpy())
    for node, vec in conn.execute(statement("doc_vectors_of_nodes", tables), {"skb_id": skb_id, "node_ids": node_ids}):
        out[(node, "document")] = [vec.to_numpy()]
    return {key: np.stack(value) for key, value in out.items()}


def _dense_kind(field: str) -> str:
    if field in ("document", "name") or field.startswith("relation:"):
        return field
    return f"field:{field}"


def finetune_query_encoder(conn: psycopg.Connection, skb: str, skb_id: int, name: str, embed_model: str,
                           pairs: list[Pair], train: list, stop: list, fitted, settings, collect_stop,
                           start_metrics: dict, progress: Reporter | None = None) -> EncoderResult:
    """Train the query encoder and the gate together; save the best epoch's encoder; return it and the gate.

    `train` are the frozen-encoder QueryFeatures, `stop` the early-stopping queries, `fitted` the
    frozen-encoder FittedGate with `start_metrics` its early-stopping figures (epoch 0 here: the same
    encoder and gate), and `collect_stop(vectors)` re-scores the early-stopping queries through
    PostgreSQL for new query vectors.
    """
    import torch

    progress = progress or NullReporter()
    torch.manual_seed(settings.seed)
    encoder = fresh_model(embed_model)
    means = torch.tensor(fitted.means, dtype=torch.float32)
    scales = torch.tensor(fitted.scales, dtype=torch.float32)
    gammas = torch.tensor(fitted.gammas, dtype=torch.float32)
    gate = torch.nn.Linear(fitted.weight.shape[1], len(pairs))
    with torch.no_grad():
        gate.weight.copy_(torch.tensor(fitted.weight))
        gate.bias.copy_(torch.tensor(fitted.bias))
    dense_cols = [i for i, p in enumerate(pairs) if p.scorer == "dense"]

    examples = []
    for f in train:
        if not f.is_answer.any():
            continue
        frozen = ((f.scores - fitted.means) / fitted.scales) @ (gate_softmax(fitted.weight, fitted.bias, f.vector)
                                                                  * fitted.gammas)
        negatives = [i for i in np.argsort(-frozen) if not f.is_answer[i]][:HARD_NEGATIVES]
        keep = np.concatenate([np.flatnonzero(f.is_answer), np.array(negatives, dtype=int)])
        examples.append((f.query.body, f.node_ids[keep], f.scores[keep], f.is_answer[keep]))
    wanted = sorted({int(n) for _, ids, _, _ in examples for n in ids})
    vectors = _stored_vectors(conn, skb_id, embed_model, wanted)

    def dense_tensor(node_ids):
        """(candidates, dense pairs, max chunks, dim) vectors and a mask of which are real."""
        groups = [[vectors.get((int(n), _dense_kind(pairs[c].field))) for c in dense_cols] for n in node_ids]
        depth = max([1] + [len(g) for row in groups for g in row if g is not None])
        dim = fitted.weight.shape[1]
        out = np.zeros((len(node_ids), len(dense_cols), depth, dim), dtype=np.float32)
        mask = np.zeros((len(node_ids), len(dense_cols), depth), dtype=bool)
        for i, row in enumerate(groups):
            for j, g in enumerate(row):
                if g is not None:
                    out[i, j, :len(g)] = g
                    mask[i, j, :len(g)] = True
        return torch.tensor(out), torch.tensor(mask)

    prepared = [(body, torch.tensor(scores), *dense_tensor(ids), torch.tensor(answers))
                for body, ids, scores, answers in examples]
    optimizer = torch.optim.AdamW([{"params": encoder.parameters(), "lr": ENCODER_LR},
                                   {"params": gate.parameters(), "lr": settings.lr}],
                                  weight_decay=settings.weight_decay)

    def stop_metrics() -> dict:
        encoder.eval()
        with torch.no_grad():
            query_vectors = encoder.encode([q.body for q in stop], normalize_embeddings=True, convert_to_numpy=True,
                                           show_progress_bar=False, batch_size=32)
            values = []
            for f in collect_stop(query_vectors):
                weights = torch.softmax(gate(torch.tensor(f.vector)), -1) * gammas
                values.append(ranking_metrics(f, (((torch.tensor(f.scores) - means) / scales) @ weights).numpy()))
        return metrics.mean_metrics(values)

    key = f"{settings.early_stop_split}_"
    history = [{"epoch": 0, "loss": None, **start_metrics}]
    best = (history[0][key + "mrr"], 0, copy.deepcopy(encoder.state_dict()), gate_arrays(gate))
    rng = np.random.default_rng(settings.seed)
    with progress.stage("encoder epochs", total=settings.encoder_epochs) as stage:
        for epoch in range(1, settings.encoder_epochs + 1):
            encoder.train()
            total = 0.0
            order = rng.permutation(len(prepared))
            for start in range(0, len(order), settings.batch_size):
                batch = [prepared[i] for i in order[start:start + settings.batch_size]]
                prepare = getattr(encoder, "preprocess", None) or encoder.tokenize
                features = prepare([b[0] for b in batch])
                features = {k: v for k, v in features.items() if isinstance(v, torch.Tensor)}
                query_vectors = encoder(features)["sentence_embedding"]
                losses = []
                for q, (_, scores, dense, mask, answers) in zip(query_vectors, batch):
                    sims = torch.einsum("cpkd,d->cpk", dense, q).masked_fill(~mask, float("-inf")).amax(-1)
                    sims = torch.where(mask.any(-1), sims, torch.zeros_like(sims))
                    raw = scores.clone()
                    raw[:, dense_cols] = sims
                    weights = torch.softmax(gate(q), -1) * gammas
                    losses.append(contrastive_loss((((raw - means) / scales) @ weights) / settings.temperature,
                                                   answers))
                loss = torch.stack(losses).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * len(losses)
            measured = stop_metrics()
            history.append(epoch_record(epoch, total, len(prepared), settings.early_stop_split, measured))
            if measured["mrr"] > best[0]:
                best = (measured["mrr"], epoch, copy.deepcopy(encoder.state_dict()), gate_arrays(gate))
            stage.advance()
    encoder.load_state_dict(best[2])
    path = encoder_dir(skb, name)
    path.mkdir(parents=True, exist_ok=True)
    encoder.save(str(path))
    return EncoderResult(str(path), best[3][0], best[3][1], history, best[1])


