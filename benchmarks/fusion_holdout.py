"""Learned fusion judged the way val judges it, on train alone: a held-out part of train that sees only the rest.

Run by hand (figures in docs/fusion.md, "How far cross-validation can be trusted"):
    python benchmarks/fusion_holdout.py stark-prime-ibd --seed 1 [--seed 2 ...] [--rounds 100,200]
    python benchmarks/fusion_holdout.py stark-prime-ibd --seed 1 --seed 2 --no-groups --param num_leaves=7
    python benchmarks/fusion_holdout.py stark-prime-ibd --seed 3 --seed 4 --no-groups --bag 5 --features DIR
    python benchmarks/fusion_holdout.py stark-prime-ibd --seed 1 --no-groups --features DIR \
        --extra-train ../shared/data/stark-qa/primekg      # also fit on STaRK's partly-inside training questions
    python benchmarks/fusion_holdout.py stark-prime-ibd --seed 1 --no-groups --features DIR --setting knn=20
    python benchmarks/fusion_holdout.py stark-prime-ibd --seed 1 --no-groups --features DIR \
        --pool-split synthetic --synthetic-weight 0 --synthetic-weight 1   # synthesized questions: pool, fit
    python benchmarks/fusion_holdout.py stark-prime-ibd --seed 1 --no-groups --features DIR --keep 0.5 --keep 1
        # a learning curve: half of the rest of train, then all of it; each row also splits the held-out
        # questions by whether a fitted question has exactly their answers (a twin)

Why: `stark-pg train fusion` chose its rounds by k-fold cross-validation over features computed once
for all training questions, so a held-out question's neighbour features (type_share, knn_answer) draw
on the other held-out questions too. A val question's features draw on train only. (Since 2026-11-27
its folds are held out the same way, stark_pg.train.fusion.hold_out; this check still gives many
draws, and fits variants on features kept in DIR.) Here a seeded 20%
of train is relabelled `holdout` inside a transaction that is rolled back (nothing is written), the
features of every training question are computed then (the 80% see only each other, the 20% see only
the 80%, exactly as val sees train), LightGBM is fitted on the 80% with `train fusion`'s settings, and
the 20% are scored: for all features and without each group of benchmarks/fusion_ablation.py.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fusion_ablation import variants  # noqa: E402

from stark_pg.db import connect  # noqa: E402
from stark_pg.embed import canonical_name, encode  # noqa: E402
from stark_pg.eval import metrics  # noqa: E402
from stark_pg.eval.query_sets import from_split  # noqa: E402
from stark_pg.resources import queries as sql  # noqa: E402
from stark_pg.skb.catalog import require_skb  # noqa: E402
from stark_pg.models.fusion import FusionSettings, bag_predict, fit_bag, query_features  # noqa: E402
from stark_pg.train.extra_queries import read_extra_training_queries  # noqa: E402
from stark_pg.train.fusion import (check_fold_models, cross_fitted, hold_out, lightgbm_params,  # noqa: E402
                                   prepare_training_split, ranked_by)


def held_ids(conn, skb_id: int, seed: int, share: float) -> set[int]:
    """The seeded `share` of the training split held out."""
    queries = from_split(conn, skb_id, "train").queries
    order = np.random.default_rng(seed).permutation(len(queries))
    return {queries[i].query_id for i in order[: int(len(queries) * share)]}


def dropped_ids(queries: list, held: set[int], seed: int, keep: float) -> set[int]:
    """With `keep` < 1, the training questions (`queries`, the whole split) outside the held-out part
    that are left out altogether (the learning curve: only `keep` of them stay in the training split, to
    be fitted on and drawn on). Seeded by the draw, and nested: a smaller `keep` leaves out a superset
    of what a larger one does."""
    rest = [q.query_id for q in queries if q.query_id not in held]
    order = np.random.default_rng([seed, 1]).permutation(len(rest))
    return {rest[i] for i in order[int(round(len(rest) * keep)):]}


def has_twin(question, others: list) -> bool:
    """Whether another question (of other text) has exactly its answers: on the slice the strongest
    predictor of a first-place answer (docs/fusion.md, "How much train there is")."""
    answers = set(question.answer_ids)
    return any(set(o.answer_ids) == answers and o.body != question.body for o in others)


FEATURE_SETTINGS = ("pool", "knn", "link")       # the settings of train fusion that change the features


def feature_settings(pairs: list[str]) -> FusionSettings:
    """`train fusion`'s settings with the feature settings given as KEY=VALUE (pool, knn, link) changed."""
    changed = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in FEATURE_SETTINGS or not value.isdigit():
            raise SystemExit(f"--setting {pair!r}: expected pool=N, knn=N or link=N")
        changed[key] = int(value)
    return FusionSettings(**changed)


