"""LLM totals of an evaluation run, for its summary: calls, cache hits, tokens, seconds, cost.

Added up in SQL from the `llm` entry each LLM method puts in its query traces (a Meter's as_dict()).
"""

from __future__ import annotations

import psycopg

from stark_pg.resources import queries as sql


def run_llm_usage(conn: psycopg.Connection, skb_id: int, run_id: int) -> dict | None:
    """The run's LLM totals, or None when no query of the run used an LLM."""
    row = sql().run_llm_usage(conn, skb_id=skb_id, run_id=run_id)
    queries, with_llm, calls, hits, prompt, completion, seconds, cost = row
    if not with_llm:
        return None
    return {"queries_with_llm": with_llm, "calls": calls, "cache_hits": hits, "prompt_tokens": prompt,
            "completion_tokens": completion, "seconds": round(seconds, 3),
            "seconds_per_query": round(seconds / queries, 3) if queries else 0.0,
            "calls_per_query": round(calls / queries, 3) if queries else 0.0,
            "cost_usd": None if cost is None else round(cost, 6)}
