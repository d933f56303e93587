"""Training learned fusion on an SKB's training queries: LightGBM lambdarank over stark.fusion_features.

Why this way: every signal stark-pg has about a (query, candidate) pair is already an SQL score
(BM25 and cosine per field, the answer type the nearest training queries vote for, their answers,
graph proximity to the entities the question names). A ranker learned on `train` weighs them per
query far better than any fixed sum. PostgreSQL computes the features once per training query, with
the very function search uses; LightGBM learns in seconds. The number of boosting rounds and the
trees' size (leaves, data per leaf: the settings that over- or under-fit) are chosen together by
k-fold cross-validation over the training queries, each fold's features computed again with its
questions out of the training split (they would otherwise find each other as nearest training
questions, which no val question can); the model is then fitted on all of them. With `bag` > 1,
that many models are fitted there with consecutive seeds and rank by their mean: a fit samples rows
and features (0.8 each), and on held-out parts of train one seed's model differed from the next by
as much as the gains sought (docs/fusion.md). Validation and test splits are never read.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from functools import partial

import numpy as np
import psycopg

from stark_pg.embed import canonical_name, encode, skb_encoder
from stark_pg.eval import metrics
from stark_pg.eval.query_sets import fold_of, from_split, learning_splits
from stark_pg.models.fusion import (TREE_SETTINGS, CrossFitted, FusionModel, FusionSettings, compile_sql, feature_pairs,
                                   fit_bag, fold_models, query_features, save, search_dense, tree_grid)
from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.retrieve.focus.answer_type import embed_split
from stark_pg.skb.catalog import require_skb
from stark_pg.skb.locks import lock_skb_name
from stark_pg.train.dense import FOLD_SEED
from stark_pg.train.extra_queries import ExtraQueries, read_extra_training_queries


MAX_LINK = 20     # stark.link_queries stores this many name matches per training question


def check_fold_models(conn: psycopg.Connection, skb_id: int, skb: str, name: str, folds: int) -> list[str]:
    """The fold models, or an error saying how to train the missing ones. Each must have been trained
    without its own fold (its recorded --fold): otherwise the feature would see its questions' answers."""
    models = fold_models(name, folds)
    for k, m in enumerate(models):
        row = sql().trained_dense_fold(conn, skb_id=skb_id, name=m)
        command = f"stark-pg train dense {skb} --name {m} --fold {k}/{folds}"
        if row is None:
            raise ValueError(f"--dense {name}: SKB {skb!r} has no trained dense model {m!r}; train it first: {command}")
        if row[0] != [k, folds]:
            raise ValueError(f"--dense {name}: model {m!r} was not trained without fold {k} of {folds} (its "
                             f"--fold: {row[0]}); retrain it: {command}")
    return models


def cross_fitted(conn: psycopg.Connection, skb_id: int, queries: list, name: str, folds: int) -> list[CrossFitted]:
    """Per training query: only the model trained without the query's own fold, and the query under it.
    The folds are those `train dense --fold` drew, over the whole training split."""
    fold = fold_of(from_split(conn, skb_id, "train"), folds, seed=FOLD_SEED)
    models = fold_models(name, folds)
    out: list[CrossFitted | None] = [None] * len(queries)
    for k, m in enumerate(models):
        mine = [i for i, q in enumerate(queries) if fold[q.query_id] == k]
        for i, v in zip(mine, encode([queries[i].body for i in mine], m) if mine else []):
            out[i] = CrossFitted([m], [v])
    return out


@dataclass
class QueryFeatures:
    query_id: int
    node_ids: list[int]
    X: np.ndarray
    y: np.ndarray


