"""Method `agent`: the retrieval program a trained agent kept for the question's category, run in
the sandbox (AvaTaR-style; the Agent Retriever of Zhao et al.).

`stark-pg train agent SKB` (stark_pg/train/agent.py) lets the LLM write SQL programs over the
toolkit (schema `agent`, sql/functions/agent.sql), scores them on training questions and keeps the
best per category. At query time: the question's category (the answer type the nearest training
questions vote for, categories.py), that category's program, its slots bound (slots.py; an LLM call
only when the program uses entity slots), validated again and run as the sandbox role
(sandbox.py). A program that fails or returns nothing makes the question fall back to `fallback`
(hybrid by default), and the trace says why.
"""

from __future__ import annotations

import re
import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import psycopg

from stark_pg.embed import canonical_name, skb_query_vector
from stark_pg.llm import client_from_options
from stark_pg.options import LLMOptions, OptionError
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, MissingIndex, Ranking, get_method
from stark_pg.retrieve.agent import sandbox
from stark_pg.retrieve.agent.categories import ANY, category_of, voted_type
from stark_pg.retrieve.agent.slots import SlotSource, bind_values, shown
from stark_pg.skb.catalog import require_skb


NEEDS = ("training", "llm")  # programs from `stark-pg train agent`; an LLM for entity slots


@dataclass
class Options(LLMOptions):
    run: int | None = None        # the training run whose programs to use (None: the SKB's newest finished run)
    fallback: str = "hybrid"      # method for questions whose program fails or returns nothing
    timeout_ms: int = 5000        # statement timeout of a program
    row_limit: int = 1000         # rows read from a program
    model: str | None = None      # embedding model of :query_vector and the category vote

    def check(self) -> None:
        super().check()
        if self.timeout_ms <= 0 or self.row_limit <= 0:
            raise OptionError("agent timeout_ms and row_limit must be positive")
        if self.fallback == "agent":
            raise OptionError("agent fallback must be another method")


@dataclass
class Outcome:
    """One program run for one question."""

    hits: list[Hit]
    values: dict
    sql: str | None
    error: str | None
    seconds: float


def execute_program(conn: psycopg.Connection, skb: str, skb_id: int, program: str | sandbox.Program, query: str,
                    vector: np.ndarray, answer_type: str | None, source: SlotSource, *, timeout_ms: int = 5000,
                    row_limit: int = 1000) -> Outcome:
    """Validate (unless given a validated Program), bind and run a program for one question; errors
    come back in `error`, never raised (except a failed LLM call, which the caller's evaluation records)."""
    started = time.perf_counter()
    if not isinstance(program, sandbox.Program):
        try:
            program = sandbox.validate(program)
        except sandbox.Rejected as exc:
            return Outcome([], {}, None, f"rejected: {exc}", time.perf_counter() - started)
    values = bind_values(conn, skb, skb_id, query, vector, answer_type, program, source)
    bound = sandbox.bind(program, values)
    try:
        rows = sandbox.run(conn, skb, bound, timeout_ms=timeout_ms, row_limit=row_limit)
    except sandbox.ProgramFailed as exc:
        return Outcome([], values, bound, f"failed: {exc}", time.perf_counter() - started)
    return Outcome([Hit(n, s) for n, s in rows], values, bound, None, time.perf_counter() - started)


def trained_programs(conn: psycopg.Connection, skb: str, skb_id: int,
                     run: int | None) -> tuple[int, dict, list[str]]:
    """(run id, {category: program row}, the splits it learned from) of the run, or of its newest
    finished one; clear errors."""
    run_id = run if run is not None else sql().latest_agent_run(conn, skb_id=skb_id)
    if run_id is None:
        raise MissingIndex(f"no trained agent for {skb!r}: run `stark-pg train agent {skb}` first")
    row = sql().agent_run_of(conn, skb_id=skb_id, run_id=run_id)
    if row is None:
        raise OptionError(f"no agent run {run_id} for {skb!r} (runs are made by `stark-pg train agent {skb}`)")
    settings = row[1] or {}
    splits = list(settings.get("splits") or [settings.get("split", "train")])   # runs before --splits: one split
    programs = {row[0]: row for row in sql().chosen_agent_programs(conn, run_id=run_id)}
    return run_id, programs, splits


def _short_vectors(sql_text: str) -> str:
    """The SQL for a reader: each vector literal cut to its first values (the trace keeps it whole)."""
    def cut(match: re.Match) -> str:
        values = match.group(1).split(",")
        return f"'[{','.join(values[:3])},... {len(values)} values]'" if len(values) > 3 else match.group(0)
    return re.sub(r"'\[([-0-9.e,]+)\]'", cut, sql_text)


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    o = options or Options()
    fallback = get_method(o.fallback)
    skb_id = require_skb(conn, skb)
    run_id, programs, splits = trained_programs(conn, skb, skb_id, o.run)
    model = canonical_name(o.model)
    vector = skb_query_vector(conn, skb, query, model)
    voted = voted_type(conn, skb, query, vector, model, splits=splits)   # categorised as in training
    category = category_of(voted, programs)
    trace: dict = {"method": "agent", "run": run_id, "voted_type": voted, "category": category}
    explain: dict = {"category": [f"{category} (the training questions nearest this one vote for {voted!r})"]}
    row = programs.get(category)
    error = None
    if row is None:
        error = f"no program for category {category!r} in run {run_id}"
    else:
        _, program_id, iteration, text, holdout = row
        try:                                   # validated once here; a rejection is reported by execute_program
            program: str | sandbox.Program = sandbox.validate(text)
        except sandbox.Rejected:
            program = text
        uses_entities = isinstance(program, sandbox.Program) and program.uses_entities
        client = (client_from_options(conn, llm=o.llm, base_url=o.base_url, cache=o.cache)
                  if uses_entities else None)  # no LLM (and no LLM setting) needed otherwise
        source = SlotSource(client, model)
        with client.metered() if client else nullcontext() as meter:
            outcome = execute_program(conn, skb, skb_id, program, query, vector,
                                      category if category != ANY else voted, source, timeout_ms=o.timeout_ms,
                                      row_limit=max(o.row_limit, k))
        trace.update({"program_id": program_id, "iteration": iteration, "slots": shown(outcome.values),
                      "sql": outcome.sql, "ms": round(outcome.seconds * 1000, 3)})
        if meter is not None:
            trace["llm"] = meter.as_dict()
        explain["program"] = [f"program {program_id} (iteration {iteration}; held-out MRR "
                              f"{(holdout or {}).get('mrr', float('nan')):.3f})", text]
        explain["slots"] = [f":{key} = {value!r}" for key, value in shown(outcome.values).items()]
        explain["SQL as run"] = [_short_vectors(outcome.sql) if outcome.sql else "(not run)"]
        error = outcome.error or (None if outcome.hits else "the program returned no rows")
        if error is None:
            trace["explain"] = explain
            return Ranking(outcome.hits[:k], trace)
    trace["fallback"] = f"{o.fallback}: {error}"
    explain["fallback"] = [trace["fallback"]]
    ranking = fallback.search(conn, skb, query, k, None)
    trace["fallback_trace"] = {key: value for key, value in ranking.trace.items() if key != "explain"}
    trace["explain"] = explain
    return Ranking(ranking.hits, trace)