def feature_row(conn, skb: str, q, vector, settings: FusionSettings, model: str, dense=None) -> tuple:
    """(query, candidate ids, features, labels): one question's row, as `train fusion` computes it."""
    ids, X = query_features(conn, skb, q.body, vector, settings, model, dense)
    answers = set(q.answer_ids)
    return q, ids, X, np.array([n in answers for n in ids], float)


def holdout_features(conn, skb: str, skb_id: int, seed: int, share: float, model: str,
                     dense: str | None = None, dense_folds: int = 2, pooled: list | None = None,
                     settings: FusionSettings | None = None, keep: float = 1.0, pool_splits: tuple = ()):
    """(fit rows, held rows) of (query, ids, X, y), computed with the held part relabelled; rolled back.
    With `keep` < 1 the questions of dropped_ids are relabelled too, and neither fitted nor scored.
    With `dense`, trained_dense is cross-fitted over the whole training split, as `train fusion --dense`
    does: a held-out question, like every other, is scored by the fold model that never saw it.
    `pooled` questions are added to the training split for the time of the transaction, as if loaded:
    every question's nearest-question features draw on them too, and they are fitted on.
    The questions of `pool_splits` (synthesized ones) join the pool as `train fusion --splits
    train,SPLIT` has them (settings.splits) and come last among the fit rows."""
    settings = settings or FusionSettings()
    if pool_splits:
        settings = replace(settings, splits=["train", *pool_splits])
    split = from_split(conn, skb_id, "train").queries
    held = held_ids(conn, skb_id, seed, share)
    dropped = dropped_ids(split, held, seed, keep) if keep < 1 else set()
    queries = [q for q in split if q.query_id not in dropped]
    fitted = cross_fitted(conn, skb_id, queries, dense, dense_folds) if dense else [None] * len(queries)
    queries, fitted = queries + list(pooled or []), fitted + [None] * len(pooled or [])
    others = [q for name in pool_splits for q in from_split(conn, skb_id, name).queries]
    queries, fitted = queries + others, fitted + [None] * len(others)
    vectors = encode([q.body for q in queries], model)
    fit, out = [], []
    with conn.transaction(force_rollback=True):
        if pooled:
            with conn.cursor().copy("copy stark.query (skb_id, query_id, split, body, answer_ids) from stdin") as copy:
                for q in pooled:
                    copy.write_row((skb_id, q.query_id, "train", q.body, q.answer_ids))
            prepare_training_split(conn, skb, model)
        hold_out(conn, skb_id, list(held | dropped))
        for q, v, f in zip(queries, vectors, fitted):
            (out if q.query_id in held else fit).append(feature_row(conn, skb, q, v, settings, model, f))
    return fit, out


def extra_features(conn, skb: str, skb_id: int, seed: int, share: float, model: str, extra: list,
                   settings: FusionSettings | None = None) -> list:
    """Fit rows for the extra training questions (stark_pg.train.extra_queries), computed with the same
    part of train relabelled as holdout_features does (rolled back): their nearest-question features
    draw on the fitted part of train only, like every fitted question's."""
    settings = settings or FusionSettings()
    vectors = encode([q.body for q in extra], model)
    rows = []
    with conn.transaction(force_rollback=True):
        hold_out(conn, skb_id, list(held_ids(conn, skb_id, seed, share)))
        for i, (q, v) in enumerate(zip(extra, vectors)):
            rows.append(feature_row(conn, skb, q, v, settings, model))
            if i % 100 == 99:
                print(f"seed {seed}: features of {i + 1} of {len(extra)} extra questions", file=sys.stderr, flush=True)
    return rows