def train_fusion(conn: psycopg.Connection, skb: str, settings: FusionSettings | None = None,
                 progress: Reporter | None = None) -> dict:
    import lightgbm

    settings = settings or FusionSettings()
    if settings.bag < 1:
        raise ValueError(f"bag must be at least 1 (the models averaged), not {settings.bag}")
    if settings.repeats < 1:
        raise ValueError(f"repeats must be at least 1 (the draws of cross-validation's folds), not {settings.repeats}")
    if not 1 <= settings.link <= MAX_LINK:
        raise ValueError(f"link (--link) must be between 1 and {MAX_LINK} (the name matches stored per training "
                         f"question), not {settings.link}")
    if not settings.leaves or min(settings.leaves) < 2 or not settings.min_data_in_leaf \
            or min(settings.min_data_in_leaf) < 1 or not settings.rounds or min(settings.rounds) < 1:
        raise ValueError(f"leaves must be at least 2, min_data_in_leaf and rounds at least 1, each one value or "
                         f"more (leaves {settings.leaves}, min_data_in_leaf {settings.min_data_in_leaf}, "
                         f"rounds {settings.rounds})")
    progress = progress or NullReporter()
    started = time.perf_counter()
    skb_id = require_skb(conn, skb)
    extra = ExtraQueries([])
    if settings.extra_train:
        extra = read_extra_training_queries(conn, skb_id, settings.extra_train, settings.extra_min_share)
        if not extra.queries:
            raise ValueError(f"--extra-train {settings.extra_train}: no training question there that SKB {skb!r} "
                             f"lacks has an answer among its nodes ({extra.report})")
    splits = learning_splits(settings.splits)
    if settings.dense and splits != ["train"]:
        raise ValueError("--dense (cross-fitted over train's folds) and --splits other than train cannot be combined")
    model = canonical_name(settings.model)
    for split in splits:
        prepare_training_split(conn, skb, model, split)
    queries = [q for split in splits for q in from_split(conn, skb_id, split).queries[:settings.limit]]
    # cross-validation scores the real training questions only, when they are among the splits: settings are
    # chosen on questions like those the model will be judged on, never on synthesized ones
    real = {q.query_id for q in from_split(conn, skb_id, "train").queries} if "train" in splits else None
    scored = [i for i, q in enumerate(queries) if real is None or q.query_id in real]
    weights = synthetic_weights(settings, splits)
    if len(scored) < settings.folds * 2:
        raise ValueError(f"{len(scored)} training queries (splits {', '.join(splits)}) are too few for "
                         f"{settings.folds}-fold cross-validation")
    fold_dense = check_fold_models(conn, skb_id, skb, settings.dense, settings.dense_folds) if settings.dense else []
    names = list(sql().fusion_feature_names(conn, skb=skb, model=model, trained_dense=bool(settings.dense)))
    encoder = skb_encoder(conn, skb, model)       # the questions embedded as search will embed them
    vectors = encode([q.body for q in queries], model, encoder=encoder)
    dense = (cross_fitted(conn, skb_id, queries, settings.dense, settings.dense_folds) if settings.dense
             else [None] * len(queries))
    # the SKB's (field, scorer) pairs, read once here rather than by every question's features
    # (stark.fusion_pairs scans the SKB's fields, relations and chunk kinds); the same features
    featured_with = partial(_featured, pairs=feature_pairs(names))
    data = featured_with(conn, skb, queries, vectors, dense, settings, model, progress, "features (train queries)")
    # fitted on, never scored: cross-validation judges on the SKB's own questions only. No fold model of
    # trained_dense saw them, so they are new questions to it: the mean of all of them, as in search.
    extra_vectors = encode([q.body for q in extra.queries], model, encoder=encoder) if extra.queries else []
    extra_dense = [search_dense(q.body, fold_dense) if fold_dense else None for q in extra.queries]
    extra_data = featured_with(conn, skb, extra.queries, extra_vectors, extra_dense, settings, model, progress,
                           "features (extra training questions)")
    featured = time.perf_counter()
    # the trees' settings and the synthesized questions' weight, chosen together; ties go to the earlier
    grid = [trees | {"synthetic_weight": w} for trees in tree_grid(settings) for w in weights]
    extra_ids = {q.query_id for q in extra.queries}      # real STaRK questions: fitted on at full weight

    def fit(part: list[QueryFeatures], trees: dict, rounds: int, seeds: int = 1) -> list:
        """`seeds` models fitted on the same rows with the seeds settings.seed, settings.seed + 1, ... (fit_bag);
        a question of a split other than train weighs `synthetic_weight` (0: left out of the fit)"""
        trees = dict(trees)
        weight = trees.pop("synthetic_weight")
        weighed = [(q, 1.0 if real is None or q.query_id in real or q.query_id in extra_ids else weight)
                   for q in part if len(q.node_ids)]
        usable = [(q, w) for q, w in weighed if w > 0]
        train_set = lightgbm.Dataset(np.vstack([q.X for q, _ in usable]), np.concatenate([q.y for q, _ in usable]),
                                     group=[len(q.node_ids) for q, _ in usable], feature_name=_safe(names),
                                     weight=np.concatenate([np.full(len(q.node_ids), w) for q, w in usable]),
                                     free_raw_data=False)
        return fit_bag(lightgbm_params(settings, **trees), train_set, rounds, seeds)

    rounds_tried = sorted(set(settings.rounds))
    # (index in grid, rounds) -> each held-out question's metrics, once per repeat
    scores: dict[tuple[int, int], list] = {(g, r): [] for g in range(len(grid)) for r in rounds_tried}
    for repeat, k, held in cross_validation_folds(len(scored), settings):
        held = np.array([scored[i] for i in held])
        # the fold's questions leave the training split while every question's features are computed
        # again, so that no nearest-question feature draws on them: what val's questions see of train
        label = f"cross-validation, fold {k + 1} of {settings.folds}" + (
            f", repeat {repeat + 1} of {settings.repeats}" if settings.repeats > 1 else "") + ": features"
        with conn.transaction(force_rollback=True):
            hold_out(conn, skb_id, [queries[i].query_id for i in held])
            fold_data = featured_with(conn, skb, queries, vectors, dense, settings, model, progress, label)
            fold_extra = featured_with(conn, skb, extra.queries, extra_vectors, extra_dense, settings, model, progress,
                                   f"{label} (extra training questions)")
        kept = set(held.tolist())
        fitted = [d for i, d in enumerate(fold_data) if i not in kept] + fold_extra
        for g, trees in enumerate(grid):
            # one fit at the most rounds, scored after each number of rounds: a fit's first r rounds are
            # the fit of r rounds (the seeded sampling draws round by round)
            (booster,) = fit(fitted, trees, rounds_tried[-1])
            for rounds in rounds_tried:
                predict = partial(booster.predict, num_iteration=rounds)
                scores[g, rounds] += [_query_metrics(predict, fold_data[i], queries[i].answer_ids) for i in held]
    cv = [grid[g] | {"rounds": r} | {m: round(float(np.mean([s[m] for s in held_out])), 4) for m in ("hit@1", "mrr")}
          | {"scored": len(held_out)} for (g, r), held_out in scores.items()]
    # the best MRR; a tie goes to the simpler model: the earlier in the grid, then fewer rounds
    best = max(range(len(cv)), key=lambda i: (cv[i]["mrr"], -i))
    chosen = {f"chosen_{key}": cv[best][key] for key in (*TREE_SETTINGS, "synthetic_weight", "rounds")}
    trees = {key: cv[best][key] for key in (*TREE_SETTINGS, "synthetic_weight")}
    boosters = fit(data + extra_data, trees, cv[best]["rounds"], settings.bag)
    others = sum(1 for q in data if real is not None and q.query_id not in real)
    fitted = {"questions": len(data) + len(extra_data) - (others if trees["synthetic_weight"] == 0 else 0),
              "synthesized": 0 if trees["synthetic_weight"] == 0 else others}
    gains = np.mean([b.feature_importance("gain") for b in boosters], axis=0)
    importance = {n: round(float(g), 2) for n, g in sorted(zip(names, gains), key=lambda x: -x[1])}
    fusion = FusionModel(settings.name, model, names, [b.model_to_string() for b in boosters], compile_sql(boosters),
                         asdict(settings) | chosen | {"queries": len(data), "extra_queries": len(extra_data)},
                         {"cv": cv} | chosen, importance)
    save(conn, skb_id, fusion)
    return {"name": settings.name, "queries": len(data), "splits": splits, "scored_in_cv": len(scored),
            "extra_queries": len(extra_data), "fitted": fitted,
            "extra_train": extra.report or None, "features": len(names), "cv": cv} | chosen | {
            "bag": settings.bag, "repeats": settings.repeats, "importance": dict(list(importance.items())[:10]),
            "feature_seconds": round(featured - started, 1), "seconds": round(time.perf_counter() - started, 1)}


