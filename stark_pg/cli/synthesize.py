"""`stark-pg synthesize ...`: STaRK-style questions with known answers, made from a loaded SKB."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from typer.core import TyperGroup

from stark_pg.cli.common import (WORKERS_HELP, concurrent_calls, fail, out, print_json, reporter, state, writable_dir,
                                 writable_file)


class _MakeByDefault(TyperGroup):
    """`stark-pg synthesize SKB ...` is `stark-pg synthesize make SKB ...`: a first word that is no
    subcommand is the SKB."""

    default_command = "make"

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_MakeByDefault, no_args_is_help=True,
                  help="STaRK's benchmark construction on a loaded SKB: questions with known answers from relation "
                       "templates. `stark-pg synthesize SKB` makes a split (the same as `synthesize make SKB`).")

TEMPLATES_HELP = ("A YAML file of your own relation templates (the format of stark_pg/synthesize/templates/prime.yaml); "
                  "default: STaRK's for the SKB's dataset.")
DATASET_HELP = "Which STaRK dataset's templates: prime, mag or amazon (default: guessed from the SKB's name)."


@app.command()
def make(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The loaded SKB."),
    split: str = typer.Option("synthetic", "--split", help="The query split the questions become."),
    limit: int = typer.Option(100, "--limit", help="Questions to make (the split's size; a re-run continues it)."),
    seed: int = typer.Option(0, "--seed", help="Seeds the plan: which instantiations, in which order."),
    relational_only: bool = typer.Option(False, "--relational-only",
                                         help="No LLM: the template's question with the anchors' names, every "
                                              "candidate an answer (cheap: thousands of questions a minute)."),
    templates: Path = typer.Option(None, "--templates", help=TEMPLATES_HELP),
    dataset: str = typer.Option(None, "--dataset", help=DATASET_HELP),
    min_answers: int = typer.Option(1, "--min-answers", help="Skip instantiations with fewer candidate answers."),
    max_answers: int = typer.Option(10, "--max-answers", help="Skip instantiations with more candidate answers "
                                                              "(docs/synthesize.md says why 10)."),
    golds: int = typer.Option(2, "--golds", help="LLM mode: gold answers tried per instantiation (each gives its "
                                                 "own question)."),
    min_doc_chars: int = typer.Option(200, "--min-doc-chars", help="LLM mode: a gold's document needs at least this "
                                                                  "many characters to read requirements from."),
    doc_chars: int = typer.Option(800, "--doc-chars", help="LLM mode: documents are cut to this length in prompts."),
    prefilter: int = typer.Option(None, "--prefilter", min=1, metavar="N",
                                  help="LLM mode: verify at most N candidates of an item, the gold and those whose "
                                       "documents are nearest its requirements (MiniLM); the rest are not answers. "
                                       "Bounds the calls on large candidate sets (default: verify all; its recall: "
                                       "docs/synthesize.md).", show_default=False),
    llm: str = typer.Option(None, "--llm", help="LLM mode: PROVIDER:MODEL (default: STARK_PG_LLM)."),
    base_url: str = typer.Option(None, "--base-url", help="LLM mode: OpenAI/Anthropic-compatible server (default: "
                                                          "STARK_PG_LLM_BASE_URL)."),
    cache: str = typer.Option(None, "--cache", help="use | only | refresh (default: STARK_PG_LLM_CACHE, else use); "
                                                    "`only` replays from stark.llm_cache and never calls."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and say how many questions (and LLM calls, with a "
                                                          "time estimate) it would make; store nothing."),
    workers: int = typer.Option(None, "--workers", help="LLM mode: verifications of an item's candidates asked at "
                                                        "once. " + WORKERS_HELP, show_default=False),
    json_: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Make a split of questions from relation templates: each instantiation of a template's anchors
    (a drug, a gene) gives the nodes it admits. By default an LLM then reads textual requirements from
    one of them (the gold answer) in a role, fuses them with the relation into a question in two stages,
    and keeps as answers the candidates two verifiers accept (STaRK's section 3.3). With
    --relational-only the question names the anchors and every candidate is an answer. Every item is
    stored with how it was made (stark.synth_question) as soon as it is made, so an interrupted run
    continues where it stopped. The SKB's own questions are never read."""
    from stark_pg.llm import LLMError, client_from_options
    from stark_pg.synthesize.pipeline import SynthesizeError, SynthSettings, synthesize
    from stark_pg.synthesize.templates import TemplateError

    settings = SynthSettings(split=split, seed=seed, min_answers=min_answers, max_answers=max_answers,
                             templates=str(templates) if templates else None, dataset=dataset,
                             mode="relational" if relational_only else "llm", golds=golds,
                             min_doc_chars=min_doc_chars, doc_chars=doc_chars, prefilter=prefilter)
    with concurrent_calls(workers), state(ctx).connect() as conn:
        try:
            client = None
            if not relational_only:
                try:
                    client = client_from_options(conn, llm=llm, base_url=base_url, cache=cache)
                except LLMError as exc:
                    if not dry_run:       # a dry run estimates without an LLM, only its seconds missing
                        fail(f"{exc} (here: --llm PROVIDER:MODEL and --base-url; or --relational-only, "
                             "which needs no LLM)")
            report = synthesize(conn, name, settings, limit=limit, dry_run=dry_run,
                                progress=reporter(quiet or json_), client=client)
        except (SynthesizeError, TemplateError, LLMError) as exc:
            fail(str(exc))
    if json_:
        print_json(report)
        return
    if dry_run:
        out.print(f"{name}, split {split}: would make up to {min(limit, report['planned'])} question(s) from "
                  f"{len(report['templates_used'])} template(s) ({report['planned']} planned)", highlight=False)
        if "estimate" in report:
            e = report["estimate"]
            hours = ("" if e["hours_low"] is None else
                     f", about {e['hours_low']}-{e['hours_high']} h at {e['seconds_per_call']} s per call")
            out.print(f"LLM requests: {e['calls_low']}-{e['calls_high']} for {e['items']} item(s){hours}; "
                      "dropped items cost requests too", highlight=False)
    else:
        dropped = ", ".join(f"{n} {o}" for o, n in sorted(report["dropped"].items())) or "none"
        out.print(f"{name}, split {split}: made {report['made']} question(s) ({report['questions']} in the split, "
                  f"{report['skipped']} were there) from {len(report['templates_used'])} template(s) in "
                  f"{report['seconds']} s; dropped: {dropped}; LLM calls sent: {report['llm_calls']}", highlight=False)
        if report.get("short"):
            out.print(report["short"], highlight=False)
    if report["not_instantiable"]:
        out.print(f"{len(report['not_instantiable'])} template(s) cannot be instantiated on this SKB "
                  "(`stark-pg synthesize templates` lists them)", highlight=False)


