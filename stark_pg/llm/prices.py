"""List prices of a few well-known models, to put a cost on each call where it is known.

US dollars per million input and output tokens, from the providers' public price pages (standard
tier, no batch or prompt-caching discounts). A model is matched by the longest listed name its own
name starts with ("gpt-4o-2024-08-06" -> gpt-4o, "gpt-4o-mini" -> gpt-4o-mini); anything else,
including every model behind a custom base URL with another name, has no price: cost None.
"""

from __future__ import annotations

PER_MILLION_TOKENS: dict[tuple[str, str], tuple[float, float]] = {
    ("openai", "gpt-4o"): (2.50, 10.00),
    ("openai", "gpt-4o-mini"): (0.15, 0.60),
    ("openai", "gpt-4.1"): (2.00, 8.00),
    ("openai", "gpt-4.1-mini"): (0.40, 1.60),
    ("openai", "gpt-4.1-nano"): (0.10, 0.40),
    ("openai", "gpt-4-turbo"): (10.00, 30.00),
    ("openai", "gpt-3.5-turbo"): (0.50, 1.50),
    ("openai", "gpt-5"): (1.25, 10.00),
    ("openai", "gpt-5-mini"): (0.25, 2.00),
    ("openai", "gpt-5-nano"): (0.05, 0.40),
    ("openai", "text-embedding-3-small"): (0.02, 0.00),     # embeddings: input tokens only
    ("openai", "text-embedding-3-large"): (0.13, 0.00),
    ("openai", "text-embedding-ada-002"): (0.10, 0.00),
    ("anthropic", "claude-3-5-haiku"): (0.80, 4.00),
    ("anthropic", "claude-3-haiku"): (0.25, 1.25),
    ("anthropic", "claude-3-5-sonnet"): (3.00, 15.00),
    ("anthropic", "claude-3-7-sonnet"): (3.00, 15.00),
    ("anthropic", "claude-sonnet-4"): (3.00, 15.00),
    ("anthropic", "claude-3-opus"): (15.00, 75.00),
    ("anthropic", "claude-opus-4"): (15.00, 75.00),
    ("anthropic", "claude-opus-4-5"): (5.00, 25.00),
    ("anthropic", "claude-haiku-4-5"): (1.00, 5.00),
    ("anthropic", "claude-sonnet-4-5"): (3.00, 15.00),
}


def price(provider: str, model: str) -> tuple[float, float] | None:
    """(input, output) dollars per million tokens, or None when the model is not listed."""
    matches = [name for (p, name) in PER_MILLION_TOKENS if p == provider and model.startswith(name)]
    if not matches:
        return None
    return PER_MILLION_TOKENS[(provider, max(matches, key=len))]


def cost_usd(provider: str, model: str, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
    rates = price(provider, model)
    if rates is None or prompt_tokens is None or completion_tokens is None:
        return None
    return (prompt_tokens * rates[0] + completion_tokens * rates[1]) / 1_000_000
