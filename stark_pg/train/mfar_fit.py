"""The pieces both of mFAR's fits use: the gate's (stark_pg/train/mfar.py) and the query encoder's
(stark_pg/train/mfar_encoder.py): the loss, the early-stopping metrics and the history's rows. A module
of their own, so that neither fit imports the other.
"""

from __future__ import annotations

import numpy as np

from stark_pg.eval import metrics

STOP_METRICS = ("hit@1", "hit@5", "recall@20", "mrr")


def epoch_record(epoch: int, loss_total: float | None, count: int, split: str, measured: dict) -> dict:
    """One row of a training history (stored with the model): the epoch, its mean loss (None before
    training) and the early-stopping metrics prefixed with their split, e.g. `val_mrr`."""
    loss = None if loss_total is None else round(loss_total / max(count, 1), 5)
    return {"epoch": epoch, "loss": loss, **{f"{split}_{k}": round(v, 4) for k, v in measured.items()}}


def contrastive_loss(logits, is_answer):
    """mFAR's loss for one query: each answer's logit against the log-sum-exp of the negatives' logits.

    `logits` are scores over the temperature, `is_answer` a boolean mask with at least one negative."""
    import torch

    negatives = torch.logsumexp(logits[~is_answer], dim=0)
    positives = logits[is_answer]
    return (torch.logaddexp(positives, negatives) - positives).mean()


def ranking_metrics(features, scores: np.ndarray) -> dict:
    """The early-stopping metrics of one query (its mfar.QueryFeatures) ranked by `scores` (ties by node id, as stark.mfar orders)."""
    order = np.lexsort((features.node_ids, -scores))
    return metrics.evaluate(features.node_ids[order].tolist(), features.query.answer_ids, names=STOP_METRICS)


def gate_arrays(gate) -> tuple[np.ndarray, np.ndarray]:
    """A torch gate's weight and bias as float64 numpy copies (what stark.mfar_model stores)."""
    return (gate.weight.detach().numpy().astype(np.float64).copy(), gate.bias.detach().numpy().astype(np.float64).copy())
