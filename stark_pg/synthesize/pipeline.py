"""Making a split of questions with known answers from an SKB alone (STaRK's section 3.3, step 1).

The plan: every template the SKB can instantiate gives its instantiations (templates.py); those whose
answer set is within the bounds are shuffled with the seed, and the templates take turns, so that a
split of N questions spreads over them. The plan depends on the graph, the templates, the bounds and
the seed only, never on the SKB's own questions, so a seed gives the same split on any copy of the SKB.

Relational-only mode asks no LLM: the question is the template's pattern with the anchors' names, the
answers are every candidate (STaRK's Prime questions about phenotypes are of this kind). LLM mode
plans (instantiation, gold answer) pairs instead: up to `golds` candidates of each instantiation with
enough text to read requirements from, the first gold of every instantiation before any second; the
LLM steps (textual.py) turn each pair into a question or drop it, saying why. Each item is committed
with its provenance (stark.synth_question) as it is made: a re-run continues the split, and with the
LLM cache it replays what was asked before for nothing.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import psycopg

from stark_pg.llm.concurrency import current, ordered_iter
from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.synthesize.templates import (SHIPPED, Template, TemplateError, TemplateSet, instantiations,
                                           load_templates, missing, shipped_path, vocabulary)

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
    mode: str = "relational"          # relational | llm
    golds: int = 2                    # llm: gold answers tried per instantiation
    min_doc_chars: int = 200          # llm: a gold's document must be at least this long
    doc_chars: int = 800              # llm: documents are cut to this many characters in prompts
    prefilter: int | None = None      # llm: verify at most this many candidates per item (None: all)

    def plan_key(self) -> dict:
        key = asdict(self)
        if self.mode == "relational":   # the LLM settings do not change a relational split
            for name in ("golds", "min_doc_chars", "doc_chars", "prefilter"):
                key.pop(name)
        elif self.prefilter is None:    # a split made before the prefilter existed continues without one
            key.pop("prefilter")
        return key


@dataclass
class Planned:
    seq: int
    template: Template
    anchors: list[int]
    candidates: list[int]
    gold: int | None = None           # llm mode: the candidate the requirements are read from


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


def choose_templates(skb_name: str, settings: SynthSettings) -> tuple[TemplateSet, bool]:
    """The templates (with their roles) to use and whether they are the user's own (checked strictly: a relation or type
    the SKB lacks is an error, where a shipped template is only reported as not instantiable)."""
    if settings.templates:
        return load_templates(Path(settings.templates)), True
    dataset = settings.dataset or next((d for d in SHIPPED if d in skb_name.lower()), None)
    if dataset is None:
        raise SynthesizeError(f"cannot tell which STaRK dataset {skb_name!r} is like: pass --dataset "
                              f"({', '.join(SHIPPED)}) or --templates FILE")
    if dataset not in SHIPPED:
        raise SynthesizeError(f"--dataset must be one of {', '.join(SHIPPED)}, not {dataset!r}")
    return load_templates(shipped_path(dataset)), False


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
            queues.append((template, [(anchors, candidates, None) for anchors, candidates in rows]))
    return in_turns(queues, limit)


def plan_with_golds(templates: list[Template], found: dict[str, list], lengths: dict[int, int],
                    settings: SynthSettings) -> list[Planned]:
    """LLM mode: (instantiation, gold) pairs. Each instantiation's candidates with at least
    `min_doc_chars` of document, shuffled with the seed, give up to `golds` golds; a template's pairs
    run through every instantiation's first gold before any second; templates take turns."""
    queues = []
    for template in templates:
        rows = list(found.get(template.id, []))
        random.Random(f"{settings.seed}:{template.id}").shuffle(rows)
        per_row = []
        for anchors, candidates in rows:
            readable = [c for c in candidates if lengths.get(c, 0) >= settings.min_doc_chars]
            random.Random(f"{settings.seed}:{template.id}:{anchors}").shuffle(readable)
            per_row.append((anchors, candidates, readable[:settings.golds]))
        pairs = [(anchors, candidates, golds[k]) for k in range(settings.golds)
                 for anchors, candidates, golds in per_row if k < len(golds)]
        if pairs:
            queues.append((template, pairs))
    return in_turns(queues, MAX_PER_SPLIT)


def in_turns(queues: list[tuple[Template, list]], limit: int) -> list[Planned]:
    """The templates' queues of (anchors, candidates, gold) taken in turns, in file order, until `limit`."""
    planned: list[Planned] = []
    depth = 0
    while len(planned) < limit and any(depth < len(items) for _, items in queues):
        for template, items in queues:
            if depth < len(items) and len(planned) < limit:
                anchors, candidates, gold = items[depth]
                planned.append(Planned(len(planned), template, anchors, candidates, gold))
        depth += 1
    return planned


def query_id(split: str, seq: int) -> int:
    """A synthesized question's id: apart from STaRK's (which are small), one block of a million per split."""
    return 1_000_000_000 + (zlib.crc32(split.encode()) % 1000) * MAX_PER_SPLIT + seq