def synthetic_weights(settings: FusionSettings, splits: list[str]) -> list[float]:
    """The weights of synthesized questions cross-validation chooses among, 1 first (all questions alike,
    the simplest, wins ties). Only train's questions are real, so the weights mean something only beside
    train; without it every question weighs 1."""
    weights = sorted({float(w) for w in settings.synthetic_weight}, reverse=True)
    if not weights or weights[-1] < 0:
        raise ValueError(f"--synthetic-weight: each weight must be 0 or more, not {settings.synthetic_weight}")
    if weights != [1.0] and ("train" not in splits or splits == ["train"]):
        raise ValueError(f"--synthetic-weight weighs the questions of splits other than train beside train's: "
                         f"--splits must hold train and another split, not {','.join(splits)}")
    return weights


def cross_validation_folds(n: int, settings: FusionSettings):
    """(repeat, fold, indices held out) of `settings.folds`-fold cross-validation over n questions, repeated
    `settings.repeats` times over fresh seeded draws of the folds: each question is held out once per
    repeat. On 435 questions one draw's figures moved by as much as the settings they chose between
    (docs/fusion.md); averaging draws steadies the choice. The first draw is the one a single
    cross-validation has always used (seed `settings.seed`)."""
    for repeat in range(settings.repeats):
        rng = np.random.default_rng(settings.seed if repeat == 0 else [settings.seed, repeat])
        for k, held in enumerate(np.array_split(rng.permutation(n), settings.folds)):
            yield repeat, k, held


