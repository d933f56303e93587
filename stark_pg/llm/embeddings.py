"""Embeddings from OpenAI or any OpenAI-compatible server (`openai:MODEL`), through the LLM layer.

`stark_pg.embed` hands every model named `openai:...` here, so `stark-pg index --model
openai:text-embedding-3-small` and `-o model=openai:text-embedding-3-small` work like a local model.
What the LLM layer gives chat requests, embeddings get too:

- settings (settings.py): the server is STARK_PG_EMBED_BASE_URL, else STARK_PG_LLM_BASE_URL, else
  OpenAI's API (OPENAI_API_KEY; a keyless compatible server needs none); STARK_PG_LLM_CACHE,
  STARK_PG_LLM_TIMEOUT, STARK_PG_LLM_RETRIES and STARK_PG_LLM_ENDPOINT as for chat;
- retries (providers.py): the SDK's own, for connection errors, timeouts, 429 and 5xx;
- the cache (cache.py, stark.llm_cache): one row per text, not per request, so a build that
  batches differently, a resumed build, another SKB holding the same document, or the same query
  asked again all reuse it. An index built once is never paid for twice, even after its vector
  tables are dropped. The vector is stored as base64 float32 (a sixth of its JSON size);
- concurrency (concurrency.py): the batches of one `encode` go up to --workers (STARK_PG_WORKERS)
  requests at a time, each vector cached under its own text, so the result is a sequential one's;
- meters (meter.py): `with metered(model) as meter:` counts requests sent (`calls`), texts answered
  from the cache (`cache_hits`), tokens (each text's share of its request's) and cost (prices.py).

The cache lives in a database: the connection a caller binds with `cache_in(conn)` (the index
build, the evaluation runner and `stark-pg search` bind theirs), else the database stark-pg uses by
default (STARK_PG_DSN or the embedded server), opened on first need.

The dimension is OpenAI's published one for its own models (KNOWN_DIMENSIONS), and otherwise (any
model behind a base URL) that of the first vector the server returns for a short probe text (cached
like any other text).
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import psycopg

from stark_pg.config import ENV_EMBED_BASE_URL, env
from stark_pg.llm import providers
from stark_pg.llm.cache import LLMCache, request_hash
from stark_pg.llm.concurrency import ordered_iter
from stark_pg.llm.errors import LLMCacheMiss, LLMCallFailed, LLMError
from stark_pg.llm.meter import Meter
from stark_pg.llm.prices import cost_usd
from stark_pg.llm.settings import LLMSettings
from stark_pg.resources import queries as sql

ENV_BASE_URL = ENV_EMBED_BASE_URL
KNOWN_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
PROBE = "dimension probe"      # the text embedded to learn an unknown model's dimension

_cache_conn: ContextVar[psycopg.Connection | None] = ContextVar("embedding_cache_conn", default=None)
_meters: ContextVar[tuple[Meter, ...]] = ContextVar("embedding_meters", default=())
_default_conn: list[psycopg.Connection] = []


def settings_for(model: str) -> LLMSettings:
    """The LLM settings of an `openai:MODEL` embedding model (the environment's base URL, cache mode...)."""
    base_url = env(ENV_BASE_URL) or None
    return LLMSettings.resolve(llm=model, base_url=base_url)


@contextmanager
def cache_in(conn: psycopg.Connection):
    """Embeddings requested inside the block are cached in `conn`'s database."""
    token = _cache_conn.set(conn)
    try:
        yield
    finally:
        _cache_conn.reset(token)


@contextmanager
def metered(model: str):
    """A Meter of the embedding requests made inside the block for `model` (nested meters each see them)."""
    settings = settings_for(model)
    meter = Meter(settings.provider, settings.model)
    token = _meters.set(_meters.get() + (meter,))
    try:
        yield meter
    finally:
        _meters.reset(token)


def _connection() -> psycopg.Connection:
    conn = _cache_conn.get()
    if conn is not None and not conn.closed:
        return conn
    if not _default_conn or _default_conn[0].closed:
        from stark_pg.db.connection import connect

        _default_conn[:] = [connect()]
    return _default_conn[0]


@dataclass
class _Usage:
    """What one request (or one text answered from the cache) adds to a meter (Meter.record's interface)."""

    cached: bool
    prompt_tokens: int | None
    completion_tokens: int | None
    seconds: float
    cost_usd: float | None


def dimension(model: str) -> int:
    """The length of the model's vectors: OpenAI's published one for its own API, else the probe's."""
    settings = settings_for(model)
    if not settings.base_url and settings.model in KNOWN_DIMENSIONS:
        return KNOWN_DIMENSIONS[settings.model]
    return int(encode([PROBE], model).shape[1])


def encode(texts: list[str], model: str, batch_size: int = 64) -> np.ndarray:
    """Unit-normalised float32 embeddings of `texts` by `model` (`openai:MODEL`), one row per text: from
    stark.llm_cache where it has them, the rest requested `batch_size` texts at a time and cached."""
    if batch_size < 1:
        raise LLMError(f"embedding batch size {batch_size}: must be at least 1")
    settings = settings_for(model)
    conn = _connection()
    keys = [request_hash(_request(settings, text), settings.endpoint) for text in texts]
    found: dict[str, np.ndarray] = {}
    if settings.cache != "refresh":
        uses = Counter(keys)
        for key, response, prompt_tokens, cost in sql().llm_cache_get_many(
                conn, provider=settings.provider, model=settings.model, request_hashes=sorted(uses)):
            found[key] = _decode(response)
            for meter in _meters.get():
                for _ in range(uses[key]):
                    meter.record(_Usage(True, prompt_tokens, 0, 0.0, 0.0 if cost is not None else None))
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key not in found:
            first.setdefault(key, i)
    missing = list(first.values())          # one request per distinct text
    if missing and settings.cache == "only":
        raise LLMCacheMiss(f"{settings.name}: {len(missing)} text(s) to embed are not in stark.llm_cache and "
                           f"cache=only forbids calls (run once with STARK_PG_LLM_CACHE=use to fill it)")
    cache = LLMCache(conn)
    batches = [missing[start:start + batch_size] for start in range(0, len(missing), batch_size)]
    try:
        # up to --workers requests at once; each batch's vectors land under its own texts' keys
        for batch, vectors in zip(batches, ordered_iter(
                lambda batch: _request_batch(settings, cache, [texts[i] for i in batch], [keys[i] for i in batch]),
                batches)):
            found.update(zip((keys[i] for i in batch), vectors))
    finally:
        cache.close()
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    out = np.stack([found[key] for key in keys]).astype(np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0)


def _request(settings: LLMSettings, text: str) -> dict:
    """The cache's view of embedding one text (the provider and model key the cache row besides)."""
    return {"kind": "embedding", "input": text}


def _request_batch(settings: LLMSettings, cache: LLMCache, texts: list[str], keys: list[str]) -> list[np.ndarray]:
    """One request for `texts`; each vector cached under its own text's key, with its share of the tokens."""
    import openai

    key = providers._api_key(settings, "OPENAI_API_KEY", "OPENAI_BASE_URL")
    client = providers._openai_client(providers.next_server(settings), key, settings.timeout, settings.max_retries)
    started = time.perf_counter()
    try:
        response = client.embeddings.create(model=settings.model, input=texts)
    except openai.APIError as exc:
        raise providers._call_failed(settings, exc, str(client.base_url)) from exc
    seconds = time.perf_counter() - started
    rows = sorted(response.data, key=lambda d: d.index)
    if len(rows) != len(texts):
        raise LLMCallFailed(f"{settings.name} at {client.base_url}: {len(rows)} embeddings for {len(texts)} texts")
    vectors = [np.asarray(row.embedding, dtype=np.float32) for row in rows]
    if len({v.shape for v in vectors}) != 1 or vectors[0].ndim != 1 or not vectors[0].size:
        raise LLMCallFailed(f"{settings.name} at {client.base_url}: returned vectors of differing or empty shapes")
    total = response.usage.prompt_tokens if response.usage else None
    shares = _shares(total, [len(t) for t in texts])
    cost = cost_usd(settings.provider, settings.model, total, 0)
    for meter in _meters.get():
        meter.record(_Usage(False, total, 0, seconds, cost))
    for text, text_key, vector, share in zip(texts, keys, vectors, shares):
        cache.put(settings.provider, settings.model, text_key,
                  _request(settings, text) | {"base_url": settings.base_url, "endpoint": settings.endpoint},
                  {"embedding_b64": base64.b64encode(vector.astype("<f4").tobytes()).decode(), "dim": int(vector.size)},
                  prompt_tokens=share, completion_tokens=0,
                  cost_usd=cost_usd(settings.provider, settings.model, share, 0),
                  seconds=seconds / len(texts))
    return vectors


def _shares(total: int | None, weights: list[int]) -> list[int | None]:
    """`total` tokens split over the texts in proportion to their lengths, summing to `total` exactly
    (largest remainders), so a replay from the cache counts the same tokens as the requests did."""
    if total is None:
        return [None] * len(weights)
    weights = [max(w, 1) for w in weights]
    exact = [total * w / sum(weights) for w in weights]
    shares = [int(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: shares[i] - exact[i])[:total - sum(shares)]:
        shares[i] += 1
    return shares


def _decode(response) -> np.ndarray:
    if isinstance(response, str):
        response = json.loads(response)
    return np.frombuffer(base64.b64decode(response["embedding_b64"]), dtype="<f4").astype(np.float32)