def relative(X: np.ndarray) -> np.ndarray:
    """The features and, beside them, each minus its best value among the question's candidates
    (a per-question view that the trees cannot build from the features alone)."""
    return np.hstack([X, X - X.max(axis=0, keepdims=True)]) if len(X) else X


def main() -> None:
    import lightgbm

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("skb")
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--seed", type=int, action="append", help="holdout draw (repeatable; default 1)")
    parser.add_argument("--share", type=float, default=0.2, help="share of train held out")
    parser.add_argument("--keep", type=float, action="append",
                        help="share of the rest of train kept (fitted on, and drawn on by the nearest-question "
                             "features); the others leave the training split: a learning curve (repeatable; "
                             "default 1)")
    parser.add_argument("--rounds", default="100", help="boosting rounds to report (comma-separated)")
    parser.add_argument("--leaves", type=int, default=15,
                        help="leaves per tree (train fusion chooses among --leaves 7,15 by cross-validation)")
    parser.add_argument("--min-data-in-leaf", type=int, default=20)
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a LightGBM setting to override, e.g. num_leaves=7 (repeatable)")
    parser.add_argument("--groups", action=argparse.BooleanOptionalAction, default=True,
                        help="also score without each feature group")
    parser.add_argument("--features", default=None, metavar="DIR",
                        help="keep each draw's features in DIR (re-runs with other settings read them)")
    parser.add_argument("--dense", default=None, metavar="NAME",
                        help="add trained_dense from the fold models NAME-fold<k>of<n> (train dense --fold k/n)")
    parser.add_argument("--dense-folds", type=int, default=2)
    parser.add_argument("--bag", type=int, default=FusionSettings().bag, metavar="N",
                        help="score with the mean of N models fitted with LightGBM seeds 1..N, as `train fusion "
                             "--bag N` (default: its default)")
    parser.add_argument("--relative", action="store_true",
                        help="add each feature minus its best value among the question's candidates")
    parser.add_argument("--extra-train", default=None, metavar="QA_DIR", type=Path,
                        help="also fit on the training questions of a STaRK QA directory that the SKB lacks, "
                             "answers cut to its nodes (stark_pg.train.extra_queries); the held-out part is unchanged")
    parser.add_argument("--extra-min-share", type=float, default=0.0, metavar="S",
                        help="with --extra-train: only questions with at least this share of their answers in the SKB")
    parser.add_argument("--extra-pool", action="store_true",
                        help="with --extra-train: the extra questions also join the training split that the "
                             "nearest-question features draw on (as if loaded into the SKB)")
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                        help="a feature setting of train fusion to change: pool, knn or link (repeatable)")
    parser.add_argument("--pool-split", action="append", default=[], metavar="SPLIT",
                        help="a split of synthesized questions that joins the pool and the fit, as `train fusion "
                             "--splits train,SPLIT` (repeatable); the held-out part stays train's")
    parser.add_argument("--synthetic-weight", type=float, action="append", metavar="W",
                        help="with --pool-split: the fit weight of those questions' rows, one row of figures each "
                             "(repeatable; 0 keeps them in the pool only; default 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    conn = connect(args.dsn) if args.dsn else connect()
    skb_id = require_skb(conn, args.skb)
    model = canonical_name(None)
    for split in ["train", *args.pool_split]:
        prepare_training_split(conn, args.skb, model, split)
    if args.dense:
        check_fold_models(conn, skb_id, args.skb, args.dense, args.dense_folds)
    names = list(sql().fusion_feature_names(conn, skb=args.skb, model=model, trained_dense=bool(args.dense)))
    settings = feature_settings(args.setting)
    changed = "".join(f"-{k}{getattr(settings, k)}" for k in FEATURE_SETTINGS
                      if getattr(settings, k) != getattr(FusionSettings(), k))     # in the cache files' names
    params = lightgbm_params(settings, args.leaves, args.min_data_in_leaf) | {
        k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)}
    extra = []
    if args.extra_train:
        picked = read_extra_training_queries(conn, skb_id, args.extra_train, args.extra_min_share)
        extra = picked.queries
        print(json.dumps({"extra_train": picked.report}), file=sys.stderr, flush=True)
    if any(not 0 < k <= 1 for k in args.keep or []) or (args.keep and (extra or args.dense)):
        raise SystemExit("--keep: shares in (0, 1], without --extra-train or --dense")
    table = []
    for seed, kept in [(seed, kept) for seed in args.seed or [1] for kept in args.keep or [1.0]]:
        tag = f"-dense-{args.dense}-{args.dense_folds}" if args.dense else ""
        tag += f"-pooled{len(extra)}" if args.extra_pool else ""
        tag += changed + (f"-keep{kept}" if kept < 1 else "") + "".join(f"-pool-{p}" for p in args.pool_split)
        cached = Path(args.features) / f"{args.skb}-seed{seed}-share{args.share}{tag}.pkl" if args.features else None
        if cached and cached.exists():
            fit_rows, held_rows = pickle.loads(cached.read_bytes())
        else:
            fit_rows, held_rows = holdout_features(conn, args.skb, skb_id, seed, args.share, model, args.dense,
                                                   args.dense_folds, extra if args.extra_pool else None, settings,
                                                   kept, tuple(args.pool_split))
            if cached:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_bytes(pickle.dumps((fit_rows, held_rows)))
        # a twin among the training split's questions (not the extra ones, which only the fit sees)
        twin = [has_twin(q, [r[0] for r in fit_rows]) for q, *_ in held_rows]
        if extra and not args.extra_pool:
            cached_extra = (Path(args.features) / f"{args.skb}-seed{seed}-share{args.share}{tag}-extra{len(extra)}.pkl"
                            if args.features else None)
            if cached_extra and cached_extra.exists():
                extra_rows = pickle.loads(cached_extra.read_bytes())
            else:
                extra_rows = extra_features(conn, args.skb, skb_id, seed, args.share, model, extra, settings)
                if cached_extra:
                    cached_extra.write_bytes(pickle.dumps(extra_rows))
            fit_rows = fit_rows + extra_rows
        train_ids = {q.query_id for q in from_split(conn, skb_id, "train").queries} | {q.query_id for q in extra}
        for (label, keep), weight in [(v, w) for v in variants(names, args.groups)
                                      for w in (args.synthetic_weight or [1.0])]:
            # a synthesized question's rows weigh `weight` (0: left out of the fit, still in the pool)
            usable = [(r, 1.0 if r[0].query_id in train_ids else weight) for r in fit_rows if len(r[1])]
            usable = [(r, w) for r, w in usable if w > 0]
            matrix = (lambda X: relative(X[:, keep])) if args.relative else (lambda X: X[:, keep])
            data = lightgbm.Dataset(np.vstack([matrix(r[2]) for r, _ in usable]),
                                    np.concatenate([r[3] for r, _ in usable]),
                                    group=[len(r[1]) for r, _ in usable], free_raw_data=False,
                                    weight=np.concatenate([np.full(len(r[1]), w) for r, w in usable]))
            for rounds in map(int, args.rounds.split(",")):
                boosters = fit_bag(params, data, rounds, args.bag)
                scores = [metrics.evaluate(ranked_by(ids, bag_predict(boosters, matrix(X)))
                                           if len(ids) else [], q.answer_ids)
                          for q, ids, X, _ in held_rows]
                table.append({"seed": seed, "variant": label, "rounds": rounds, "held": len(held_rows),
                              "fitted": len(usable), "keep": kept, "synthetic_weight": weight}
                             | {m: round(float(np.mean([s[m] for s in scores])), 3) for m in ("hit@1", "mrr")}
                             | {"with_twin": sum(twin)}
                             | {f"{m} {part}": round(float(np.mean(picked)), 3) if picked else None
                                for m in ("hit@1", "mrr") for part, wanted in (("twin", True), ("no twin", False))
                                for picked in [[s[m] for s, t in zip(scores, twin) if t == wanted]]})
                print(json.dumps(table[-1]), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(table, indent=2))
        return
    print("| seed | variant | synthetic weight | rounds | fitted questions | held-out questions (with a twin) "
          "| Hit@1 | MRR |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in table:
        print(f"| {r['seed']} | {r['variant']} | {r['synthetic_weight']:g} | {r['rounds']} | {r['fitted']} "
              f"| {r['held']} ({r['with_twin']}) | {r['hit@1']:.3f} | {r['mrr']:.3f} |")


if __name__ == "__main__":
    main()
