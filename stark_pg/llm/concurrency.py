"""Concurrent calls to a served model: how many at once (`--workers`, STARK_PG_WORKERS) and one map
that runs them.

A served model answers many requests at once while each one waits for seconds, so every command that
calls one (eval and search of the LLM methods, index with an `openai:` model, train agent,
synthesize) hands its independent calls to `ordered_map`. The results come back in the order of the
items whatever order the calls finish in, so what is stored is what a sequential run stores. The
bound is set once by the command (`with workers(n):`) and read where the calls are made, so the code
in between need not pass it along. Inside a worker the bound is 1: a method that would fan out again
runs sequentially there, and the total stays at most N requests in flight.

Threads, not asyncio: the SDK calls, the cache reads and the methods are synchronous code, and the
time is spent waiting on sockets, which a thread does without holding the GIL.
"""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, TypeVar

from stark_pg.config import ENV_WORKERS, env
from stark_pg.llm.errors import LLMError

T = TypeVar("T")
R = TypeVar("R")

_workers: contextvars.ContextVar[int] = contextvars.ContextVar("llm_workers", default=1)


class WorkersError(LLMError):
    """A bad --workers or STARK_PG_WORKERS."""


def resolve_workers(value: int | None, option: str = "--workers") -> int:
    """The bound asked for by `option` (None: STARK_PG_WORKERS, else 1), refusing anything below 1."""
    source = option
    if value is None:
        raw = env(ENV_WORKERS)
        if not raw:
            return 1
        source = ENV_WORKERS
        try:
            value = int(raw)
        except ValueError:
            raise WorkersError(f"{ENV_WORKERS}={raw!r} is not a whole number") from None
    if int(value) < 1:
        raise WorkersError(f"{source} {value}: must be at least 1 (1 calls the model one request at a time)")
    return int(value)


def current() -> int:
    """The bound in force here (1 outside any `workers` block and inside a worker)."""
    return _workers.get()


@contextmanager
def workers(n: int):
    """Calls made through `ordered_map` inside the block run up to `n` at a time."""
    token = _workers.set(max(1, int(n)))
    try:
        yield
    finally:
        _workers.reset(token)


def _in_worker(fn: Callable[[T], R]) -> Callable[[T], R]:
    """`fn` run in a copy of the caller's context (its cache connection, meters) with the bound at 1."""
    context = contextvars.copy_context()

    def run(item: T) -> R:
        def body():
            _workers.set(1)
            return fn(item)
        return context.copy().run(body)
    return run


def ordered_iter(fn: Callable[[T], R], items: Iterable[T], n: int | None = None) -> Iterator[R]:
    """fn(item) for every item, up to `n` (default: the bound in force) at a time, yielded in the
    items' order as soon as each one and those before it are done, so the caller can store each
    result while later ones are still running. An exception is raised at its item's place; the items
    not yet started are then dropped."""
    items = list(items)
    n = current() if n is None else n
    if n <= 1 or len(items) <= 1:
        for item in items:
            yield fn(item)
        return
    run = _in_worker(fn)
    pool = ThreadPoolExecutor(max_workers=min(n, len(items)), thread_name_prefix="stark-pg-worker")
    try:
        futures = [pool.submit(run, item) for item in items]
        for future in futures:
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def ordered_map(fn: Callable[[T], R], items: Iterable[T], n: int | None = None) -> list[R]:
    """The list of fn(item) in the items' order, up to `n` (default: the bound in force) at a time."""
    return list(ordered_iter(fn, items, n))
