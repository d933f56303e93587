"""Usage of the LLM calls made inside a block, for a method's trace.

A method wraps its LLM step in `with client.metered() as meter:` and stores `meter.as_dict()` as
`trace["llm"]`; the evaluation summary adds these up over a run (stark_pg/llm/usage.py).
`calls` and `seconds` count requests that went to the provider; `cache_hits` those answered from
stark.llm_cache; tokens count both (the work the method asked for, the same on a replay);
`cost_usd` is what this block spent (0 on a full replay), None when the model's price is unknown.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from stark_pg.llm.prices import price


@dataclass(eq=False)           # meters are told apart by identity (nested meters may hold equal counts)
class Meter:
    provider: str
    model: str
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost_usd: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self):
        if self.cost_usd is None and price(self.provider, self.model) is not None:
            self.cost_usd = 0.0

    def record(self, completion) -> None:
        with self._lock:         # workers of one method record into the same meter
            self._record(completion)

    def _record(self, completion) -> None:
        if completion.cached:
            self.cache_hits += 1
        else:
            self.calls += 1
            self.seconds += completion.seconds
        self.prompt_tokens += completion.prompt_tokens or 0
        self.completion_tokens += completion.completion_tokens or 0
        if completion.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + completion.cost_usd

    def as_dict(self) -> dict:
        return {"provider": self.provider, "model": self.model, "calls": self.calls, "cache_hits": self.cache_hits,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "seconds": round(self.seconds, 3),
                "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6)}
