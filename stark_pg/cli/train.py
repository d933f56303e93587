"""`stark-pg train mfar` and `stark-pg masking`: learn mFAR's weights, and measure what each field is worth."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from stark_pg.cli.common import WORKERS_HELP, concurrent_calls, fail, out, print_json, reporter, state, writable_file
from stark_pg.skb.records import LoadError

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
    train_split: str = typer.Option("train", "--splits", "--train-split", metavar="SPLIT[,SPLIT...]",
                                    help="Query splits learned from, e.g. train,synthetic (`stark-pg synthesize`); "
                                         "the early-stopping holdout is drawn from the first only. val and test "
                                         "are refused."),
    stop_split: str = typer.Option("holdout", "--early-stop-split",
                                   help="Queries the best epoch is chosen on: holdout (a seeded share of the "
                                        "training split, held out of training) or a split name; choosing on the "
                                        "split you report (val) overstates it."),
    holdout: float = typer.Option(0.2, "--holdout", help="Share of the training split held out for early "
                                                          "stopping (with --early-stop-split holdout)."),
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
                             early_stop_split=stop_split, holdout=holdout, pool=pool, negatives=negatives, lr=lr, temperature=temperature,
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
    if model.variant in ("all", "dense", "1+n") and not any(p.scorer == "dense" and p.field != "document"
                                                            for p in model.pairs):
        out.print(f"[yellow]note: no field is scored by its vectors: the SKB has no chunk vectors of the model; "
                  f"`stark-pg index {name} --chunks` adds them (then train again)[/]", highlight=False, soft_wrap=True)


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
    from stark_pg.models.mfar import skb_fields

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
    from stark_pg.models.mfar import load_model
    from stark_pg.retrieve import get_method
    from stark_pg.retrieve import mfar as mfar_method
    from stark_pg.skb.catalog import require_skb

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
            from stark_pg.eval.session import splits_hint

            fail(f"no queries in {chosen.label} of {name}" + splits_hint(conn, skb_id, split))
        masks = [None]
        for field in dict.fromkeys(p.field for p in model.pairs):
            scorers = [p.scorer for p in model.pairs if p.field == field]
            masks.append(field)
            if len(scorers) > 1:
                masks.extend(f"{field}:{s}" for s in scorers)
        for mask in masks:
            options = mfar_method.Options(name=model_name, mask=mask)
            outcome = run_method(conn, skb_id, name, "mfar", options, chosen, resolve=get_method, progress=progress)
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


@app.command()
def agent(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB whose training questions the programs are scored on."),
    iterations: int = typer.Option(3, "--iterations", help="Programs the LLM writes per category, after the seed."),
    batch: int = typer.Option(10, "--batch", help="Training questions each program is scored on."),
    holdout: float = typer.Option(0.3, "--holdout", help="Share of each category's training questions held out to "
                                                         "choose its program (never val)."),
    min_queries: int = typer.Option(8, "--min-queries", help="Answer types with fewer training questions share the "
                                                             "category 'any'."),
    splits: str = typer.Option("train", "--splits", "--split", metavar="SPLIT[,SPLIT...]",
                               help="Query splits learned from, e.g. train,synthetic (`stark-pg synthesize`). "
                                    "Programs are written on all of them, chosen on held-out questions of `train` "
                                    "when it is among them; a question's category is voted by these splits, at "
                                    "training and at search time."),
    limit: int = typer.Option(None, "--limit", help="Only N training questions (shuffled with --seed)."),
    entities: bool = typer.Option(True, "--entities/--no-entities",
                                  help="Bind the entity slots (:entity_1, ...): one LLM call per question whose "
                                       "program uses them."),
    timeout_ms: int = typer.Option(5000, "--timeout-ms", help="Statement timeout of a program."),
    llm: str = typer.Option(None, "--llm", help="PROVIDER:MODEL (default: STARK_PG_LLM)."),
    base_url: str = typer.Option(None, "--base-url", help="OpenAI/Anthropic-compatible server (default: "
                                                          "STARK_PG_LLM_BASE_URL)."),
    cache: str = typer.Option(None, "--cache", help="use | only | refresh (default: STARK_PG_LLM_CACHE, else use)."),
    workers: int = typer.Option(None, "--workers", help="Entity parses of the questions a program is scored on, "
                                                        "asked at once. " + WORKERS_HELP, show_default=False),
    plot: str = typer.Option(None, "--plot", help="Write the MRR of every program per iteration to this PNG."),
    seed: int = typer.Option(0, "--seed"),
    json_: bool = typer.Option(False, "--json", help="The run's categories, programs' scores and LLM cost as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Let the LLM write SQL retrieval programs per question category; keep the best per category.

    Categories are the answer types the nearest training questions vote for. Each starts from a seed
    program (BM25 + dense + the category's type); the LLM then writes --iterations revisions, each
    scored on a batch of training questions with feedback on what it got wrong. Programs run in the
    sandbox (checked by sqlglot, run as the read-only role stark_agent). The program scoring best on
    held-out training questions is kept; all are rows of stark.agent_program. Then:
    `stark-pg eval NAME -m agent` (or `search ... -m agent --explain`).
    """
    from stark_pg.llm import LLMError
    from stark_pg.train.agent import AgentSettings, train_agent

    if plot:
        writable_file(Path(plot), "--plot")
    settings = AgentSettings(iterations=iterations, batch=batch, holdout=holdout, min_queries=min_queries,
                             splits=tuple(splits.split(",")), limit=limit, entities=entities, timeout_ms=timeout_ms, seed=seed, llm=llm,
                             base_url=base_url, cache=cache)
    with concurrent_calls(workers), state(ctx).connect() as conn:
        try:
            report = train_agent(conn, name, settings, progress=reporter(quiet or json_))
        except (ValueError, RuntimeError, LLMError) as exc:
            fail(str(exc))
        if plot:
            from stark_pg.train.agent_plot import plot_history

            plot_history(report, plot)
    summary = {"skb": name, "run_id": report.run_id, "seconds": round(report.seconds, 1), "llm": report.llm,
               "categories": [{"category": c.category, "train": c.train, "holdout": c.holdout,
                               "type_agreement": c.type_agreement, "chosen_program": c.chosen_program,
                               "programs": c.history} for c in report.categories]}
    if json_:
        print_json(summary)
        return
    table = Table(title=f"agent run {report.run_id} on {name}: {report.seconds:.0f} s, LLM {report.llm.get('calls', 0)} "
                        f"calls ({report.llm.get('cache_hits', 0)} cached)", title_justify="left")
    for column in ("category", "questions", "programs", "seed MRR", "best batch MRR", "chosen", "held-out MRR"):
        table.add_column(column)
    for c in report.categories:
        chosen = next((h for h in c.history if h["chosen"]), None)
        table.add_row(c.category, f"{c.train}+{c.holdout}", str(len(c.history)),
                      f"{c.history[0]['batch_mrr']:.3f}" if c.history else "-",
                      f"{max(h['batch_mrr'] for h in c.history):.3f}" if c.history else "-",
                      f"iteration {chosen['iteration']}" if chosen else "-",
                      f"{chosen['holdout_mrr']:.3f}" if chosen else "-")
    out.print(table)
    if plot:
        out.print(f"history plot: {plot}", highlight=False)
    out.print(f"programs: select * from stark.agent_program where run_id = {report.run_id};", highlight=False)