def prepare_training_split(conn: psycopg.Connection, skb: str, model: str, split: str = "train") -> dict:
    """What the features read of the training questions, stored where missing or stale: their vectors
    (the nearest questions of type_share and the knn_* features) and their best name matches (the
    questions naming the same entity of the ent_* features); how many of each it stored. The links are
    stored under the SKB's name lock: two trainings of one SKB at once would otherwise insert the same
    new question's rows (vectors are upserted and need none)."""
    embedded = embed_split(conn, skb, split, model)
    with conn.transaction():
        lock_skb_name(conn, skb)
        links = sql().link_queries(conn, skb=skb, split=split, depth=MAX_LINK)
    return {"embedded": embedded, "link_rows": links}


def prepare_fusion_questions(conn: psycopg.Connection, skb: str, progress: Reporter | None = None) -> dict:
    """After new training questions are loaded into an SKB that has fusion models: what those models'
    features read of them, prepared now ({query encoder: prepare_training_split's counts}; empty when the
    SKB has no fusion model). Search never writes, so without this a new question would stay invisible
    to the nearest-question and same-entity features until the next `train fusion`. One progress stage
    per encoder: embedding a few thousand new questions takes a while on a CPU."""
    progress = progress or NullReporter()
    skb_id = require_skb(conn, skb)
    prepared = {}
    for (model,) in sql().fusion_embed_models(conn, skb_id=skb_id):
        with progress.stage(f"fusion: training questions for {model}"):
            prepared[model] = prepare_training_split(conn, skb, model)
    return prepared


def hold_out(conn: psycopg.Connection, skb_id: int, query_ids: list[int]) -> None:
    """Inside the caller's transaction, to be rolled back: these training questions move to the split
    `holdout`, so that the features of every question (type_share and the knn_* features read the
    training split) are computed as if they were new questions."""
    sql().hold_out_queries(conn, skb_id=skb_id, query_ids=query_ids)


def _featured(conn: psycopg.Connection, skb: str, queries: list, vectors, dense: list, settings: FusionSettings,
              model: str, progress: Reporter, label: str,
              pairs: tuple[list[str], list[str]] | None = None) -> list[QueryFeatures]:
    """Each query's candidates, features and labels (1 for its answers); `pairs` as query_features takes them."""
    data: list[QueryFeatures] = []
    with progress.stage(label, total=len(queries)) as stage:
        for query, vector, fitted in zip(queries, vectors, dense):
            node_ids, X = query_features(conn, skb, query.body, vector, settings, model, fitted, pairs)
            answers = set(query.answer_ids)
            data.append(QueryFeatures(query.query_id, node_ids, X, np.array([n in answers for n in node_ids], float)))
            stage.advance()
    return data


def lightgbm_params(settings: FusionSettings, leaves: int, min_data_in_leaf: int) -> dict:
    """LightGBM's settings for a fusion model with these tree settings (one point of tree_grid; also what
    the benchmarks fit with)."""
    return {"objective": "lambdarank", "metric": "ndcg", "learning_rate": settings.learning_rate,
            "num_leaves": leaves, "min_data_in_leaf": min_data_in_leaf,
            "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1,
            "lambdarank_truncation_level": 20, "verbose": -1, "seed": settings.seed, "num_threads": 2,
            "deterministic": True, "force_row_wise": True}


def ranked_by(node_ids: list[int], scores) -> list[int]:
    """The candidates best first, ties by node id: the order the SQL's `order by score desc, node_id` gives."""
    return [node_ids[i] for i in sorted(range(len(node_ids)), key=lambda i: (-scores[i], node_ids[i]))]


def _query_metrics(predict, q: QueryFeatures, answer_ids: list[int]) -> dict:
    if not q.node_ids:
        return {"hit@1": 0.0, "mrr": 0.0}
    values = metrics.evaluate(ranked_by(q.node_ids, predict(q.X)), answer_ids)
    return {"hit@1": values["hit@1"], "mrr": values["mrr"]}


def _safe(names: list[str]) -> list[str]:
    """LightGBM refuses some characters in feature names (JSON ones); the SQL keeps the real names."""
    return [f"f{i}_" + "".join(c if c.isalnum() else "_" for c in n) for i, n in enumerate(names, 1)]
