"""`stark-pg synthesize ...`: STaRK-style questions with known answers, made from a loaded SKB."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from typer.core import TyperGroup

from stark_pg.cli.common import fail, out, print_json, reporter, state, writable_dir, writable_file


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
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and say how many questions (and LLM calls) it "
                                                          "would make; store nothing."),
    json_: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Make a split of questions from relation templates: each instantiation of a template's anchors
    (a drug, a gene) gives the nodes it admits; a question names the anchors, and its answers are those
    nodes. Every question is stored with how it was made (stark.synth_question) as soon as it is made, so
    an interrupted run continues where it stopped. The SKB's own questions are never read."""
    from stark_pg.synthesize.pipeline import SynthesizeError, SynthSettings, synthesize
    from stark_pg.synthesize.templates import TemplateError

    if not relational_only:
        fail("questions with textual requirements (an LLM) are not built yet: pass --relational-only")
    settings = SynthSettings(split=split, seed=seed, min_answers=min_answers, max_answers=max_answers,
                             templates=str(templates) if templates else None, dataset=dataset,
                             mode="relational")
    with state(ctx).connect() as conn:
        try:
            report = synthesize(conn, name, settings, limit=limit, dry_run=dry_run,
                                progress=reporter(quiet or json_))
        except (SynthesizeError, TemplateError) as exc:
            fail(str(exc))
    if json_:
        print_json(report)
        return
    verb = "would make" if dry_run else "made"
    out.print(f"{name}, split {split}: {verb} {report['planned'] if dry_run else report['made']} question(s) "
              f"from {len(report['templates_used'])} template(s)"
              + ("" if dry_run else f", {report['skipped']} already there") + f" in {report['seconds']} s; "
              f"LLM calls: {report['llm_calls']}", highlight=False)
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
            reports, _ = survey(conn, require_skb(conn, name), chosen, settings)
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
            ("templates", lambda s: "" if not s["templates"] else str(len(s["templates"])))]
    for label, cell in rows:
        table.add_row(label, *(cell(s) for s in found))
    out.print(table)
    if png:
        out.print(f"plot: {png}", highlight=False)