@app.command()
def fusion(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB whose train split to learn from (never val or test)."),
    model_name: str = typer.Option("default", "--name", help="Store the model under this name; search with "
                                                             "-o name=..."),
    model: str = typer.Option(None, "--model", help="Embedding model of the features (default all-MiniLM-L6-v2, "
                                                    "as `stark-pg index` uses)."),
    rounds: str = typer.Option("100,200,400", "--rounds", help="Boosting rounds to choose among by cross-validation "
                                                               "on train (comma-separated)."),
    folds: int = typer.Option(5, "--folds", help="Cross-validation folds over the training queries."),
    repeats: int = typer.Option(1, "--repeats", min=1, metavar="N",
                                help="Repeat cross-validation over N seeded draws of the folds and average: a "
                                     "steadier choice of rounds and leaves, N times the time of its features."),
    leaves: str = typer.Option("7,15", "--leaves", help="Leaves per tree, chosen among with the rounds by "
                                                        "cross-validation on train (comma-separated)."),
    min_data_in_leaf: str = typer.Option("20", "--min-data-in-leaf", metavar="N[,N...]",
                                         help="Least training rows (candidates) a leaf may hold, chosen among with "
                                              "the rounds and leaves (comma-separated)."),
    link: int = typer.Option(5, "--link", min=1,
                             help="Best name matches taken as the entities a question names (linked, hop1, hop2, "
                                  "and the training questions naming the same ones: ent_answer, ent_best)."),
    learning_rate: float = typer.Option(0.05, "--learning-rate", help="How far each boosting round moves the "
                                                                      "scores (LightGBM's shrinkage)."),
    pool: int = typer.Option(100, "--pool", help="Shortlist per (field, scorer) pair: the candidates."),
    knn: int = typer.Option(10, "--knn", help="Nearest training queries behind type_share and knn_answer."),
    seed: int = typer.Option(1, "--seed", help="LightGBM's seed (it samples rows and features, 0.8 each)."),
    bag: int = typer.Option(3, "--bag", min=1, metavar="N",
                            help="Fit N models at the chosen rounds, seeds SEED..SEED+N-1, and rank by their "
                                 "mean: steadier than one seed's model, N times the trees to score per search "
                                 "(3 was chosen on held-out parts of train; 1 for a single model)."),
    limit: int = typer.Option(None, "--limit", help="Only the first N training queries (a quick run)."),
    dense: str = typer.Option(None, "--dense", metavar="NAME",
                              help="Add trained_dense, the cosine under fine-tuned dense models NAME-fold<k>of<n> "
                                   "(one per fold, each trained with `train dense --fold k/n`): a training question "
                                   "is scored by the model that never saw it, a new one by all of them (mean)."),
    dense_folds: int = typer.Option(2, "--dense-folds", help="n: how many fold models --dense has."),
    extra_train: Path = typer.Option(None, "--extra-train", metavar="QA_DIR",
                                     help="Also fit on the training questions of this STaRK QA directory (stark_qa.csv "
                                          "and split/train.index) that the SKB lacks but whose answers lie partly "
                                          "among its nodes, answers cut to them: for a slice of a larger KB, e.g. "
                                          "../shared/data/stark-qa/primekg for stark-prime-ibd. Never their val or test "
                                          "questions; cross-validation still scores the SKB's own questions only."),
    extra_min_share: float = typer.Option(0.0, "--extra-min-share", min=0.0, max=1.0, metavar="S",
                                          help="With --extra-train: only questions with at least this share of "
                                               "their answers among the SKB's nodes."),
    splits: str = typer.Option("train", "--splits", metavar="SPLIT[,SPLIT...]",
                               help="The query splits learned from, and read by the nearest-question features at "
                                    "search time: e.g. train,synthetic (`stark-pg synthesize`). Cross-validation "
                                    "scores only train's questions when train is among them; val and test are "
                                    "refused."),
    synthetic_weight: str = typer.Option("1", "--synthetic-weight", metavar="W[,W...]",
                                         help="With --splits train,OTHER: the weight in the fit of each question of "
                                              "the other splits (synthesized ones), chosen among by "
                                              "cross-validation on train's questions with the trees; 0 keeps them "
                                              "in the nearest-question pool only. E.g. 0,0.25,1."),
    json_: bool = typer.Option(False, "--json", help="Cross-validation figures and feature importance as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Learn a ranker (LightGBM lambdarank) over every score stark-pg computes per candidate.

    Features (stark.fusion_features, computed in SQL): BM25 and cosine per field (mFAR's pairs), the
    answer type the nearest training queries vote for, their answers, and graph proximity to the
    entities the question names. The number of rounds and the trees' size (--leaves,
    --min-data-in-leaf) are chosen together by cross-validation on train; the model is compiled
    to SQL and stored in stark.fusion_model. Needs `stark-pg index NAME --relation-fields`.
    Then: `stark-pg eval NAME -m fusion`.
    """
    from stark_pg.train.fusion import FusionSettings, train_fusion

    candidates = integers(rounds, "--rounds", least=1)
    leaf_counts = integers(leaves, "--leaves", least=2)
    leaf_data = integers(min_data_in_leaf, "--min-data-in-leaf", least=1)
    if folds < 2 or not 0 < learning_rate <= 1:
        fail("--folds must be at least 2, --learning-rate in (0, 1]")
    settings = FusionSettings(name=model_name, model=model, pool=pool, knn=knn, link=link, rounds=candidates,
                              folds=folds, repeats=repeats, leaves=leaf_counts, min_data_in_leaf=leaf_data,
                              learning_rate=learning_rate, seed=seed, bag=bag, limit=limit, dense=dense,
                              dense_folds=dense_folds, extra_train=str(extra_train) if extra_train else None,
                              extra_min_share=extra_min_share, splits=splits.split(","),
                              synthetic_weight=numbers(synthetic_weight, "--synthetic-weight", least=0))
    with state(ctx).connect() as conn:
        try:
            report = train_fusion(conn, name, settings, progress=reporter(quiet or json_))
        except (ValueError, LoadError) as exc:
            fail(str(exc))
    if json_:
        print_json(report)
        return
    extra = f" (+{report['extra_queries']} from --extra-train)" if report["extra_queries"] else ""
    table = Table(title=f"fusion model {report['name']!r} on {name}: {report['queries']} training queries{extra}, "
                        f"{report['features']} features"
                        + (f", a bag of {report['bag']} models" if report["bag"] > 1 else "")
                        + (f", cross-validation repeated {report['repeats']} times" if report["repeats"] > 1 else "")
                        + f", {report['seconds']:.0f} s", title_justify="left")
    for column in ("leaves", "min data in leaf", "synthetic weight", "rounds", "CV Hit@1", "CV MRR", "chosen"):
        table.add_column(column)
    for row in report["cv"]:
        chosen = all(row[key] == report[f"chosen_{key}"]
                     for key in ("leaves", "min_data_in_leaf", "synthetic_weight", "rounds"))
        table.add_row(str(row["leaves"]), str(row["min_data_in_leaf"]), f"{row['synthetic_weight']:g}",
                      str(row["rounds"]), f"{row['hit@1']:.3f}", f"{row['mrr']:.3f}", "yes" if chosen else "")
    out.print(table)
    out.print("most useful features (gain): " + ", ".join(report["importance"]), highlight=False)


@app.command()
def dense(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB whose train split to learn from (never val or test)."),
    model_name: str = typer.Option(None, "--name", help="Store the model under this name (default "
                                                        "dense-SKB-shared|separate); search with -m vss -o model=NAME."),
    base: str = typer.Option(None, "--base", help="Model to start from (default: the one the SKB is indexed with, "
                                                  "all-MiniLM-L6-v2); the SKB needs its document vectors."),
    shared: bool = typer.Option(True, "--shared/--separate", help="One encoder for queries and documents, or a "
                                                                  "copy fine-tuned per side."),
    epochs: int = typer.Option(3, "--epochs", help="At most this many passes over the training queries."),
    patience: int = typer.Option(1, "--patience", help="Stop after this many epochs without a better held-out MRR."),
    negatives: int = typer.Option(20, "--negatives", help="Hard negatives per query: VSS's top false positives."),
    lr: float = typer.Option(2e-5, "--lr", help="AdamW's learning rate (linear warm-up, then linear decay)."),
    batch_size: int = typer.Option(16, "--batch-size", help="Queries per step (each brings 1 + --negatives "
                                                            "documents; all are in-batch negatives)."),
    temperature: float = typer.Option(0.05, "--temperature", help="Of the contrastive loss over cosines."),
    max_doc_tokens: int = typer.Option(128, "--max-doc-tokens", help="Documents are cut to this many tokens while "
                                                                     "training (indexing keeps the model's length)."),
    negative_gradients: bool = typer.Option(False, "--negative-gradients", help="Backpropagate through the hard "
                                                                                "negatives too (about 3x slower)."),
    eval_pool: int = typer.Option(20, "--eval-pool", help="Held-out queries are re-ranked among their base VSS "
                                                          "top N after each epoch."),
    holdout: float = typer.Option(0.2, "--holdout", help="Share of train held out for early stopping."),
    multi_vector: bool = typer.Option(False, "--multi-vector", help="Also embed chunks with the new document "
                                                                    "encoder (multi-VSS, mFAR's dense fields)."),
    splits: str = typer.Option("train", "--splits", metavar="SPLIT[,SPLIT...]",
                               help="Query splits learned from, e.g. train,synthetic (`stark-pg synthesize`); the "
                                    "held-out share (and --fold) is drawn from the first only. val and test are "
                                    "refused."),
    seed: int = typer.Option(0, "--seed"),
    limit: int = typer.Option(None, "--limit", help="Only the first N training queries (a quick run)."),
    fold: str = typer.Option(None, "--fold", metavar="K/N",
                             help="Train without fold K of N of the training split (0-based; seeded folds): "
                                  "N such models give every training question a score from a model that never "
                                  "saw it (train fusion --dense)."),
    json_: bool = typer.Option(False, "--json", help="Settings, per-epoch history and held-out metrics as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Fine-tune STaRK's Dense Retriever: query and document encoders, contrastive loss, hard negatives.

    Hard negatives are the base model's top VSS false positives (mined in SQL), plus in-batch
    negatives; the best epoch on a seeded held-out part of train is kept. The encoders are saved under
    STARK_PG_HOME/models/dense/NAME/, the SKB's documents re-embedded with the new document encoder
    (their own vectors and HNSW index), and the run recorded in stark.trained_model. Then:
    `stark-pg eval SKB -m vss -o model=NAME` (mFAR: `stark-pg train mfar SKB --model NAME`).
    """
    from stark_pg.train.dense import DenseSettings, train_dense

    settings = DenseSettings(name=model_name, base=base, shared=shared, epochs=epochs, patience=patience,
                             negatives=negatives, lr=lr, batch_size=batch_size, temperature=temperature,
                             max_doc_tokens=max_doc_tokens, negative_gradients=negative_gradients,
                             eval_pool=eval_pool, holdout=holdout, seed=seed, limit=limit, multi_vector=multi_vector,
                             fold=parse_fold(fold) if fold else None, splits=tuple(splits.split(",")))
    with state(ctx).connect() as conn:
        try:
            report = train_dense(conn, name, settings, progress=reporter(quiet or json_))
        except ValueError as exc:
            fail(str(exc))
    summary = {"skb": name, "model": report.name, "base": report.base, "path": report.path,
               "best_epoch": report.best_epoch, "metrics": report.metrics, "history": report.history,
               "documents": report.index["documents"], "settings": report.settings}
    if json_:
        print_json(summary)
        return
    table = Table(title=f"dense model {report.name!r} on {name} (from {report.base}, "
                        f"{'shared' if shared else 'separate'} encoders): best epoch {report.best_epoch}, "
                        f"training {report.train_seconds:.0f} s, indexing {report.index['seconds']:.0f} s",
                  title_justify="left")
    for column in ("epoch", "loss", "held-out Hit@1", "Hit@5", "R@20", "MRR", "seconds"):
        table.add_column(column, justify="right")
    for h in report.history:
        table.add_row(str(h["epoch"]), "-" if h["loss"] is None else f"{h['loss']:.4f}",
                      *(f"{h['holdout_' + m]:.3f}" for m in ("hit@1", "hit@5", "recall@20", "mrr")),
                      f"{h['seconds']:.0f}")
    out.print(table)
    out.print(f"search it: stark-pg eval {name} -m vss -o model={report.name}", highlight=False)


@app.command()
def qagnn(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB whose train split to learn from (never val or test)."),
    model_name: str = typer.Option("default", "--name", help="Store the model under this name; search with "
                                                             "-o name=..."),
    first_stage: str = typer.Option("vss", "--first-stage", help="vss | hybrid: the ranking whose top candidates "
                                                                 "are re-ranked."),
    candidates: int = typer.Option(100, "--candidates", help="How many of the first stage's nodes are re-ranked."),
    layers: int = typer.Option(2, "--layers", help="Message-passing layers."),
    hidden: int = typer.Option(128, "--hidden", help="Hidden size (a multiple of the 4 attention heads)."),
    epochs: int = typer.Option(30, "--epochs", help="At most this many passes over the training queries."),
    patience: int = typer.Option(8, "--patience", help="Stop after this many epochs without a better held-out MRR."),
    lr: float = typer.Option(1e-3, "--lr", help="AdamW's learning rate."),
    holdout: float = typer.Option(0.2, "--holdout", help="Share of train held out to choose the epoch."),
    fanout: int = typer.Option(20, "--fanout", help="Edges one hop out per subgraph seed and direction."),
    model: str = typer.Option(None, "--model", help="Embedding model whose stored vectors are the node features "
                                                    "(default all-MiniLM-L6-v2, as `stark-pg index` uses)."),
    seed: int = typer.Option(0, "--seed"),
    limit: int = typer.Option(None, "--limit", help="Only the first N training and held-out queries (a quick run)."),
    splits: str = typer.Option("train", "--splits", metavar="SPLIT[,SPLIT...]",
                               help="Query splits learned from, e.g. train,synthetic; the held-out share is drawn "
                                    "from the first only. val and test are refused."),
    json_: bool = typer.Option(False, "--json", help="Settings, per-epoch history and held-out metrics as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Train QA-GNN: a relation-aware graph attention network re-ranking a first stage's top candidates.

    Per training query: the first stage's top --candidates, the nodes its words name and the edges
    among them and one hop out (one SQL statement); node features are the stored document vectors and
    query relevance. The epoch kept is the one with the best MRR on a seeded --holdout share of train.
    Weights go to STARK_PG_HOME/models/qagnn/<skb>/<name>/, the run to stark.trained_model. Then:
    `stark-pg eval NAME -m qagnn` (or `search ... -m qagnn`).
    """
    from stark_pg.train.qagnn import TrainSettings, train_qagnn

    settings = TrainSettings(name=model_name, first_stage=first_stage, candidates=candidates, layers=layers,
                             hidden=hidden, epochs=epochs, patience=patience, lr=lr, holdout=holdout, fanout=fanout,
                             embed_model=model, seed=seed, limit=limit, train_split=splits)
    with state(ctx).connect() as conn:
        try:
            report = train_qagnn(conn, name, settings, progress=reporter(quiet or json_))
        except ValueError as exc:
            fail(str(exc))
    if json_:
        print_json({"skb": name, "name": report.name, "path": report.path, "best_epoch": report.best_epoch,
                    "holdout_metrics": report.metrics, "first_stage_holdout_metrics": report.first_stage_metrics,
                    "subgraph_seconds": round(report.subgraph_seconds, 2),
                    "train_seconds": round(report.train_seconds, 2), "train_queries": report.train_queries,
                    "holdout_queries": report.stop_queries, "mean_nodes": round(report.mean_nodes, 1),
                    "mean_edges": round(report.mean_edges, 1), "history": report.history})
        return
    table = Table(title=f"QA-GNN {report.name!r} on {name}: {report.train_queries} training queries, "
                        f"{report.stop_queries} held out; subgraphs {report.subgraph_seconds:.0f} s "
                        f"(mean {report.mean_nodes:.0f} nodes, {report.mean_edges:.0f} edges), "
                        f"training {report.train_seconds:.0f} s", title_justify="left")
    for column in ("epoch", "loss", "Hit@1", "Hit@5", "R@20", "MRR"):
        table.add_column(column, justify="right")
    first = report.first_stage_metrics
    table.add_row(f"{first_stage} alone", "-", *(f"{first[m]:.3f}" for m in ("hit@1", "hit@5", "recall@20", "mrr")))
    for h in report.history:
        mark = " *" if h["epoch"] == report.best_epoch else ""
        table.add_row(f"{h['epoch']}{mark}", f"{h['loss']:.4f}",
                      *(f"{h['holdout_' + m]:.3f}" for m in ("hit@1", "hit@5", "recall@20", "mrr")))
    out.print(table)
    out.print(f"kept epoch {report.best_epoch} (*); weights: {report.path}", highlight=False)


@app.command("cross-encoder")
def cross_encoder(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB whose training questions to learn from (never val or test)."),
    model_name: str = typer.Option("default", "--name", help="Store the cross-encoder under this name; search "
                                                             "with -m fusion-ce -o name=..."),
    fusion: str = typer.Option("default", "--fusion", help="The fusion model (`stark-pg train fusion`) whose top "
                                                           "ranks it learns on; fusion-ce re-scores its results."),
    base: str = typer.Option(None, "--base", help="sentence-transformers model (name or directory) to start from; "
                                                  "a bi-encoder gets a new scoring head (default all-MiniLM-L6-v2, "
                                                  "from its PyPI package, offline)."),
    splits: str = typer.Option("train", "--splits", metavar="SPLIT[,SPLIT...]",
                               help="Query splits learned from, e.g. train,synthetic (`stark-pg synthesize`); the "
                                    "held-out share is drawn from the first only. val and test are refused."),
    holdout: float = typer.Option(0.2, "--holdout", help="Share of the first split held out to choose the weight "
                                                         "and the epoch."),
    top: int = typer.Option(10, "--top", help="Fusion's results fusion-ce re-scores (its -o top=N); the weight is "
                                              "chosen for this N."),
    candidates: int = typer.Option(20, "--candidates", help="Fusion's top ranks read per question; the hard "
                                                            "negatives come from them (at least --top)."),
    negatives: int = typer.Option(7, "--negatives", help="Non-answers per training group: fusion's highest "
                                                         "ranked ones."),
    positives: int = typer.Option(2, "--positives", help="At most this many answers per question, each its own "
                                                         "group (answer + negatives, softmax loss)."),
    max_length: int = typer.Option(128, "--max-length", help="Tokens of question + document read (longer costs "
                                                             "more per query)."),
    epochs: int = typer.Option(1, "--epochs", help="Passes over the groups; the best epoch on the held-out "
                                                   "questions is kept."),
    lr: float = typer.Option(5e-5, "--lr", help="AdamW's learning rate (linear decay after a 10% warm-up)."),
    batch: int = typer.Option(1, "--batch", help="Groups per optimiser step."),
    weights: str = typer.Option(",".join(f"{w:g}" for w in (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)),
                                "--weights", metavar="W[,W...]",
                                help="Cross-encoder weights tried on the held-out questions (0, fusion alone, is "
                                     "always among them); the one with the best MRR is stored."),
    folds: int = typer.Option(5, "--folds", help="Parts the learning questions are ranked by fusion in, each "
                                                 "out of fusion's question pool while it is ranked."),
    threads: int = typer.Option(2, "--threads", help="Torch threads while training."),
    seed: int = typer.Option(0, "--seed"),
    limit: int = typer.Option(None, "--limit", help="Only the first N learning and held-out questions (a quick "
                                                    "run)."),
    json_: bool = typer.Option(False, "--json", help="Settings, per-epoch history and held-out metrics as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Train a cross-encoder that re-scores fusion's top results (`-m fusion-ce`), and choose its weight.

    Fusion ranks every training question as a new one (out of its own question pool); each answer
    against the non-answers fusion ranks highest is one group of a softmax loss. A seeded --holdout
    share of train is set apart: on it, fusion's top --top are re-scored and each of --weights is
    tried (final score = fusion's z-score + weight x the cross-encoder's z-score over the top N). The
    weight with the best held-out MRR is stored; 0 means fusion alone was best and fusion-ce then
    ranks as fusion does. Files go to STARK_PG_HOME/models/cross-encoder/<skb>/<name>/, the run to
    stark.trained_model. Then: `stark-pg eval SKB -m fusion-ce` (options: name, fusion, top, weight).
    """
    from stark_pg.train.cross_encoder import TrainSettings, train_cross_encoder

    try:
        tried = tuple(float(w) for w in weights.split(",") if w.strip())
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated numbers, such as 0,0.5,1, not {weights!r}",
                                 param_hint="--weights") from None
    settings = TrainSettings(name=model_name, fusion=fusion, base_model=base, splits=splits, holdout=holdout,
                             seed=seed, candidates=candidates, top=top, negatives=negatives, positives=positives,
                             max_length=max_length, epochs=epochs, lr=lr, batch=batch, folds=folds, weights=tried,
                             threads=threads, limit=limit)
    with state(ctx).connect() as conn:
        try:
            report = train_cross_encoder(conn, name, settings, progress=reporter(quiet or json_))
        except (ValueError, LookupError, LoadError) as exc:
            fail(str(exc))
    if json_:
        print_json({"skb": name, "name": report.name, "path": report.path, "weight": report.weight,
                    "top": report.top, "best_epoch": report.best_epoch, "holdout_metrics": report.metrics,
                    "learning_questions": report.learning_questions, "holdout_questions": report.heldout_questions,
                    "groups": report.groups, "rank_seconds": round(report.rank_seconds, 1),
                    "train_seconds": round(report.train_seconds, 1), "history": report.history})
        return
    table = Table(title=f"cross-encoder {report.name!r} on {name}: {report.learning_questions} learning questions "
                        f"({report.groups} groups), {report.heldout_questions} held out; fusion ranking "
                        f"{report.rank_seconds:.0f} s, training {report.train_seconds:.0f} s", title_justify="left")
    for column in (f"held out, fusion's top {report.top}", "Hit@1", "Hit@5", "MRR"):
        table.add_column(column, justify="right")
    for label, key in (("fusion", "fusion"), ("cross-encoder alone", "cross-encoder"),
                       (f"mixed at weight {report.weight:g}", "mixed")):
        row = report.metrics[key]
        table.add_row(label, *(f"{row[m]:.3f}" for m in ("hit@1", "hit@5", "mrr")))
    out.print(table)
    note = " (fusion alone was best on the held-out questions: fusion-ce ranks as fusion)" if not report.weight else ""
    out.print(f"weight {report.weight:g}{note}; files: {report.path}\nsearch it: stark-pg eval {name} -m fusion-ce"
              + (f" -o name={report.name}" if report.name != "default" else ""), highlight=False)


def parse_fold(text: str) -> tuple[int, int]:
    """`K/N` of --fold, as (k, n), or a usage error naming the option."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise typer.BadParameter(f"expected K/N, such as 0/2, not {text!r}", param_hint="--fold") from None
    if n < 2 or not 0 <= k < n:
        raise typer.BadParameter(f"{text!r}: need N >= 2 and 0 <= K < N", param_hint="--fold")
    return k, n


def integers(text: str, option: str, least: int) -> list[int]:
    """A comma-separated list of integers, each at least `least` (--rounds, --leaves, ...), or a usage
    error naming the option."""
    return numbers(text, option, least, int, "7,15")


def numbers(text: str, option: str, least: float, kind: type = float, example: str = "0,0.5,1") -> list:
    """A comma-separated list of numbers of `kind`, each at least `least`, or a usage error naming the option."""
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated {'integers' if kind is int else 'numbers'}, such as "
                                 f"{example}, not {text!r}", param_hint=option) from None
    if not values or min(values) < least:
        raise typer.BadParameter(f"{text!r}: each value must be at least {least}", param_hint=option)
    return values
