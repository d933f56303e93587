"""One request to a provider through its official SDK, and its reply in a provider-neutral form.

Retries and timeouts are the SDKs' own: both `openai` and `anthropic` retry connection errors,
timeouts, 408, 409, 429 and 5xx with exponential backoff (0.5 s doubling to at most 8 s, with
jitter; a Retry-After header is honoured), `max_retries` times. What is left after them becomes an
LLMCallFailed naming the provider, the server and the cause.

Several servers (a comma-separated base URL: replicas of one model) take the requests in turn,
round-robin, each through its own client (`next_server`).

The SDKs are imported only when a call is made, so code that only replays the cache (or never
calls an LLM) does not load them and needs no API key.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from functools import lru_cache

from stark_pg.config import env
from stark_pg.llm.errors import LLMCallFailed, LLMError
from stark_pg.llm.settings import LLMSettings

NO_KEY = "no-key-needed"     # what a keyless OpenAI-compatible server (vLLM, Ollama, llama.cpp) is sent


@dataclass
class Reply:
    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    raw: dict                     # the SDK's response object as JSON, for the cache


def send(settings: LLMSettings, request: dict) -> Reply:
    """Send a canonical request ({"messages", "max_tokens", "temperature"}) and return the reply."""
    if settings.provider == "openai":
        return _send_openai(settings, request)
    if settings.provider == "anthropic":
        return _send_anthropic(settings, request)
    raise LLMError(f"unknown provider {settings.provider!r}")


def _api_key(settings: LLMSettings, variable: str, base_url_variable: str) -> str:
    key = env(variable)
    if key:
        return key
    if settings.base_url or env(base_url_variable):
        return NO_KEY
    raise LLMError(f"{variable} is not set: export it to call {settings.name}, or point -o base_url=... "
                   f"(STARK_PG_LLM_BASE_URL) at a compatible server")


_turns: dict[tuple[str, ...], itertools.cycle] = {}
_turns_guard = threading.Lock()


def next_server(settings: LLMSettings) -> str | None:
    """The server for the next request: the only one, or the next of several in turn (shared by all
    threads, so N workers spread evenly); None for the provider's own API (or its SDK variable)."""
    urls = settings.base_urls
    if len(urls) <= 1:
        return urls[0] if urls else None
    with _turns_guard:
        turn = _turns.setdefault(urls, itertools.cycle(urls))
        return next(turn)


def _send_openai(settings: LLMSettings, request: dict) -> Reply:
    import openai

    key = _api_key(settings, "OPENAI_API_KEY", "OPENAI_BASE_URL")
    client = _openai_client(next_server(settings), key, settings.timeout, settings.max_retries)
    try:
        response = client.chat.completions.create(model=settings.model, messages=request["messages"],
                                                  max_tokens=request["max_tokens"],
                                                  temperature=request["temperature"])
    except openai.APIError as exc:
        raise _call_failed(settings, exc, str(client.base_url)) from exc
    choice = response.choices[0] if response.choices else None
    usage = response.usage
    return Reply(text=(choice.message.content or "") if choice else "",
                 finish_reason=choice.finish_reason if choice else None,
                 prompt_tokens=usage.prompt_tokens if usage else None,
                 completion_tokens=usage.completion_tokens if usage else None,
                 raw=response.model_dump(mode="json", exclude_none=True))


def _send_anthropic(settings: LLMSettings, request: dict) -> Reply:
    import anthropic

    key = _api_key(settings, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
    client = _anthropic_client(next_server(settings), key, settings.timeout, settings.max_retries)
    system = "\n\n".join(m["content"] for m in request["messages"] if m["role"] == "system")
    turns = [m for m in request["messages"] if m["role"] != "system"]
    extra = {"system": system} if system else {}
    try:
        # the current Messages API (and so the SDK) has no temperature setting: it is not sent
        response = client.messages.create(model=settings.model, messages=turns, max_tokens=request["max_tokens"],
                                          **extra)
    except anthropic.APIError as exc:
        raise _call_failed(settings, exc, str(client.base_url)) from exc
    text = "".join(block.text for block in response.content if getattr(block, "type", None) == "text")
    usage = response.usage
    return Reply(text=text, finish_reason=response.stop_reason,
                 prompt_tokens=usage.input_tokens if usage else None,
                 completion_tokens=usage.output_tokens if usage else None,
                 raw=response.model_dump(mode="json", exclude_none=True))


def _call_failed(settings: LLMSettings, exc: Exception, server: str) -> LLMCallFailed:
    """The SDK's error as one line: what kind, where, and (for HTTP errors) the status and message."""
    kind = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if "Timeout" in kind:
        detail = f"timed out after {settings.timeout:g} s per attempt"
    elif status is not None:
        detail = f"HTTP {status}: {getattr(exc, 'message', exc)}"
    else:
        detail = f"{exc}"
    return LLMCallFailed(f"{settings.name} at {server}: {detail} ({kind}, after up to {settings.max_retries} "
                         f"retries)")


@lru_cache(maxsize=32)
def _openai_client(base_url: str | None, api_key: str, timeout: float, max_retries: int):
    """One SDK client per server and settings, reused so its HTTP connections stay open between calls."""
    import openai

    return openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries)


@lru_cache(maxsize=32)
def _anthropic_client(base_url: str | None, api_key: str, timeout: float, max_retries: int):
    import anthropic

    return anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries)
