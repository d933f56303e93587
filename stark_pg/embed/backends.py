"""Fast CPU inference for local sentence-transformers models: ONNX Runtime and OpenVINO, optionally int8.

Why it is built this way:
- sentence-transformers' own `backend="onnx"` goes through Hugging Face Optimum, whose releases pin
  transformers and huggingface-hub below the versions stark-pg runs on; installing it would downgrade
  them. So the model is exported here with torch's own ONNX exporter, once: the whole
  sentence-transformers pipeline after tokenization (transformer, pooling, normalisation) becomes one
  graph from token ids to the sentence vector, so a model with any pooling exports alike. Tokenization
  is the model's own fast tokenizer (its tokenizer.json, with the model's maximum length), run by the
  `tokenizers` library: no torch at query time.
- The export is checked before it is kept: the graph's vectors of a few probe texts must match torch's
  (cosine above EXPORT_MIN_COSINE), else the model is refused with a message naming --backend torch.
- int8 (`quantize`) is ONNX Runtime's dynamic quantization of the weights, per output channel (per
  tensor loses more: docs/benchmarks.md, "Embedding backends"). OpenVINO compiles the same ONNX files (fp32 or
  int8) for the CPU; it needs the `openvino` package (the `openvino` extra).
- Exports are cached under STARK_PG_HOME/models/onnx/<name>-<hash>/, keyed by what was exported (a
  local path with its files' modification time, or a model name), written to a temporary directory and
  renamed into place under a file lock, so concurrent processes export once and never read half a file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BACKENDS = ("torch", "onnx", "openvino")
BACKEND_CHOICES = ("auto",) + BACKENDS
EXPORT_FORMAT = 1                     # bump when the export's files or graph change
EXPORT_MIN_COSINE = 0.999             # fp32 export against torch, on the probe texts
OPSET = 17
PROBES = ("drugs that target PPARG",
          "Which gene or protein interacts with the nucleoplasm and is associated with inflammatory bowel disease?",
          "a")


class EncoderError(ValueError):
    """A backend or quantization setting that names no backend, or one this machine or model cannot run."""


@dataclass(frozen=True)
class Encoder:
    """How a local model computes its vectors: `backend` torch, onnx or openvino; `quantize`: int8 weights
    (onnx and openvino only). Stored with an SKB's vectors (stark.embedding_build.settings -> 'encoder'),
    so that its queries are embedded as its documents were."""

    backend: str = "torch"
    quantize: bool = False

    def checked(self) -> "Encoder":
        if self.backend not in BACKENDS:
            raise EncoderError(f"embedding backend {self.backend!r}: expected one of {', '.join(BACKEND_CHOICES)}")
        if self.quantize and self.backend == "torch":
            raise EncoderError("--quantize (int8) needs --backend onnx or openvino: the torch backend runs the "
                               "model's own float weights")
        return self

    @property
    def label(self) -> str:
        return self.backend + ("-int8" if self.quantize else "")

    def as_dict(self) -> dict:
        return {"backend": self.backend, "quantize": self.quantize}

    @classmethod
    def from_record(cls, record: dict | None) -> "Encoder":
        """The encoder a build recorded; a build without a record (before encoders were recorded) used torch."""
        if not record:
            return cls()
        return cls(str(record.get("backend", "torch")), bool(record.get("quantize", False)))


def check_backend(backend: str | None, setting: str = "--backend") -> str | None:
    """`backend` lower-cased if it is one of auto, torch, onnx, openvino (None stays None), else EncoderError."""
    if backend is None:
        return None
    wanted = backend.strip().lower()
    if wanted not in BACKEND_CHOICES:
        raise EncoderError(f"{setting}={backend!r} is not an embedding backend: use {', '.join(BACKEND_CHOICES)}")
    return wanted


def runtime_available(backend: str) -> bool:
    """Whether the Python package that runs `backend` is installed (torch always is)."""
    if backend == "torch":
        return True
    import importlib.util

    return importlib.util.find_spec("onnxruntime" if backend == "onnx" else "openvino") is not None


def require_runtime(backend: str) -> None:
    if not runtime_available(backend):
        package = "onnxruntime" if backend == "onnx" else "openvino"
        raise EncoderError(f"embedding backend {backend!r} needs the Python package {package!r}, which is not "
                           f"installed: pip install 'stark-pg[{backend}]' (or use --backend torch)")


# -- export ------------------------------------------------------------------------------------------

def export_dir(source: str, fingerprint: str) -> Path:
    """Where the export of `source` (a model name or local path) lives: STARK_PG_HOME/models/onnx/<slug>-<hash>."""
    from stark_pg.config import home_dir

    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(source).name or source).strip("-")[:60] or "model"
    digest = hashlib.sha1(f"{EXPORT_FORMAT}\n{source}\n{fingerprint}".encode()).hexdigest()[:12]
    return home_dir() / "models" / "onnx" / f"{slug}-{digest}"


def fingerprint(path: str) -> str:
    """What identifies a local model's weights: its files' names, sizes and modification times."""
    root = Path(path)
    if not root.is_dir():
        return "name"
    parts = []
    for file in sorted(root.rglob("*")):
        if file.is_file() and ".git" not in file.parts:
            stat = file.stat()
            parts.append(f"{file.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


def ensure_export(source: str, load_torch_model, quantize: bool, files: str | None = None) -> Path:
    """The directory holding the ONNX export of `source` (and its int8 copy if `quantize`), exporting once.
    `load_torch_model()` returns the SentenceTransformer to export (called only when exporting); `files`:
    the directory whose files identify the weights (default: `source` itself, if it is a path)."""
    target = export_dir(source, fingerprint(files or source))
    wanted = target / ("model_int8.onnx" if quantize else "model.onnx")
    if wanted.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "model.onnx").is_file():
            _export(load_torch_model(), source, target)
        if quantize and not wanted.is_file():
            _quantize(target)
    return target


def _export(model, source: str, target: Path) -> None:
    import torch

    tokenizer = model.tokenizer
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tokenizer.model_input_names]
    if "input_ids" not in names or "attention_mask" not in names:
        raise EncoderError(f"model {source!r} does not take input_ids and attention_mask: it cannot run on the "
                           "onnx or openvino backend; use --backend torch")
    lower = bool(getattr(model[0], "do_lower_case", False))
    max_length = int(model.max_seq_length or tokenizer.model_max_length)

    class Pipeline(torch.nn.Module):
        """Token ids to the sentence vector: every module of the SentenceTransformer after tokenization."""

        def __init__(self, st):
            super().__init__()
            self.st = st

        def forward(self, *inputs):
            return self.st(dict(zip(names, inputs)))["sentence_embedding"]

    model = model.to("cpu").eval()
    features = model.preprocess(list(PROBES))
    args = tuple(features[n] for n in names)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        import warnings

        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Pipeline(model), args, str(staging / "model.onnx"), dynamo=False,
                              input_names=names, output_names=["sentence_embedding"], opset_version=OPSET,
                              dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names},
                                            "sentence_embedding": {0: "batch"}})
        tokenizer.save_pretrained(str(staging / "tokenizer"))
        manifest = {"source": source, "format": EXPORT_FORMAT, "inputs": names, "max_length": max_length,
                    "lower_case": lower, "dimension": int((getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension)()),
                    "torch": torch.__version__}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2))
        expected = model.encode(list(PROBES), normalize_embeddings=True, convert_to_numpy=True)
        got = OnnxRuntimeEncoder(staging, quantize=False).encode(list(PROBES))
        cosine = float(np.min(np.sum(expected * got, axis=1)))
        if cosine < EXPORT_MIN_COSINE:
            raise EncoderError(f"model {source!r} exported to ONNX computes other vectors than torch (cosine "
                               f"{cosine:.4f} on probe texts): use --backend torch for it")
        manifest["probe_min_cosine"] = round(cosine, 6)
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2))
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _quantize(target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    partial = target / f".model_int8.{os.getpid()}.onnx"
    quantize_dynamic(str(target / "model.onnx"), str(partial), weight_type=QuantType.QInt8, per_channel=True)
    os.replace(partial, target / "model_int8.onnx")


# -- inference ---------------------------------------------------------------------------------------

class _Tokenized:
    """The model's fast tokenizer from its export, truncating at the model's length and padding a batch."""

    def __init__(self, directory: Path, manifest: dict):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer" / "tokenizer.json"))
        config = json.loads((directory / "tokenizer" / "tokenizer_config.json").read_text())
        pad = config.get("pad_token")
        pad = pad.get("content") if isinstance(pad, dict) else pad
        self.tokenizer.enable_truncation(manifest["max_length"])
        pad_id = self.tokenizer.token_to_id(pad) if pad else 0
        self.tokenizer.enable_padding(pad_id=pad_id or 0, pad_token=pad or "[PAD]")
        self.inputs = manifest["inputs"]
        self.lower = manifest["lower_case"]

    def __call__(self, texts: list[str]) -> dict[str, np.ndarray]:
        if self.lower:
            texts = [t.lower() for t in texts]
        encoded = self.tokenizer.encode_batch(texts)
        arrays = {"input_ids": [e.ids for e in encoded], "attention_mask": [e.attention_mask for e in encoded],
                  "token_type_ids": [e.type_ids for e in encoded]}
        return {name: np.asarray(arrays[name], dtype=np.int64) for name in self.inputs}

    def count(self, texts: list[str]) -> int:
        return sum(sum(e.attention_mask) for e in self.tokenizer.encode_batch(texts))


class _Encoder:
    """Texts to unit vectors through a compiled graph, in batches of similar length (as sentence-transformers
    sorts them, so that a batch pads little)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.manifest = json.loads((directory / "manifest.json").read_text())
        self.tokenize = _Tokenized(directory, self.manifest)

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.manifest["dimension"]), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.manifest["dimension"]), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            picked = order[start:start + batch_size]
            out[picked] = self.run(self.tokenize([texts[i] for i in picked]))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


