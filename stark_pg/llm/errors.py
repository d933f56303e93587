"""What can go wrong in an LLM step, as exceptions a method lets through to the evaluation runner.

The runner records any exception as a failed query with its message, so each message says what
failed and what to change (an option, a variable), never just "error".
"""

from __future__ import annotations


class LLMError(RuntimeError):
    """An LLM step cannot run: bad settings, a missing key, or one of the failures below."""


class LLMCallFailed(LLMError):
    """The provider did not answer: timeout, connection error, or an HTTP error left after the retries."""


class LLMCacheMiss(LLMError):
    """cache=only and the request is not in stark.llm_cache: no call was made."""


class LLMInvalidOutput(LLMError):
    """The reply did not fit the expected schema, neither at first nor after one repair request."""

    def __init__(self, message: str, *, text: str = "", errors: list[str] | None = None):
        super().__init__(message)
        self.text = text                  # the last reply received
        self.errors = errors or []        # the validation error of each attempt