def synthesize(conn: psycopg.Connection, skb_name: str, settings: SynthSettings, *, limit: int = 100,
               dry_run: bool = False, progress: Reporter | None = None, client=None) -> dict:
    """Make (or continue) the split up to `limit` questions; returns what was planned, made, dropped
    and skipped, the LLM requests and how long it took. LLM mode needs `client` (an LLMClient)."""
    from stark_pg.skb.catalog import require_skb

    progress = progress or NullReporter()
    if settings.mode not in ("relational", "llm"):
        raise SynthesizeError(f"mode must be relational or llm, not {settings.mode!r}")
    if not 1 <= limit <= MAX_PER_SPLIT:
        raise SynthesizeError(f"--limit must be from 1 to {MAX_PER_SPLIT}, not {limit}")
    if not 1 <= settings.min_answers <= settings.max_answers:
        raise SynthesizeError(f"--min-answers ({settings.min_answers}) must be at least 1 and at most "
                              f"--max-answers ({settings.max_answers})")
    if settings.mode == "llm":
        if not 1 <= settings.golds <= 100:
            raise SynthesizeError(f"--golds must be from 1 to 100, not {settings.golds}")
        if settings.doc_chars < 100 or settings.min_doc_chars < 0:
            raise SynthesizeError("--doc-chars must be at least 100 and --min-doc-chars at least 0")
        if client is None and not dry_run:
            raise SynthesizeError("questions with textual requirements need an LLM client")
    skb_id = require_skb(conn, skb_name)
    template_set, strict = choose_templates(skb_name, settings)
    templates = template_set.templates
    started = time.perf_counter()
    reports, found = survey(conn, skb_id, templates, settings, strict=strict)
    if settings.mode == "llm":
        nodes = sorted({c for rows in found.values() for _, candidates in rows for c in candidates})
        lengths = dict(sql().synth_document_lengths(conn, skb_id=skb_id, node_ids=nodes))
        planned = plan_with_golds(templates, found, lengths, settings)
    else:
        planned = plan(templates, found, settings, limit)
    report = {"skb": skb_name, "split": settings.split, "mode": settings.mode, "limit": limit,
              "planned": len(planned), "templates_used": sorted({p.template.id for p in planned}),
              "llm_calls": 0, "not_instantiable": {r.id: r.missing for r in reports if r.missing}}
    if dry_run:
        report.update(made=0, dropped={}, skipped=0, seconds=round(time.perf_counter() - started, 3))
        if settings.mode == "llm":
            report["estimate"] = estimate(conn, planned[:limit], client, settings.prefilter)
        return report
    stored = sql().synth_run_settings(conn, skb_id=skb_id, split=settings.split)
    if stored is not None and stored != settings.plan_key():
        raise SynthesizeError(f"split {settings.split!r} of {skb_name!r} was made with other settings ({stored}): "
                              "continue it with those, or name another --split")
    if stored is None:
        with conn.transaction():
            sql().synth_create_run(conn, skb_id=skb_id, split=settings.split, settings=json.dumps(settings.plan_key()))
    done = dict(sql().synth_done(conn, skb_id=skb_id, split=settings.split))
    kept = sum(1 for outcome in done.values() if outcome == "kept")
    made, dropped, calls, llm_seconds = 0, {}, 0, 0.0
    with progress.stage("questions", total=min(limit, len(planned))) as stage:
        stage.advance(min(kept, limit))
        for outcome, spent, seconds in _outcomes(conn, skb_id, settings, template_set, client,
                                                 [item for item in planned if item.seq not in done],
                                                 lambda: limit - kept):
            calls += spent
            llm_seconds += seconds
            if outcome == "kept":
                kept += 1
                made += 1
                stage.advance()
            else:
                dropped[outcome] = dropped.get(outcome, 0) + 1
    report.update(made=made, dropped=dropped, skipped=sum(1 for o in done.values() if o == "kept"),
                  llm_calls=calls, llm_seconds=round(llm_seconds, 1), questions=kept,
                  seconds=round(time.perf_counter() - started, 3))
    if kept < limit:
        report["short"] = (f"the plan ran out at {kept} question(s): widen --max-answers"
                           + (" or raise --golds" if settings.mode == "llm" else ""))
    return report


def estimate(conn: psycopg.Connection, planned: list[Planned], client, prefilter: int | None = None) -> dict:
    """How many LLM requests `planned` needs: at least 3 per item plus one per verified candidate (the
    first verifier), at most 5 plus two per verified candidate (a repair-free run); seconds from the
    model's mean so far."""
    def verified(p: Planned) -> int:
        return len(p.candidates) if prefilter is None else min(prefilter, len(p.candidates))
    low = sum(3 + verified(p) for p in planned)
    high = sum(5 + 2 * verified(p) for p in planned)
    mean = None
    if client is not None:
        mean = sql().synth_mean_call_seconds(conn, provider=client.settings.provider, model=client.settings.model)
    return {"items": len(planned), "calls_low": low, "calls_high": high,
            "seconds_per_call": None if mean is None else round(float(mean), 2),
            "hours_low": None if mean is None else round(low * float(mean) / 3600, 1),
            "hours_high": None if mean is None else round(high * float(mean) / 3600, 1)}