_cpu_threads: int | None = None


def set_cpu_threads(n: int | None) -> None:
    """Run the encoders this process opens from now on with `n` CPU threads (None: each runtime's own
    default, every core). For a process that shares its machine with other encoders, e.g. a Ray worker
    given a share of a node's cores: torch follows OMP_NUM_THREADS, which Ray sets, but ONNX Runtime and
    OpenVINO size their pools by the machine's cores, and several workers on one machine would each
    take all of them."""
    global _cpu_threads
    _cpu_threads = n
    if n:
        import torch

        torch.set_num_threads(n)


class OnnxRuntimeEncoder(_Encoder):
    def __init__(self, directory: Path, quantize: bool):
        super().__init__(directory)
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if _cpu_threads:
            options.intra_op_num_threads = _cpu_threads
        self.session = ort.InferenceSession(str(directory / ("model_int8.onnx" if quantize else "model.onnx")),
                                            options, providers=["CPUExecutionProvider"])

    def run(self, feeds):
        return self.session.run(None, feeds)[0]


class OpenVinoEncoder(_Encoder):
    def __init__(self, directory: Path, quantize: bool):
        super().__init__(directory)
        import openvino as ov

        core = ov.Core()
        config = {"INFERENCE_NUM_THREADS": _cpu_threads} if _cpu_threads else {}
        self.compiled = core.compile_model(core.read_model(str(directory / ("model_int8.onnx" if quantize
                                                                           else "model.onnx"))), "CPU", config)
        self._lock = threading.Lock()

    def run(self, feeds):
        with self._lock:                       # one infer request, shared by threads
            return np.asarray(self.compiled(feeds)[0])


def open_encoder(directory: Path, encoder: Encoder) -> _Encoder:
    if encoder.backend == "onnx":
        return OnnxRuntimeEncoder(directory, encoder.quantize)
    if encoder.backend == "openvino":
        return OpenVinoEncoder(directory, encoder.quantize)
    raise EncoderError(f"backend {encoder.backend!r} has no compiled encoder")
