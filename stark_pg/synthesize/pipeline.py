"""Making a split of questions with known answers from an SKB alone (STaRK's section 3.3, step 1).

The plan: every template the SKB can instantiate gives its instantiations (templates.py); those whose
answer set is within the bounds are shuffled with the seed, and the templates take turns, so that a
split of N questions spreads over them. The plan depends on the graph, the templates, the bounds and
the seed only, never on the SKB's own questions, so a seed gives the same split on any copy of the SKB.

Relational-only mode asks no LLM: the question is the template's pattern with the anchors' names, the
answers are every candidate (STaRK's Prime questions about phenotypes are of this kind). Each question
is committed with its provenance (stark.synth_question) as it is made: a re-run continues the split.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg

from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.synthesize.templates import (Template, TemplateError, instantiations, load_templates, missing,
                                           shipped_path, vocabulary, SHIPPED)

MAX_PER_SPLIT = 1_000_000


@dataclass
class SynthSettings:
    """What a split's plan depends on (stored with the split; a re-run must match)."""
    split: str = "synthetic"
    seed: int = 0
    min_answers: int = 1
    max_answers: int = 10
    templates: str | None = None      # a file of the user's; None: the shipped file of the SKB's dataset
    dataset: str | None = None        # prime, mag, amazon: which shipped file (None: guessed from the name)
    mode: str = "relational"

    def plan_key(self) -> dict:
        return {k: v for k, v in asdict(self).items()}


@dataclass
class Planned:
    seq: int
    template: Template
    anchors: list[int]
    candidates: list[int]


@dataclass
class TemplateReport:
    id: str
    hops: int
    instantiations: int = 0
    within_bounds: int = 0
    sizes: list[int] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


class SynthesizeError(ValueError):
    """Settings or a split that cannot be synthesized; the message says what to change."""


def choose_templates(skb_name: str, settings: SynthSettings) -> tuple[list[Template], bool]:
    """The templates to use and whether they are the user's own (checked strictly: a relation or type
    the SKB lacks is an error, where a shipped template is only reported as not instantiable)."""
    if settings.templates:
        return load_templates(Path(settings.templates)).templates, True
    dataset = settings.dataset or next((d for d in SHIPPED if d in skb_name.lower()), None)
    if dataset is None:
        raise SynthesizeError(f"cannot tell which STaRK dataset {skb_name!r} is like: pass --dataset "
                              f"({', '.join(SHIPPED)}) or --templates FILE")
    if dataset not in SHIPPED:
        raise SynthesizeError(f"--dataset must be one of {', '.join(SHIPPED)}, not {dataset!r}")
    return load_templates(shipped_path(dataset)).templates, False


def survey(conn: psycopg.Connection, skb_id: int, templates: list[Template], settings: SynthSettings,
           strict: bool = False) -> tuple[list[TemplateReport], dict[str, list]]:
    """Every template's instantiations on the SKB (or what the SKB lacks for it)."""
    relations, types = vocabulary(conn, skb_id)
    reports, found = [], {}
    for template in templates:
        report = TemplateReport(template.id, template.hops, missing=missing(template, relations, types))
        if report.missing:
            if strict:
                raise TemplateError(f"{template.source}: template {template.id!r}: the SKB has no "
                                    + ", no ".join(report.missing))
            reports.append(report)
            continue
        rows = instantiations(conn, skb_id, template)
        report.instantiations = len(rows)
        report.sizes = sorted(len(answers) for _, answers in rows)
        kept = [r for r in rows if settings.min_answers <= len(r[1]) <= settings.max_answers]
        report.within_bounds = len(kept)
        found[template.id] = kept
        reports.append(report)
    return reports, found


def plan(templates: list[Template], found: dict[str, list], settings: SynthSettings, limit: int) -> list[Planned]:
    """Seeded: each template's instantiations shuffled with the seed and the template's id, then taken
    in turns across templates (in file order) until `limit`."""
    queues = []
    for template in templates:
        rows = list(found.get(template.id, []))
        random.Random(f"{settings.seed}:{template.id}").shuffle(rows)
        if rows:
            queues.append((template, rows))
    planned: list[Planned] = []
    depth = 0
    while len(planned) < limit and any(depth < len(rows) for _, rows in queues):
        for template, rows in queues:
            if depth < len(rows) and len(planned) < limit:
                anchors, candidates = rows[depth]
                planned.append(Planned(len(planned), template, anchors, candidates))
        depth += 1
    return planned