@app.command(name="templates")
def list_templates(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The loaded SKB."),
    templates: Path = typer.Option(None, "--templates", help=TEMPLATES_HELP),
    dataset: str = typer.Option(None, "--dataset", help=DATASET_HELP),
    min_answers: int = typer.Option(1, "--min-answers", help="Count instantiations with at least this many answers."),
    max_answers: int = typer.Option(10, "--max-answers", help="...and at most this many."),
    json_: bool = typer.Option(False, "--json", help="Per template: instantiations, answer-set sizes, what is missing."),
) -> None:
    """Per template: how many instantiations the SKB has and the sizes of their answer sets, or what
    the SKB lacks for it (a relation or node type)."""
    import numpy as np

    from stark_pg.skb.catalog import require_skb
    from stark_pg.synthesize.pipeline import SynthesizeError, SynthSettings, choose_templates, survey
    from stark_pg.synthesize.templates import TemplateError

    settings = SynthSettings(min_answers=min_answers, max_answers=max_answers,
                             templates=str(templates) if templates else None, dataset=dataset)
    with state(ctx).connect() as conn:
        try:
            chosen, _ = choose_templates(name, settings)
            reports, _ = survey(conn, require_skb(conn, name), chosen.templates, settings)
        except (SynthesizeError, TemplateError) as exc:
            fail(str(exc))
    rows = []
    for r in reports:
        sizes = np.array(r.sizes) if r.sizes else None
        rows.append({"template": r.id, "hops": r.hops, "instantiations": r.instantiations,
                     "within_bounds": r.within_bounds,
                     "answers": None if sizes is None else {"median": float(np.median(sizes)), "p90": float(
                         np.percentile(sizes, 90)), "max": int(sizes.max())},
                     "missing": r.missing})
    if json_:
        print_json({"skb": name, "templates": rows})
        return
    table = Table(title=f"{name}: relation templates", title_justify="left")
    for column in ("template", "hops", "instantiations", f"{min_answers}-{max_answers} answers",
                   "answers median / p90 / max"):
        table.add_column(column, justify="left" if column == "template" else "right")
    for row in rows:
        if row["missing"]:
            table.add_row(row["template"], str(row["hops"]), "cannot", "", "no " + ", no ".join(row["missing"]))
            continue
        a = row["answers"]
        table.add_row(row["template"], str(row["hops"]), str(row["instantiations"]), str(row["within_bounds"]),
                      "" if a is None else f"{a['median']:g} / {a['p90']:g} / {a['max']}")
    out.print(table)


