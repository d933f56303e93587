"""Settings that come from the environment: where the embedded server lives and which DSN to use."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

ENV_HOME = "STARK_PG_HOME"
ENV_DSN = "STARK_PG_DSN"


def home_dir() -> Path:
    """The directory holding stark-pg's own state (the embedded server's data directory among it)."""
    configured = os.environ.get(ENV_HOME)
    return Path(configured).expanduser() if configured else platformdirs.user_data_path("stark-pg")


def configured_dsn() -> str | None:
    """A DSN set through the environment, or None to use the embedded server."""
    return os.environ.get(ENV_DSN) or None
