"""Where a fusion search's time goes: the query's embedding, the features (stark.fusion_features), the
compiled trees over them, and, as a yardstick in the same run, LightGBM's own prediction over the same
feature vectors (compiled C++ against PostgreSQL's expression interpreter).

Run by hand (figures in docs/fusion.md, "Latency"):
    python benchmarks/fusion_latency.py stark-prime-ibd [--model default] [--split train] [--questions 40] [--json]

Each question is embedded, then its ranking statement (sql/templates/fusion.sql, `rank`) and the same
call without the trees (`features`) run alternately on one connection, planned generically as search
plans them (stark_pg.retrieve.fusion.generic_plan); the first `--warmup` questions are left out of the
figures (psycopg prepares a statement on its fifth run). The rankings are the ones `stark-pg search -m
fusion` returns; nothing is written. Trees = ranking statement minus features, per question.

--engines sql,auto times the ranking statement with each BM25 engine of the lexical shortlists in turns
(the order alternating per question): 'sql' is the SQL engine's pass over every field, what fusion
computed before it took the SKB's pg_textsearch indexes ('auto'); it also counts the questions whose
rankings differ (there should be none: the features are the same). --training N times, for N training
questions, the features as `stark-pg train fusion` computes them for each question and fold, before
(the SKB's (field, scorer) pairs read by stark.fusion_pairs on every call, the SQL engine) and now (the
pairs passed, engine auto), in turns, and checks that both give the same feature vectors:

    python benchmarks/fusion_latency.py synthetic-100000 --split val --engines sql,auto --training 40
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stark_pg.db import connect  # noqa: E402
from stark_pg.embed import encode_query  # noqa: E402
from stark_pg.eval.query_sets import from_split  # noqa: E402
from stark_pg.retrieve.fusion import generic_plan, rank_params, template  # noqa: E402
from stark_pg.skb.catalog import require_skb  # noqa: E402
from stark_pg.models.fusion import FusionSettings, bag_predict, load, query_features  # noqa: E402


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def measure(conn, skb: str, name: str, split: str, questions: int, warmup: int) -> dict:
    skb_id = require_skb(conn, skb)
    model = load(conn, skb_id, skb, name)
    if model.settings.get("dense"):
        raise SystemExit(f"fusion model {name!r} uses trained_dense models; time it with `stark-pg eval` instead")
    s = model.settings
    boosters = model.boosters()
    bodies = [q.body for q in from_split(conn, skb_id, split).queries][: questions + warmup]
    if len(bodies) <= warmup:
        raise SystemExit(f"split {split!r} of SKB {skb!r} has {len(bodies)} questions; more than --warmup "
                         f"({warmup}) are needed")
    times: dict[str, list[float]] = {"embedding": [], "features": [], "ranking statement": [], "trees": [],
                                     "lightgbm predict": []}
    candidates = []
    for body in bodies:
        vector = None

        def embed():
            nonlocal vector
            vector = encode_query(body, model.embed_model)

        times["embedding"].append(timed(embed))
        params = rank_params(skb, body, vector, model, 10)
        with generic_plan(conn):
            times["features"].append(timed(lambda: conn.execute(template("features", model), params).fetchall()))
        with generic_plan(conn):
            times["ranking statement"].append(timed(lambda: conn.execute(template("rank", model), params).fetchall()))
        times["trees"].append(times["ranking statement"][-1] - times["features"][-1])
        _, X = query_features(conn, skb, body, vector, FusionSettings(pool=s["pool"], knn=s["knn"], link=s["link"]),
                              model.embed_model)
        X = X[:, : len(model.features)]
        candidates.append(len(X))
        times["lightgbm predict"].append(timed(lambda: bag_predict(boosters, X)))
    figures = {key: {"p50": round(float(np.percentile(v[warmup:], 50)), 1),
                     "p95": round(float(np.percentile(v[warmup:], 95)), 1)} for key, v in times.items()}
    trees = sum(b.num_trees() for b in boosters)
    return {"skb": skb, "model": name, "split": split, "questions": len(bodies) - warmup, "trees": trees,
            "features": len(model.features), "candidates_p50": int(np.median(candidates[warmup:])), "ms": figures}


def percentiles(values: list[float]) -> dict:
    return {"p50": round(float(np.percentile(values, 50)), 1), "p95": round(float(np.percentile(values, 95)), 1),
            "max": round(float(np.max(values)), 1)}


def compare_engines(conn, skb: str, name: str, split: str, questions: int, warmup: int, engines: list[str]) -> dict:
    """The ranking statement (the query's embedding left out) with each engine, in turns per question;
    without a trained model, the features alone as search computes them (its pairs passed: the SKB's)."""
    from stark_pg.embed import canonical_name
    from stark_pg.models.fusion import feature_pairs
    from stark_pg.resources import queries as sql

    skb_id = require_skb(conn, skb)
    trained = sql().fusion_model_version(conn, skb_id=skb_id, name=name) is not None
    model = load(conn, skb_id, skb, name) if trained else None
    embed_model = model.embed_model if model else canonical_name(None)
    fields, scorers = feature_pairs(list(sql().fusion_feature_names(conn, skb=skb, model=embed_model,
                                                                    trained_dense=False)))
    bodies = [q.body for q in from_split(conn, skb_id, split).queries][: questions + warmup]
    times: dict[str, list[float]] = {e: [] for e in engines}
    differ = 0
    for i, body in enumerate(bodies):
        vector = encode_query(body, embed_model)
        ranked = {}
        for engine in (engines if i % 2 == 0 else engines[::-1]):
            started = time.perf_counter()
            if model is None:
                ranked[engine] = conn.execute(
                    "select node_id, f from stark.fusion_features(%s, %s, %s, %s, pair_fields => %s, "
                    "pair_scorers => %s, engine => %s) order by node_id",
                    (skb, body, vector, embed_model, fields, scorers, engine)).fetchall()
            else:
                params = rank_params(skb, body, vector, model, 10, engine=engine)
                with generic_plan(conn):
                    ranked[engine] = conn.execute(template("rank", model), params).fetchall()
            if i >= warmup:
                times[engine].append((time.perf_counter() - started) * 1000)
        differ += i >= warmup and any(r != ranked[engines[0]] for r in ranked.values())
    what = "ranking statement" if model else "features (no model: default settings)"
    return {"skb": skb, "model": name if model else None, "split": split, "questions": len(bodies) - warmup,
            f"{what} ms": {e: percentiles(v) for e, v in times.items()}, "results that differ": differ}


def training_features(conn, skb: str, name: str, count: int) -> dict:
    """One training question's features as training computes them, before and now, in turns (with the
    model's settings, or training's defaults when there is no model yet)."""
    from stark_pg.models.fusion import feature_pairs
    from stark_pg.resources import queries as sql

    from stark_pg.embed import canonical_name

    skb_id = require_skb(conn, skb)
    if sql().fusion_model_version(conn, skb_id=skb_id, name=name) is not None:
        model = load(conn, skb_id, skb, name)
        s = model.settings
        settings = FusionSettings(pool=s["pool"], knn=s["knn"], link=s["link"], splits=s.get("splits") or ["train"])
        embed_model = model.embed_model
    else:                             # no model yet: training's default settings
        settings, embed_model = FusionSettings(), canonical_name(None)
    names = list(sql().fusion_feature_names(conn, skb=skb, model=embed_model, trained_dense=False))
    pairs = feature_pairs(names)
    ways = {"before: fusion_pairs per call, engine sql": {"pairs": None, "engine": "sql"},
            "now: pairs passed, engine auto": {"pairs": pairs, "engine": "auto"}}
    times: dict[str, list[float]] = {w: [] for w in ways}
    differ = 0
    for i, q in enumerate(from_split(conn, skb_id, "train").queries[:count]):
        vector = encode_query(q.body, embed_model)
        got = {}
        for way in (list(ways) if i % 2 == 0 else list(ways)[::-1]):
            started = time.perf_counter()
            got[way] = query_features(conn, skb, q.body, vector, settings, embed_model, **ways[way])
            times[way].append((time.perf_counter() - started) * 1000)
        a, b = got.values()
        differ += not (a[0] == b[0] and np.array_equal(a[1], b[1]))
    return {"skb": skb, "training questions": count, "features ms": {w: percentiles(v) for w, v in times.items()},
            "questions whose features differ": differ}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("skb")
    parser.add_argument("--model", default="default", help="the fusion model (`stark-pg train fusion --name`)")
    parser.add_argument("--split", default="train", help="whose questions are timed (default: train)")
    parser.add_argument("--questions", type=int, default=40, help="questions timed, after the warm-up ones")
    parser.add_argument("--warmup", type=int, default=5, help="questions run first and left out of the figures")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--engines", default=None, help="compare the ranking statement on these BM25 engines "
                                                        "(comma-separated: sql, auto, textsearch)")
    parser.add_argument("--training", type=int, default=0, help="also time N training questions' features, "
                                                                "before and now")
    args = parser.parse_args()
    if args.engines or args.training:
        with connect() as conn:
            out = {}
            if args.engines:
                out["engines"] = compare_engines(conn, args.skb, args.model, args.split, args.questions, args.warmup,
                                                 [e.strip() for e in args.engines.split(",")])
            if args.training:
                out["training"] = training_features(conn, args.skb, args.model, args.training)
        print(json.dumps(out, indent=2))
        return
    with connect() as conn:
        result = measure(conn, args.skb, args.model, args.split, args.questions, args.warmup)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['skb']}, model {result['model']}: {result['trees']} trees over {result['features']} features, "
          f"{result['questions']} {result['split']} questions, median {result['candidates_p50']} candidates")
    for key, value in result["ms"].items():
        print(f"  {key:18} p50 {value['p50']:7.1f} ms   p95 {value['p95']:7.1f} ms")


if __name__ == "__main__":
    main()
