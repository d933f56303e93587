"""`stark-pg train agent`: the LLM writes retrieval programs per query category, they are scored on
training questions, the feedback goes back to the LLM, and each category keeps the program that
scores best on its held-out training questions (AvaTaR's optimisation loop, over SQL).

Per category (categories.py: the answer type the nearest training questions vote for):
  0. the seed program (toolkit.SEED: BM25 + dense + the category's type) is scored on the batch;
  1..n. the LLM gets the toolkit, example questions, the best program so far with its metrics and
     what it got wrong (questions whose answers it ranked low: what it ranked first, the answers
     with their type, rank and edges), plus the outcome of the previous attempt (its metrics, or why
     it was rejected or failed) and one direction to try; it writes a new program, which is validated
     and scored the same way. A program that failed or was rejected gets one repair: the next
     iteration shows it with the error and asks for it fixed, before the next direction;
  then every program that ran is scored on the held-out part of the category's training questions
  and the best there is `chosen` (ties: the earlier). `val` is never read.
Every program, its status, metrics and feedback is a row of stark.agent_program; the run's settings,
categories and LLM cost are a row of stark.agent_run. LLM replies are cached like every call, so an
interrupted run re-run with the same settings replays what it had and goes on.
"""

from __future__ import annotations

import re
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from stark_pg.embed import canonical_name, encode
from stark_pg.eval.metrics import evaluate, summarize
from stark_pg.eval.query_sets import learning_splits
from stark_pg.llm import client_from_options
from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.retrieve.agent import execute_program, sandbox
from stark_pg.retrieve.agent.categories import ANY, voted_type
from stark_pg.retrieve.agent.slots import SlotSource
from stark_pg.retrieve.agent.toolkit import SEED, describe, direction
from stark_pg.retrieve.expand import structure
from stark_pg.skb.catalog import require_skb

METRICS = ("hit@1", "hit@5", "recall@20", "mrr")
SYSTEM = "You write PostgreSQL retrieval programs. You reply with one SQL query in a ```sql block."

REVISE = """{toolkit}

Category of questions: {category}. Examples:
{examples}

The best program so far:
```sql
{program}
```
{feedback}
{last}
Write a new, different program for this category. This time: {direction}
Reply with only the SQL in a ```sql block."""

REPAIR = """{toolkit}

This program
```sql
{program}
```
was {status}: {error}
Write it again, fixed, so that it does the same thing and runs. Reply with only the SQL in a ```sql block."""


@dataclass
class AgentSettings:
    iterations: int = 3            # LLM-written programs per category (after the seed)
    batch: int = 10                # training questions each program is scored on
    holdout: float = 0.3           # share of a category's training questions held out to choose its program
    min_queries: int = 8           # types with fewer training questions share the category "any"
    splits: tuple[str, ...] = ("train",)   # learned from; held-out choice on real `train` ones when among them
    limit: int | None = None       # only the first N training questions (after shuffling with `seed`)
    failures: int = 3              # failed questions shown in feedback
    timeout_ms: int = 5000
    row_limit: int = 1000
    max_tokens: int = 700          # of a program reply
    model: str | None = None       # embedding model of :query_vector and the category vote
    entities: bool = True          # bind entity slots (an LLM call per training question that needs them)
    seed: int = 0
    llm: str | None = None
    base_url: str | None = None
    cache: str | None = None

    def check(self) -> None:
        for name in ("iterations", "batch", "min_queries", "timeout_ms", "row_limit", "max_tokens"):
            if getattr(self, name) < (0 if name == "iterations" else 1):
                raise ValueError(f"agent training: {name} must be positive, not {getattr(self, name)}")
        if not 0.0 < self.holdout < 1.0:
            raise ValueError(f"agent training: holdout must be between 0 and 1, not {self.holdout}")
        if self.limit is not None and self.limit <= 0:
            raise ValueError(f"agent training: limit must be positive, not {self.limit}")
        self.splits = tuple(learning_splits(list(self.splits)))     # never val or test; each once


@dataclass
class Question:
    query_id: int
    body: str
    answers: list[int]
    vector: np.ndarray
    voted: str | None
    answer_type: str | None      # the answers' majority type: how often the vote is right
    real: bool = True            # of the `train` split (or no `train` among the splits): may choose programs


@dataclass
class Score:
    """A program on a set of questions: mean metrics, per-question outcomes, the first error."""

    metrics: dict
    outcomes: list = field(default_factory=list)   # (question, hits, values)
    error: str | None = None
    rejected: bool = False

    @property
    def mrr(self) -> float:
        return self.metrics.get("mrr", 0.0)


