"""`stark-pg train mfar` and `stark-pg masking`: learn mFAR's weights, and measure what each field is worth."""

from __future__ import annotations

import typer
from rich.table import Table

from stark_pg.cli.common import fail, out, print_json, reporter, state

app = typer.Typer(help="Train a retrieval method's parameters on an SKB's training queries.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="train")
    root.command()(masking)


@app.command()
def mfar(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB whose train split to learn from."),
    variant: str = typer.Option("all", "--variant", help="all (every field, BM25 and dense) | lexical | dense | "
                                                         "2 (the whole document, both scorers) | 1+n (document by "
                                                         "BM25, every field by dense)."),
    model_name: str = typer.Option(None, "--name", help="Store the model under this name (default: the variant); "
                                                        "search with -o name=..."),
    epochs: int = typer.Option(40, "--epochs", help="At most this many passes over the training queries."),
    patience: int = typer.Option(8, "--patience", help="Stop after this many epochs without a better MRR on the "
                                                       "early-stopping split."),
    batch_norm: bool = typer.Option(False, "--batch-norm", help="Also learn a scale per (field, scorer) on top of "
                                                                "the standardised scores."),
    exclude: list[str] = typer.Option(None, "--exclude", help="Leave a field out (FIELD or FIELD:lexical|dense); "
                                                              "repeatable. Fields: see `stark-pg train fields`."),
    train_split: str = typer.Option("train", "--train-split", help="Queries learned from."),
    stop_split: str = typer.Option("val", "--early-stop-split", help="Queries the best epoch is chosen on."),
    pool: int = typer.Option(100, "--pool", help="Shortlist per (field, scorer), as at search time."),
    negatives: int = typer.Option(32, "--negatives", help="Random nodes added to each training query's candidates."),
    lr: float = typer.Option(0.01, "--lr", help="AdamW's learning rate."),
    temperature: float = typer.Option(0.5, "--temperature", help="Of the contrastive loss, over standardised scores "
                                                                 "(the paper's 0.05 is for raw scores)."),
    weight_decay: float = typer.Option(0.1, "--weight-decay", help="AdamW's weight decay on the gate."),
    seed: int = typer.Option(0, "--seed"),
    limit: int = typer.Option(None, "--limit", help="Only the first N queries of each split (a quick run)."),
    finetune_encoder: bool = typer.Option(False, "--finetune-encoder",
                                          help="Then fine-tune the query encoder with the gate (documents stay as "
                                               "indexed); saved under STARK_PG_HOME/models/mfar/. Slow on a CPU."),
    encoder_epochs: int = typer.Option(2, "--encoder-epochs", help="Epochs of encoder fine-tuning."),
    embed_model: str = typer.Option(None, "--model", help="Embedding model of the dense fields (default "
                                                          "all-MiniLM-L6-v2, as `stark-pg index` uses)."),
    json_: bool = typer.Option(False, "--json", help="The stored model's pairs, metrics and history as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Learn mFAR's query-conditioned weights over (field, scorer) pairs; store them in stark.mfar_model.

    Needs the SKB indexed with per-field BM25 and vectors: `stark-pg index NAME --relation-fields`.
    Scores of every training query's candidates are computed once in PostgreSQL; torch then learns the
    weights with mFAR's contrastive loss, keeping the epoch with the best MRR on the
    early-stopping split. Search with `stark-pg search NAME "..." --method mfar [-o name=VARIANT] --explain`.
    """
    from stark_pg.train.mfar import TrainSettings, train_mfar

    settings = TrainSettings(variant=variant, name=model_name, embed_model=embed_model, exclude=tuple(exclude or ()),
                             epochs=epochs, patience=patience, batch_norm=batch_norm, train_split=train_split,
                             early_stop_split=stop_split, pool=pool, negatives=negatives, lr=lr, temperature=temperature,
                             weight_decay=weight_decay, seed=seed, limit=limit,
                             finetune_encoder=finetune_encoder, encoder_epochs=encoder_epochs)
    with state(ctx).connect() as conn:
        try:
            report = train_mfar(conn, name, settings, progress=reporter(quiet or json_))
        except ValueError as exc:
            fail(str(exc))
    model = report.model
    summary = {"skb": name, "model": model.name, "variant": model.variant, "pairs": [str(p) for p in model.pairs],
               "best_epoch": report.best_epoch, "metrics": model.metrics,
               "feature_seconds": round(report.feature_seconds, 2), "train_seconds": round(report.train_seconds, 2),
               "history": report.history}
    if json_:
        print_json(summary)
        return
    out.print(f"mFAR {model.name!r} on {name}: {len(model.pairs)} (field, scorer) pairs, best epoch "
              f"{report.best_epoch}; scores {report.feature_seconds:.1f} s, training {report.train_seconds:.1f} s",
              highlight=False)
    shown = {k: v for k, v in model.metrics.items() if k != "epoch"}
    out.print("  " + ", ".join(f"{k} {v:.3f}" for k, v in shown.items()), highlight=False)


@app.command()
def fields(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB."),
    finetune_encoder: bool = typer.Option(False, "--finetune-encoder",
                                          help="Then fine-tune the query encoder with the gate (documents stay as "
                                               "indexed); saved under STARK_PG_HOME/models/mfar/. Slow on a CPU."),
    encoder_epochs: int = typer.Option(2, "--encoder-epochs", help="Epochs of encoder fine-tuning."),
    embed_model: str = typer.Option(None, "--model", help="Embedding model whose vectors to look for."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """The SKB's mFAR fields (document, name, type, text fields, relations) and which scorers are indexed."""
    from stark_pg.embed import canonical_name
    from stark_pg.train.mfar_model import skb_fields

    with state(ctx).connect() as conn:
        found = skb_fields(conn, name, canonical_name(embed_model))
    if json_:
        print_json([{"field": f.field, "lexical": f.lexical, "dense": f.dense} for f in found])
        return
    table = Table(title=f"mFAR fields of {name}", title_justify="left")
    for column in ("field", "lexical (BM25)", "dense"):
        table.add_column(column)
    for f in found:
        table.add_row(f.field, "yes" if f.lexical else "-", "yes" if f.dense else "-")
    out.print(table)


def masking(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB."),
    model_name: str = typer.Option("all", "--name", help="The trained mFAR model."),
    split: str = typer.Option("val", "--split", help="Query split to evaluate on."),
    limit: int = typer.Option(None, "--limit", help="Only the first N queries."),
    metric: str = typer.Option("mrr", "--metric", help="Metric whose change is shown first (all are stored)."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """mFAR's masking table: the metric change when a field, or one scorer of it, is zeroed at query time.

    Runs `eval --method mfar` unmasked and once per field and per (field, scorer) with `-o mask=...`;
    every run is stored in stark.eval_run like any evaluation (and resumed if interrupted).
    """
    from stark_pg.eval import query_sets
    from stark_pg.eval.metrics import check_metric_names
    from stark_pg.eval.runner import run_method
    from stark_pg.retrieve import mfar as mfar_method
    from stark_pg.skb.catalog import require_skb
    from stark_pg.train.mfar_model import load_model

    try:
        check_metric_names([metric])
    except ValueError as exc:
        fail(str(exc))
    progress = reporter(quiet or json_)
    rows = []
    with state(ctx).connect() as conn:
        skb_id = require_skb(conn, name)
        model = load_model(conn, skb_id, name, model_name)
        chosen = query_sets.from_split(conn, skb_id, split)
        if limit:
            chosen.queries = chosen.queries[:limit]
            chosen.label += f"[:{limit}]"
        if not chosen.queries:
            fail(f"no queries in {chosen.label} of {name}")
        masks = [None]
        for field in dict.fromkeys(p.field for p in model.pairs):
            scorers = [p.scorer for p in model.pairs if p.field == field]
            masks.append(field)
            if len(scorers) > 1:
                masks.extend(f"{field}:{s}" for s in scorers)
        for mask in masks:
            options = mfar_method.Options(name=model_name, mask=mask)
            outcome = run_method(conn, skb_id, name, "mfar", options, chosen, progress=progress)
            rows.append({"mask": mask, "run_id": outcome.run_id, "metrics": outcome.summary["metrics"]})
    base = rows[0]["metrics"]
    shown = [metric] + [m for m in ("hit@1", "recall@20", "mrr") if m != metric]
    for row in rows:
        row["delta"] = {m: round(row["metrics"][m] - base[m], 4) for m in base}
    if json_:
        print_json({"skb": name, "model": model_name, "query_set": chosen.label, "rows": rows})
        return
    table = Table(title=f"mFAR {model_name!r} on {name}, {chosen.label}: change when masked", title_justify="left")
    table.add_column("masked")
    for m in shown:
        table.add_column(f"Δ {m}", justify="right")
    table.add_column("run", justify="right")
    for row in rows:
        if row["mask"] is None:
            table.add_row("(nothing)", *(f"{base[m]:.3f}" for m in shown), str(row["run_id"]))
        else:
            table.add_row(row["mask"], *(f"{row['delta'][m]:+.3f}" for m in shown), str(row["run_id"]))
    out.print(table)
