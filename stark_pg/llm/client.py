"""LLMClient: chat with a provider through stark.llm_cache, with meters and structured replies.

Every request is reduced to a canonical JSON (messages, max_tokens, temperature) whose sha256,
with the provider and model, keys the cache. Cache modes: `use` answers from the cache when it
can and fills it otherwise, `only` never calls (a miss raises LLMCacheMiss: replays that must not
spend), `refresh` always calls and overwrites.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import psycopg
from pydantic import BaseModel

from stark_pg.llm import providers
from stark_pg.llm.cache import LLMCache, request_hash
from stark_pg.llm.errors import LLMCacheMiss, LLMError, LLMInvalidOutput
from stark_pg.llm.meter import Meter
from stark_pg.llm.prices import cost_usd, price
from stark_pg.llm.settings import LLMSettings
from stark_pg.llm.structured import ReplyError, parse_reply, repair_messages

ROLES = ("system", "user", "assistant")


@dataclass
class Completion:
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    seconds: float                 # wall time of the call, retries included; 0 for a cache hit
    cached: bool
    cost_usd: float | None         # spent by this call: 0 for a cache hit; None if the model's price is unknown
    finish_reason: str | None = None


class LLMClient:
    def __init__(self, settings: LLMSettings, cache: LLMCache):
        self.settings = settings
        self.cache = cache

    def chat(self, messages: list[dict], max_tokens: int = 512, temperature: float = 0.0) -> Completion:
        """One reply to `messages` ([{"role": "system"|"user"|"assistant", "content": str}, ...])."""
        request = canonical_request(messages, max_tokens, temperature)
        settings = self.settings
        key = request_hash(request, settings.endpoint)
        with _single_flight((settings.provider, settings.model, key)):
            completion = self._answer(request, key)
        for client, meter in _meters.get():
            if client is self:
                meter.record(completion)
        return completion

    def _answer(self, request: dict, key: str) -> Completion:
        """From the cache, else from the model (and then cached); called with the key's lock held."""
        settings = self.settings
        completion = None
        if settings.cache != "refresh":
            hit = self.cache.get(settings.provider, settings.model, key)
            if hit is not None:
                completion = Completion(text=hit.response.get("text", ""), prompt_tokens=hit.prompt_tokens,
                                        completion_tokens=hit.completion_tokens, seconds=0.0, cached=True,
                                        cost_usd=0.0 if price(settings.provider, settings.model) else None,
                                        finish_reason=hit.response.get("finish_reason"))
        if completion is None:
            if settings.cache == "only":
                raise LLMCacheMiss(f"{settings.name}: request {key[:12]} is not in stark.llm_cache and cache=only "
                                   f"forbids calls (run once with -o cache=use to fill it)")
            completion = self._call(request, key)
        return completion

    def _call(self, request: dict, key: str) -> Completion:
        settings = self.settings
        started = time.perf_counter()
        reply = providers.send(settings, request)
        seconds = time.perf_counter() - started
        cost = cost_usd(settings.provider, settings.model, reply.prompt_tokens, reply.completion_tokens)
        self.cache.put(settings.provider, settings.model, key, request | {"base_url": settings.base_url, "endpoint": settings.endpoint},
                       {"text": reply.text, "finish_reason": reply.finish_reason, "raw": reply.raw},
                       prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens, cost_usd=cost,
                       seconds=seconds)
        return Completion(text=reply.text, prompt_tokens=reply.prompt_tokens,
                          completion_tokens=reply.completion_tokens, seconds=seconds, cached=False, cost_usd=cost,
                          finish_reason=reply.finish_reason)

    def chat_json(self, messages: list[dict], model: type[BaseModel], max_tokens: int = 512,
                  temperature: float = 0.0) -> tuple[BaseModel, list[Completion]]:
        """The reply parsed and validated as `model`; one repair request on failure, then LLMInvalidOutput.

        The prompt should already ask for JSON of that shape; the repair request repeats the schema
        with the error. Both requests are cached like any other, so a replay repairs identically.
        """
        first = self.chat(messages, max_tokens=max_tokens, temperature=temperature)
        try:
            return parse_reply(first.text, model), [first]
        except ReplyError as exc:
            first_error = str(exc)
        second = self.chat(repair_messages(messages, first.text, first_error, model), max_tokens=max_tokens,
                           temperature=temperature)
        try:
            return parse_reply(second.text, model), [first, second]
        except ReplyError as exc:
            raise LLMInvalidOutput(f"{self.settings.name}: reply does not fit {model.__name__} after one repair: "
                                   f"{exc} (reply: {_clip(second.text)!r})",
                                   text=second.text, errors=[first_error, str(exc)]) from None

    @contextmanager
    def metered(self):
        """Count the calls made inside the block (nested meters each see them). The meters live in the
        context, not on the client: workers that share a client (stark_pg.llm.concurrency copies the
        context into each) count into the meters of whoever started them, never into each other's."""
        meter = Meter(self.settings.provider, self.settings.model)
        token = _meters.set(_meters.get() + ((self, meter),))
        try:
            yield meter
        finally:
            _meters.reset(token)


_meters: ContextVar[tuple] = ContextVar("llm_meters", default=())    # ((client, Meter), ...) in force here
_flights: dict[tuple, list] = {}        # key -> [lock, holders]
_flights_guard = threading.Lock()


@contextmanager
def _single_flight(key: tuple):
    """Held by one thread per cache key at a time: two workers asking the same request at once make
    one call, and the second reads the first's answer from the cache (across processes the table's
    unique key keeps one row). Locks are dropped when no thread holds or waits for them."""
    with _flights_guard:
        entry = _flights.setdefault(key, [threading.Lock(), 0])
        entry[1] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _flights_guard:
            entry[1] -= 1
            if not entry[1]:
                del _flights[key]


def canonical_request(messages: list[dict], max_tokens: int, temperature: float) -> dict:
    """The request as sent and hashed; bad messages are an LLMError naming the one at fault."""
    if not isinstance(messages, list) or not messages:
        raise LLMError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    clean = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(
                message.get("content"), str):
            raise LLMError(f"messages[{i}] must be {{'role': one of {', '.join(ROLES)}, 'content': str}}, "
                           f"not {message!r}"[:300])
        clean.append({"role": message["role"], "content": message["content"]})
    if int(max_tokens) <= 0:
        raise LLMError(f"max_tokens must be positive, not {max_tokens}")
    return {"messages": clean, "max_tokens": int(max_tokens), "temperature": float(temperature)}


def client_from_options(conn: psycopg.Connection, llm: str | None = None, base_url: str | None = None,
                        cache: str | None = None, timeout: float | None = None) -> LLMClient:
    """A client for the LLM named by the options (None: the environment), caching in `conn`'s database."""
    return LLMClient(LLMSettings.resolve(llm=llm, base_url=base_url, cache=cache, timeout=timeout), LLMCache(conn))


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
