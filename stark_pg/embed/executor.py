"""Who computes an index build's embeddings: this process (`LocalExecutor`) or a pool of Ray workers
(`stark_pg.embed.ray_executor.RayExecutor`, `stark-pg index --executor ray`).

Why an executor at all: a build reads documents from PostgreSQL in batches, embeds them and writes the
vectors back, each batch committed on its own (stark_pg/index/dense.py). Only the middle step differs
between running here and running on a cluster, so the build hands its batches to an executor and writes
whatever comes back; which documents still need a vector, how the vectors are stored and how a stopped
build resumes stay the build's business, the same for both.

The contract: `embed_batches(jobs)` takes an iterable of (key, texts) and yields (key, vectors) once per
job, vectors a float32 array with one unit-normalised row per text. The local executor yields them in
order, embedding one job while the caller waits; the Ray executor keeps several jobs in flight and yields
each when it is done, in whatever order. A job's key is the caller's: it says what to write.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import numpy as np

from stark_pg import embed

EXECUTORS = ("local", "ray")


class LocalExecutor:
    """Embeds in this process, one job after another: what `stark-pg index` does without --executor."""

    name = "local"

    def __init__(self, model: str, batch: int = embed.DEFAULT_BATCH, *, device: str | None = None,
                 half: bool = False, encoder: embed.Encoder | None = None):
        self.model, self.batch, self.device, self.half, self.encoder = model, batch, device, half, encoder

    def embed_batches(self, jobs: Iterable[tuple[Any, list[str]]]) -> Iterator[tuple[Any, np.ndarray]]:
        for key, texts in jobs:
            yield key, self.encode(texts)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return embed.encode(texts, self.model, self.batch, device=self.device, half=self.half, role="document",
                            encoder=self.encoder)

    def describe(self) -> dict:
        return {}

    def close(self) -> None:
        pass
