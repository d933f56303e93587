"""Settings that come from the environment: the one module that reads environment variables.

Every variable stark-pg reads is declared in VARIABLES with what it sets, and read through `env`,
which refuses an undeclared name. docs/configuration.md lists the same variables, and
tests/test_settings.py fails when the two differ or when a module reads the environment itself, so
a variable cannot be added, or dropped, without the documentation following.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

ENV_HOME = "STARK_PG_HOME"
ENV_DSN = "STARK_PG_DSN"
ENV_DEVICE = "STARK_PG_DEVICE"
ENV_MEMORY_MB = "STARK_PG_MEMORY_MB"
ENV_LLM = "STARK_PG_LLM"
ENV_LLM_BASE_URL = "STARK_PG_LLM_BASE_URL"
ENV_LLM_CACHE = "STARK_PG_LLM_CACHE"
ENV_LLM_ENDPOINT = "STARK_PG_LLM_ENDPOINT"
ENV_LLM_TIMEOUT = "STARK_PG_LLM_TIMEOUT"
ENV_LLM_RETRIES = "STARK_PG_LLM_RETRIES"
ENV_WORKERS = "STARK_PG_WORKERS"
ENV_EMBED_BASE_URL = "STARK_PG_EMBED_BASE_URL"
ENV_AGENT_PASSWORD = "STARK_PG_AGENT_PASSWORD"

VARIABLES: dict[str, str] = {
    ENV_HOME: "stark-pg's own state: the embedded server's data, downloads, trained models' files",
    ENV_DSN: "PostgreSQL to use instead of the embedded server (what --dsn sets)",
    ENV_DEVICE: "where embeddings are computed (what --device sets)",
    ENV_MEMORY_MB: "memory budget of a new embedded cluster",
    ENV_LLM: "the LLM of methods that call one, PROVIDER:MODEL (what -o llm sets)",
    ENV_LLM_BASE_URL: "an OpenAI- or Anthropic-compatible server for the LLM, or several, comma-separated (what -o base_url sets)",
    ENV_LLM_CACHE: "the LLM cache's mode: use, only or refresh (what -o cache sets)",
    ENV_LLM_ENDPOINT: "who answers, in the LLM cache's key (default: the server's address)",
    ENV_LLM_TIMEOUT: "seconds an LLM request may take",
    ENV_LLM_RETRIES: "retries of a failed LLM request",
    ENV_WORKERS: "requests to a served model (LLM or embedding API) at once (what --workers sets)",
    ENV_EMBED_BASE_URL: "an OpenAI-compatible server for `openai:MODEL` embedding models",
    ENV_AGENT_PASSWORD: "the agent role's password, for servers that do not trust local connections",
    "OPENAI_API_KEY": "the key of OpenAI's API (not needed with a base URL)",
    "OPENAI_BASE_URL": "an OpenAI-compatible server (the SDK's own variable; no key needed then)",
    "ANTHROPIC_API_KEY": "the key of Anthropic's API (not needed with a base URL)",
    "ANTHROPIC_BASE_URL": "an Anthropic-compatible server (the SDK's own variable; no key needed then)",
    "HF_HUB_OFFLINE": "Hugging Face models from the local cache only (stark-pg sets it to 1 unless set)",
}

LIBRARY_DEFAULTS = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error"}
"""What the embedding libraries are told unless the user says otherwise: no download at run time, no
tokenizer threads fighting the server for cores, no progress chatter."""


def env(name: str) -> str | None:
    """The variable's value (None when unset), for a declared variable only."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not declared in stark_pg.config.VARIABLES (and docs/configuration.md)")
    return os.environ.get(name)


def named_variable(name: str) -> str | None:
    """A variable the user names on the command line (`db embedding-endpoint --api-key-env VAR`): not a
    setting of stark-pg, so not declared; read here so that the environment is read in one module."""
    return os.environ.get(name)


def set_library_defaults() -> None:
    """LIBRARY_DEFAULTS into the environment, each unless already set; before sentence-transformers loads."""
    for name, value in LIBRARY_DEFAULTS.items():
        os.environ.setdefault(name, value)


def home_dir() -> Path:
    """The directory holding stark-pg's own state (the embedded server's data directory among it)."""
    configured = env(ENV_HOME)
    return Path(configured).expanduser() if configured else platformdirs.user_data_path("stark-pg")


def configured_dsn() -> str | None:
    """A DSN set through the environment, or None to use the embedded server."""
    return env(ENV_DSN) or None