def query_id(split: str, seq: int) -> int:
    """A synthesized question's id: apart from STaRK's (which are small), one block of a million per split."""
    return 1_000_000_000 + (zlib.crc32(split.encode()) % 1000) * MAX_PER_SPLIT + seq


def synthesize(conn: psycopg.Connection, skb_name: str, settings: SynthSettings, *, limit: int = 100,
               dry_run: bool = False, progress: Reporter | None = None) -> dict:
    """Make (or continue) the split; returns what was planned, made, skipped and how long it took."""
    from stark_pg.skb.catalog import require_skb

    progress = progress or NullReporter()
    if settings.mode != "relational":
        raise SynthesizeError("only --relational-only is built yet: questions with textual requirements "
                              "(an LLM) are the pipeline's next step")
    if not 1 <= limit <= MAX_PER_SPLIT:
        raise SynthesizeError(f"--limit must be from 1 to {MAX_PER_SPLIT}, not {limit}")
    if not 1 <= settings.min_answers <= settings.max_answers:
        raise SynthesizeError(f"--min-answers ({settings.min_answers}) must be at least 1 and at most "
                              f"--max-answers ({settings.max_answers})")
    skb_id = require_skb(conn, skb_name)
    templates, strict = choose_templates(skb_name, settings)
    started = time.perf_counter()
    reports, found = survey(conn, skb_id, templates, settings, strict=strict)
    planned = plan(templates, found, settings, limit)
    report = {"skb": skb_name, "split": settings.split, "mode": settings.mode, "planned": len(planned),
              "templates_used": sorted({p.template.id for p in planned}), "llm_calls": 0,
              "not_instantiable": {r.id: r.missing for r in reports if r.missing}}
    if dry_run:
        report.update(made=0, skipped=0, seconds=round(time.perf_counter() - started, 3))
        return report
    stored = sql().synth_run_settings(conn, skb_id=skb_id, split=settings.split)
    if stored is not None and stored != settings.plan_key():
        raise SynthesizeError(f"split {settings.split!r} of {skb_name!r} was made with other settings ({stored}): "
                              "continue it with those, or name another --split")
    if stored is None:
        with conn.transaction():
            sql().synth_create_run(conn, skb_id=skb_id, split=settings.split, settings=json.dumps(settings.plan_key()))
    done = {row[0] for row in sql().synth_done(conn, skb_id=skb_id, split=settings.split)}
    made = 0
    with progress.stage("questions", total=len(planned)) as stage:
        stage.advance(len(done & {p.seq for p in planned}))
        for item in planned:
            if item.seq in done:
                continue
            _store_relational(conn, skb_id, settings.split, item)
            made += 1
            stage.advance()
    report.update(made=made, skipped=len(planned) - made, seconds=round(time.perf_counter() - started, 3))
    return report


def _store_relational(conn: psycopg.Connection, skb_id: int, split: str, item: Planned) -> None:
    names = dict(sql().synth_node_names(conn, skb_id=skb_id, node_ids=item.anchors))
    anchor_names = [names[a] for a in item.anchors]
    body = item.template.question_for(dict(zip(item.template.anchors, anchor_names)))
    qid = query_id(split, item.seq)
    with conn.transaction():
        try:
            sql().synth_add_query(conn, skb_id=skb_id, query_id=qid, split=split, body=body,
                                  answer_ids=item.candidates)
        except psycopg.errors.UniqueViolation:
            raise SynthesizeError(f"query id {qid} of split {split!r} is taken by another question of this SKB: "
                                  "delete that split's questions or name another --split") from None
        sql().synth_add_question(conn, skb_id=skb_id, split=split, seq=item.seq, query_id=qid,
                                 template=item.template.id, hops=item.template.hops, anchors=item.anchors,
                                 anchor_names=anchor_names, candidates=item.candidates, answers=item.candidates,
                                 mode="relational", gold=None, requirements=None, verdicts=None, model=None,
                                 prompt_version=None, calls=0, seconds=0.0)