def _store_relational(conn: psycopg.Connection, skb_id: int, split: str, item: Planned) -> str:
    names = dict(sql().synth_node_names(conn, skb_id=skb_id, node_ids=item.anchors))
    anchor_names = [names[a] for a in item.anchors]
    body = item.template.question_for(dict(zip(item.template.anchors, anchor_names)))
    _store(conn, skb_id, split, item, anchor_names, body=body, answers=item.candidates, mode="relational",
           outcome="kept", gold=None, requirements=None, verdicts=None, model=None, prompt_version=None, calls=0,
           seconds=0.0)
    return "kept"


def _outcomes(conn: psycopg.Connection, skb_id: int, settings: SynthSettings, template_set, client,
              pending: list[Planned], wanted) -> Iterator[tuple[str, int, float]]:
    """Make and store the pending items in plan order until `wanted()` more are not needed: each
    item's outcome, LLM calls and seconds.

    LLM mode makes up to --workers items at once (stark_pg.llm.concurrency), never more than are
    still wanted (each keeps at most one question), so no item is made that a sequential run would
    not make; each is stored, in plan order, on this connection once made. The reads an item needs
    are made here, before the LLM steps, which then need no connection of their own."""
    from stark_pg.synthesize.textual import make_question

    if settings.mode != "llm":
        for item in pending:
            if wanted() <= 0:
                return
            yield _store_relational(conn, skb_id, settings.split, item), 0, 0.0
        return
    start = 0
    while start < len(pending) and wanted() > 0:
        window = pending[start:start + min(current(), wanted())]
        start += len(window)
        asked = [_prepare_llm(conn, skb_id, settings, template_set, item) for item in window]
        made = ordered_iter(lambda a: make_question(client, **a[1]), asked)
        for item, (anchor_names, _), one in zip(window, asked, made):
            yield _store_llm(conn, skb_id, settings, item, anchor_names, one, client), one.calls, one.seconds


def _prepare_llm(conn: psycopg.Connection, skb_id: int, settings: SynthSettings, template_set,
                 item: Planned) -> tuple[list[str], dict]:
    """An item's anchor names and make_question's arguments but the client (read from the database)."""
    names = dict(sql().synth_node_names(conn, skb_id=skb_id, node_ids=[*item.anchors, item.gold]))
    anchor_names = [names[a] for a in item.anchors]
    relational = item.template.question_for(dict(zip(item.template.anchors, anchor_names)))
    documents = {int(n): _clip(text or "", settings.doc_chars)
                 for n, text in sql().synth_documents(conn, skb_id=skb_id, node_ids=item.candidates)}
    roles = template_set.roles
    role = roles[random.Random(f"{settings.seed}:{item.template.id}:{item.anchors}:{item.gold}").randrange(len(roles))]
    return anchor_names, dict(role=role, answer_type=item.template.answer, relational=relational,
                              anchors=anchor_names, gold=item.gold, gold_name=names[item.gold], documents=documents,
                              candidates=item.candidates, negatives=template_set.negatives,
                              prefilter=settings.prefilter)


def _store_llm(conn: psycopg.Connection, skb_id: int, settings: SynthSettings, item: Planned,
               anchor_names: list[str], made, client) -> str:
    from stark_pg.synthesize.textual import PROMPT_VERSION

    _store(conn, skb_id, settings.split, item, anchor_names, body=made.question if made.outcome == "kept" else None,
           answers=made.answers, mode="llm", outcome=made.outcome, gold=item.gold,
           requirements=json.dumps(made.requirements), verdicts=json.dumps(made.verdicts),
           model=client.settings.name, prompt_version=PROMPT_VERSION, calls=made.requests, seconds=made.seconds)
    return made.outcome


def _store(conn: psycopg.Connection, skb_id: int, split: str, item: Planned, anchor_names: list[str], *,
           body: str | None, answers: list[int], **provenance) -> None:
    """One planned item and, if kept (a body), its question: in one transaction, so a crash leaves
    either both or neither."""
    qid = query_id(split, item.seq) if body is not None else None
    with conn.transaction():
        if body is not None:
            try:
                sql().synth_add_query(conn, skb_id=skb_id, query_id=qid, split=split, body=body, answer_ids=answers)
            except psycopg.errors.UniqueViolation:
                raise SynthesizeError(f"query id {qid} of split {split!r} is taken by another question of this "
                                      "SKB: delete that split's questions or name another --split") from None
        sql().synth_add_question(conn, skb_id=skb_id, split=split, seq=item.seq, query_id=qid,
                                 template=item.template.id, hops=item.template.hops, anchors=item.anchors,
                                 anchor_names=anchor_names, candidates=item.candidates, answers=answers,
                                 **provenance)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " ..."
