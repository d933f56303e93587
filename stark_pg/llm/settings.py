"""Which LLM to use, from method options first and the environment second.

Options are what `-o llm=... -o base_url=... -o cache=...` set on a method; a None option falls back
to STARK_PG_LLM, STARK_PG_LLM_BASE_URL, STARK_PG_LLM_CACHE (and STARK_PG_LLM_TIMEOUT,
STARK_PG_LLM_RETRIES). API keys are not settings: the providers read them from their usual
variables when a call is actually needed, so a cache-only replay needs no key at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from stark_pg.config import (ENV_LLM, ENV_LLM_BASE_URL, ENV_LLM_CACHE, ENV_LLM_ENDPOINT, ENV_LLM_RETRIES,
                             ENV_LLM_TIMEOUT, env)
from stark_pg.llm.errors import LLMError

PROVIDERS = ("openai", "anthropic")
CACHE_MODES = ("use", "only", "refresh")
DEFAULT_TIMEOUT = 120.0      # seconds per attempt; a 1.5B model on 2 CPU cores needs up to a minute for long prompts
DEFAULT_RETRIES = 3          # the SDKs' own retries: exponential backoff from 0.5 s (max 8 s), Retry-After honoured


@dataclass(frozen=True)
class LLMSettings:
    provider: str                 # openai | anthropic
    model: str
    base_url: str | None = None   # an OpenAI-compatible (vLLM, Ollama, llama.cpp) or Anthropic-compatible server;
                                  # several, comma-separated, take the requests in turn (base_urls)
    cache: str = "use"            # use | only | refresh
    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_RETRIES
    endpoint: str = ""            # part of the cache key: who answers ("" for the provider's own API)

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"

    @property
    def base_urls(self) -> tuple[str, ...]:
        """The servers of a comma-separated base_url, in order: replicas of one model that share the
        requests round-robin (providers.py), and so share one cache identity (endpoint_identity)."""
        return split_urls(self.base_url)

    @classmethod
    def resolve(cls, llm: str | None = None, base_url: str | None = None, cache: str | None = None,
                timeout: float | None = None, max_retries: int | None = None) -> LLMSettings:
        """Settings from the given options, each None one taken from the environment."""
        spec = llm or env(ENV_LLM)
        if not spec:
            raise LLMError("no LLM chosen: pass -o llm=PROVIDER:MODEL (e.g. openai:gpt-4o-mini, "
                           "anthropic:claude-3-5-haiku-latest) or set STARK_PG_LLM")
        provider, sep, model = spec.partition(":")
        provider = provider.strip().lower()
        model = model.strip()
        source = "-o llm" if llm else "STARK_PG_LLM"
        if not sep or not model:
            raise LLMError(f"{source}={spec!r}: expected PROVIDER:MODEL, e.g. openai:gpt-4o-mini")
        if provider not in PROVIDERS:
            raise LLMError(f"{source}={spec!r}: unknown provider {provider!r} (known: {', '.join(PROVIDERS)}; "
                           f"an OpenAI-compatible server is openai:MODEL with -o base_url=...)")
        mode = (cache or env(ENV_LLM_CACHE) or "use").strip().lower()
        if mode not in CACHE_MODES:
            raise LLMError(f"-o cache={mode!r} (or STARK_PG_LLM_CACHE): expected one of {', '.join(CACHE_MODES)}")
        base_url = ",".join(split_urls(base_url or env(ENV_LLM_BASE_URL))) or None
        return cls(provider=provider, model=model, base_url=base_url,
                   endpoint=endpoint_identity(base_url),
                   cache=mode,
                   timeout=_positive(timeout, ENV_LLM_TIMEOUT, DEFAULT_TIMEOUT, float),
                   max_retries=int(_positive(max_retries, ENV_LLM_RETRIES, DEFAULT_RETRIES, int, zero=True)))


def endpoint_identity(base_url: str | None) -> str:
    """Who answers, for the cache key: STARK_PG_LLM_ENDPOINT if declared (so that a model moved to
    another host keeps its cache), else the server's address, else "" (the provider's own API). A
    local model's answers are then never replayed as the provider's, nor one server's as another's."""
    declared = env(ENV_LLM_ENDPOINT)
    if declared:
        return declared.strip()
    return ",".join(url.rstrip("/") for url in split_urls(base_url))


def split_urls(base_url: str | None) -> tuple[str, ...]:
    """The addresses in a comma-separated base URL (one for a plain URL, none for None)."""
    return tuple(u.strip() for u in (base_url or "").split(",") if u.strip())


def _positive(value, variable: str, default, kind, zero: bool = False):
    if value is None:
        raw = env(variable)
        if not raw:
            return default
        try:
            value = kind(raw)
        except ValueError:
            raise LLMError(f"{variable}={raw!r} is not a number") from None
    if value < 0 or (value == 0 and not zero):
        raise LLMError(f"{variable} (or its option) must be {'>= 0' if zero else '> 0'}, not {value}")
    return value