@dataclass
class CategoryReport:
    category: str
    train: int
    holdout: int
    history: list[dict]            # per program: iteration, status, batch MRR, holdout MRR, chosen
    chosen_program: int | None
    type_agreement: float | None   # share of the category's questions whose answers have its type


@dataclass
class AgentReport:
    run_id: int
    categories: list[CategoryReport]
    llm: dict
    seconds: float


def extract_sql(text: str) -> str:
    """The program in a reply: the last ```sql block (or any ``` block), else the reply from its first
    SELECT/WITH on."""
    blocks = re.findall(r"```(?:sql|postgresql|postgres)?\s*\n(.*?)```", text, flags=re.S | re.I)
    if blocks:
        return blocks[-1].strip()
    match = re.search(r"\b(with|select)\b", text, flags=re.I)
    return text[match.start():].strip() if match else text.strip()


def train_agent(conn: psycopg.Connection, skb: str, settings: AgentSettings,
                progress: Reporter | None = None) -> AgentReport:
    settings.check()
    progress = progress or NullReporter()
    started = time.perf_counter()
    skb_id = require_skb(conn, skb)
    model = canonical_name(settings.model)
    questions = _questions(conn, skb, skb_id, settings, model, progress)
    groups = _categories(questions, settings.min_queries)
    # no LLM at all for a seed-only run (--iterations 0): the seed uses no entity slot
    client = (client_from_options(conn, llm=settings.llm, base_url=settings.base_url, cache=settings.cache)
              if settings.iterations else None)
    source = SlotSource(client if settings.entities else None, model)
    run_id = sql().create_agent_run(conn, skb_id=skb_id, settings=Jsonb(
        {k: v for k, v in asdict(settings).items() if k not in ("base_url",)}
        | {"llm_name": client.settings.name if client else None}))
    toolkit = describe(structure(conn, skb_id).text())
    reports = []
    meter = client.metered() if client else nullcontext(None)
    with meter as used:
        for category, members in groups.items():
            reports.append(_train_category(conn, skb, skb_id, run_id, category, members, settings, toolkit,
                                           source, client, progress))
    usage = used.as_dict() if used else {"calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                         "seconds": 0.0, "cost_usd": None}
    summary = {r.category: {"train": r.train, "holdout": r.holdout, "chosen_program": r.chosen_program,
                            "type_agreement": r.type_agreement} for r in reports}
    seconds = time.perf_counter() - started
    sql().finish_agent_run(conn, run_id=run_id, categories=Jsonb(summary), llm=Jsonb(usage), seconds=seconds)
    return AgentReport(run_id, reports, usage, seconds)


def _questions(conn, skb: str, skb_id: int, s: AgentSettings, model: str, progress: Reporter) -> list[Question]:
    rows, seen = [], set()
    for split in s.splits:
        for row in sql().train_queries_with_answers(conn, skb_id=skb_id, split=split):
            if row[2] and row[0] not in seen:
                seen.add(row[0])
                rows.append((*row, split))
    if not rows:
        raise ValueError(f"{skb!r} has no {','.join(s.splits)!r} questions with answers to train the agent on")
    order = np.random.default_rng(s.seed).permutation(len(rows))
    rows = [rows[i] for i in order][:s.limit or None]
    vectors = encode([r[1] for r in rows], model)
    # the programs are chosen on real questions when there are any (synthesized ones only help write them),
    # as train fusion's cross-validation scores real `train` questions only
    real_split = "train" if "train" in s.splits else None
    out = []
    with progress.stage("categories", total=len(rows)) as stage:
        for (query_id, body, answers, answer_type, split), vector in zip(rows, vectors):
            out.append(Question(int(query_id), body, [int(a) for a in answers], vector,
                                voted_type(conn, skb, body, vector, model, splits=s.splits), answer_type,
                                real=real_split is None or split == real_split))
            stage.advance()
    return out


def _categories(questions: list[Question], min_queries: int) -> dict[str, list[Question]]:
    """Questions by voted type; types with fewer than `min_queries` go to "any" (which is kept even if
    small, so every question has a program)."""
    by_type: dict[str, list[Question]] = {}
    for q in questions:
        by_type.setdefault(q.voted or ANY, []).append(q)
    groups: dict[str, list[Question]] = {}
    for kind, members in sorted(by_type.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        key = kind if len(members) >= min_queries and kind != ANY else ANY
        groups.setdefault(key, []).extend(members)
    return groups


def held_out(members: list[Question], share: float) -> tuple[list[Question], list[Question]]:
    """(held-out questions that choose the program, questions it is written on): the held-out share is
    taken from the real questions alone, so a synthesized question never chooses a program."""
    real = [q for q in members if q.real]
    n_hold = max(1, round(len(real) * share)) if len(real) > 1 else 0
    held = {q.query_id for q in real[:n_hold]}
    return real[:n_hold], [q for q in members if q.query_id not in held] or members


def _train_category(conn, skb: str, skb_id: int, run_id: int, category: str, members: list[Question],
                    s: AgentSettings, toolkit: str, source: SlotSource, client, progress: Reporter) -> CategoryReport:
    holdout, fit = held_out(members, s.holdout)
    batch = fit[:s.batch]
    answer_type = None if category == ANY else category
    examples = "\n".join(f"- {q.body}" for q in batch[:3])
    tried: list[tuple[int, int, str, Score]] = []       # (program_id, iteration, sql, score)
    best: tuple[int, str, Score, str] | None = None      # (program_id, sql, score, feedback)
    last = ""
    written: list[tuple[int, str]] = []
    repair: tuple[str, str, str] | None = None          # (program, status, error) to fix in the next iteration
    directions = 0                                      # directions asked so far
    with progress.stage(f"agent {category}"[:24], total=s.iterations + 1) as stage:
        for iteration in range(s.iterations + 1):
            if iteration == 0:
                text, author = SEED, "seed"
            else:
                if repair is not None:       # the last program failed or was rejected: one attempt to fix it
                    prompt = REPAIR.format(toolkit=toolkit, program=repair[0], status=repair[1], error=repair[2])
                else:
                    directions += 1
                    prompt = REVISE.format(toolkit=toolkit, category=_category_text(category), examples=examples,
                                           program=best[1], feedback=best[3], last=last,
                                           direction=direction(directions))
                reply = client.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                                    max_tokens=s.max_tokens)
                text, author = extract_sql(reply.text), "llm"
            repeated = next((i for i, t in written if _same(t, text)), None)
            written.append((iteration, text))
            if repeated is not None:
                score = Score({m: 0.0 for m in METRICS}, [], f"it is the program of iteration {repeated} again; "
                                                            "write a different one", rejected=True)
            else:
                score = _score(conn, skb, skb_id, text, batch, answer_type, source, s)
            status = "rejected" if score.rejected else ("failed" if score.error and not score.outcomes else "ok")
            feedback = _feedback(conn, skb_id, score, s.failures) if status == "ok" else None
            program_id = sql().insert_agent_program(
                conn, run_id=run_id, category=category, iteration=iteration, author=author, sql=text, status=status,
                error=score.error, batch_metrics=Jsonb(score.metrics) if status == "ok" else None, feedback=feedback)
            if status == "ok":
                tried.append((program_id, iteration, text, score))
                if best is None or score.mrr > best[2].mrr:
                    best = (program_id, text, score, feedback)
                last = (f"Your last program scored MRR {score.mrr:.3f} "
                        f"({'the best so far' if best[0] == program_id else 'worse than the best'}).")
            else:
                last = f"Your last program\n```sql\n{text}\n```\nwas {status}: {score.error}. Fix that."
            was_repair, repair = repair is not None, None
            if status != "ok" and author == "llm" and not was_repair and repeated is None:
                repair = (text, status, score.error)
            if best is None:               # even the seed failed: nothing to revise
                raise RuntimeError(f"the seed program failed on {skb!r}: {score.error}")
            stage.advance()
            stage.describe(f"iteration {iteration}, best MRR {best[2].mrr:.3f}")
    # choose on the held-out questions
    history = []
    chosen, chosen_mrr = None, -1.0
    for program_id, iteration, text, batch_score in tried:
        held = _score(conn, skb, skb_id, text, holdout, answer_type, source, s) if holdout else batch_score
        sql().set_agent_program_holdout(conn, program_id=program_id, holdout_metrics=Jsonb(held.metrics))
        history.append({"program_id": program_id, "iteration": iteration, "batch_mrr": round(batch_score.mrr, 4),
                        "holdout_mrr": round(held.mrr, 4)})
        if held.mrr > chosen_mrr:
            chosen, chosen_mrr = program_id, held.mrr
    if chosen is not None:
        sql().choose_agent_program(conn, program_id=chosen)
    for h in history:
        h["chosen"] = h["program_id"] == chosen
    agreement = None if category == ANY else round(sum(q.answer_type == category for q in members) / len(members), 4)
    return CategoryReport(category, len(fit), len(holdout), history, chosen, agreement)


def _same(a: str, b: str) -> bool:
    """Whether two programs are the same but for spacing, case and a final semicolon."""
    def norm(t: str) -> str:
        return " ".join(t.lower().replace(";", " ").split())
    return norm(a) == norm(b)


def _category_text(category: str) -> str:
    return "any type of answer" if category == ANY else f"questions whose answers are {category} nodes"


def _score(conn, skb: str, skb_id: int, text: str, questions: list[Question], answer_type: str | None,
           source: SlotSource, s: AgentSettings) -> Score:
    try:                                       # once per program, not once per question
        program = sandbox.validate(text)
    except sandbox.Rejected as exc:
        return Score({m: 0.0 for m in METRICS}, [], str(exc), rejected=True)
    if program.uses_entities:
        source.prefetch(conn, skb_id, [q.body for q in questions])     # the LLM's parses, --workers at once
    per_query, outcomes, error = [], [], None
    for q in questions:
        outcome = execute_program(conn, skb, skb_id, program, q.body, q.vector, answer_type or q.voted, source,
                                  timeout_ms=s.timeout_ms, row_limit=s.row_limit)
        if outcome.error:
            error = error or outcome.error.removeprefix("failed: ")
            per_query.append({m: 0.0 for m in METRICS})
            continue
        ranked = [h.node_id for h in outcome.hits]
        per_query.append(evaluate(ranked, q.answers, METRICS))
        outcomes.append((q, ranked, outcome.values))
    metrics = summarize(per_query) if per_query else {m: 0.0 for m in METRICS}
    return Score({m: round(float(metrics[m]), 4) for m in METRICS}, outcomes, error)


def _feedback(conn, skb_id: int, score: Score, shown: int) -> str:
    """Metrics, then the questions the program did worst on: what it ranked first, where the answers
    were, and a few edges of each answer (what a program could have followed to them)."""
    m = score.metrics
    lines = [f"On {len(score.outcomes)} training questions it scored MRR {m['mrr']:.3f}, Hit@1 {m['hit@1']:.3f}, "
             f"Recall@20 {m['recall@20']:.3f}."]
    if score.error:
        lines.append(f"On some questions it failed: {score.error}")
    empty = sum(1 for _, ranked, _ in score.outcomes if not ranked)
    if empty:
        lines.append(f"For {empty} of {len(score.outcomes)} questions it returned nothing: keep the BM25 and dense "
                     "candidates too (below the others), so that every question gets a ranking.")
    worst = sorted(score.outcomes, key=lambda o: _first_rank(o[1], o[0].answers))[::-1][:shown]
    worst = [o for o in worst if _first_rank(o[1], o[0].answers) > 1]
    if not worst:
        return "\n".join(lines)
    ids = sorted({n for q, ranked, _ in worst for n in ranked[:3] + q.answers[:2]})
    info = {int(r[0]): r for r in sql().agent_answer_context(conn, skb_id=skb_id, node_ids=ids)}
    lines.append("Questions it ranked badly:")
    for q, ranked, values in worst:
        lines.append(f'- "{q.body}"')
        bound = {k: v for k, v in values.items() if k.startswith("entity_") and v is not None}
        if bound:
            lines.append("  slots: " + ", ".join(f":{k}={v!r}" for k, v in bound.items()))
        lines.append("  ranked first: " + "; ".join(_node(info, n) for n in ranked[:3]) if ranked else
                     "  it returned nothing")
        for a in q.answers[:2]:
            rank = ranked.index(a) + 1 if a in ranked else None
            edges = info[a][3] if a in info and info[a][3] else []
            lines.append(f"  answer {_node(info, a)}: " + (f"rank {rank}" if rank else "not returned")
                         + (f"; its edges: {', '.join(edges)}" if edges else ""))
    return "\n".join(lines)


def _first_rank(ranked: list[int], answers: list[int]) -> int:
    positions = [i + 1 for i, n in enumerate(ranked) if n in set(answers)]
    return positions[0] if positions else 10 ** 6


def _node(info: dict, node_id: int) -> str:
    row = info.get(node_id)
    return f"{row[2]} ({row[1]})" if row else str(node_id)