@app.command()
def export(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB."),
    out_dir: Path = typer.Argument(..., help="Where to write stark_qa.csv, split/SPLIT.index and SPLIT.jsonl."),
    split: str = typer.Option("synthetic", "--split", help="The synthesized split to write."),
    json_: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write a synthesized split in STaRK's QA layout, with its provenance as JSON lines;
    `stark-pg load OUT_DIR --skb NAME` reads it back as that split."""
    from stark_pg.synthesize.export import export_split

    writable_dir(out_dir, "OUT_DIR")
    with state(ctx).connect() as conn:
        try:
            report = export_split(conn, name, split, out_dir)
        except ValueError as exc:
            fail(str(exc))
    if json_:
        print_json(report)
        return
    out.print(f"{report['questions']} question(s) of {split} -> {out_dir}: {', '.join(report['files'])}",
              highlight=False)


@app.command()
def stats(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB."),
    split: str = typer.Option("synthetic", "--split", help="The split to describe."),
    against: str = typer.Option(None, "--against", help="Another split to show beside it (e.g. train)."),
    png: Path = typer.Option(None, "--png", help="Also draw answers and words per question to this PNG."),
    json_: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Describe a split as STaRK describes its datasets: questions, questions per template, answers per
    question, words per question, the share of multi-hop questions; beside another split."""
    from stark_pg.skb.catalog import require_skb
    from stark_pg.synthesize.stats import plot_stats, split_stats, split_values

    if png:
        writable_file(png, "--png")
    splits = [split] + ([against] if against else [])
    with state(ctx).connect() as conn:
        skb_id = require_skb(conn, name)
        try:
            found = [split_stats(conn, skb_id, s) for s in splits]
        except ValueError as exc:
            fail(str(exc))
        if png:
            plot_stats(found, {s: split_values(conn, skb_id, s) for s in splits}, png)
    if json_:
        print_json({"skb": name, "splits": found} | ({"png": str(png)} if png else {}))
        return
    table = Table(title=f"{name}", title_justify="left")
    table.add_column("")
    for s in found:
        table.add_column(s["split"], justify="right")
    rows = [("questions", lambda s: str(s["questions"])),
            ("answers: mean", lambda s: f"{s['answers']['mean']:.2f}"),
            ("answers: median / p90 / max", lambda s: f"{s['answers']['median']:g} / {s['answers']['p90']:g} / "
                                                       f"{s['answers']['max']}"),
            ("words: mean", lambda s: f"{s['words']['mean']:.1f}"),
            ("multi-hop share", lambda s: "" if s["multi_hop_share"] is None else f"{s['multi_hop_share']:.2f}"),
            ("templates", lambda s: "" if not s["templates"] else str(len(s["templates"]))),
            ("gold pass share (LLM)", lambda s: "" if s["gold_pass_share"] is None else f"{s['gold_pass_share']:.3f}")]
    for label, cell in rows:
        table.add_row(label, *(cell(s) for s in found))
    out.print(table)
    if png:
        out.print(f"plot: {png}", highlight=False)
