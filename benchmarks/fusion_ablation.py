"""What each feature group of learned fusion adds: cross-validated on train, reported on val.

Run by hand (figures in the README's "Learned fusion" section):
    python benchmarks/fusion_ablation.py stark-prime-ibd [--dsn URL]

Features of every train and val query are computed once (stark.fusion_features, as search does);
then for the full set and for the set without each group, LightGBM is fitted on all of train with
the settings `stark-pg train fusion` uses (a bag of as many models, `--bag` overrides) and the number
of rounds and leaves the stored model chose by cross-validation on train (`--rounds`, `--leaves`
override), and scored on val. Val never chooses anything.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from pathlib import Path

import numpy as np

from stark_pg.db import connect
from stark_pg.embed import canonical_name, encode
from stark_pg.eval import metrics
from stark_pg.eval.query_sets import from_split
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb
from stark_pg.models.fusion import FusionSettings, bag_predict, chosen_trees, fit_bag, query_features
from stark_pg.train.fusion import lightgbm_params, prepare_training_split, ranked_by

GROUPS = {
    "lexical (BM25 per field)": lambda n: n.endswith("|lexical") or n.endswith("|lexical|norm"),
    "dense (cosine per field)": lambda n: n.endswith("|dense"),
    "type_share": lambda n: n == "type_share",
    "knn_answer": lambda n: n == "knn_answer",
    "knn_best, knn_first": lambda n: n in ("knn_best", "knn_first"),
    "graph (linked, hop1, hop2)": lambda n: n in ("linked", "hop1", "hop2"),
    "ent_answer, ent_best": lambda n: n in ("ent_answer", "ent_best"),
    "hop1_sum, hop1_second, hop1_count": lambda n: n in ("hop1_sum", "hop1_second", "hop1_count"),
    "trained_dense": lambda n: n == "trained_dense",
}


def variants(names: list[str], groups: bool = True) -> list[tuple[str, list[int]]]:
    """(label, feature columns kept): all features and, with `groups`, all but each group of GROUPS that
    these features have (a group absent from this SKB, e.g. trained_dense, gives no variant)."""
    out = [("all features", list(range(len(names))))]
    for group, drop in GROUPS.items() if groups else []:
        keep = [i for i, n in enumerate(names) if not drop(n)]
        if len(keep) < len(names):
            out.append((f"without {group}", keep))
    return out


def main() -> None:
    import lightgbm

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("skb")
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=None, help="default: the stored model 'default' chose")
    parser.add_argument("--leaves", type=int, default=None, help="default: the stored model 'default' chose")
    parser.add_argument("--bag", type=int, default=FusionSettings().bag,
                        help="models per variant, seeds 1..N, scoring by their mean (train fusion's default)")
    parser.add_argument("--features", default=None, help="a pickle file to keep the computed features in (re-runs "
                                                          "read it instead of computing them again)")
    args = parser.parse_args()
    settings = FusionSettings()
    conn = connect(args.dsn) if args.dsn else connect()
    skb_id = require_skb(conn, args.skb)
    stored = conn.execute("select settings from stark.fusion_model where skb_id = %s and name = 'default'",
                          (skb_id,)).fetchone()
    if stored is None:
        raise SystemExit(f"no fusion model 'default' for {args.skb}: run `stark-pg train fusion {args.skb}` first")
    model = canonical_name(None)
    prepare_training_split(conn, args.skb, model)
    names = list(sql().fusion_feature_names(conn, skb=args.skb, model=model, trained_dense=False))
    started = time.perf_counter()
    data = {}
    cached = Path(args.features) if args.features else None
    if cached and cached.exists():
        data = pickle.loads(cached.read_bytes())
    for split in ("train", "val"):
        if split in data:
            continue
        queries = from_split(conn, skb_id, split).queries
        vectors = encode([q.body for q in queries], model)
        data[split] = []
        for q, v in zip(queries, vectors):
            ids, X = query_features(conn, args.skb, q.body, v, settings, model)
            data[split].append((q, ids, X, np.array([n in set(q.answer_ids) for n in ids], float)))
    if cached:
        cached.write_bytes(pickle.dumps(data))
    print(f"features of {sum(map(len, data.values()))} queries in {time.perf_counter() - started:.0f} s", flush=True)
    trees = chosen_trees(stored[0]) | ({"leaves": args.leaves} if args.leaves else {})
    params = lightgbm_params(settings, **trees)

    def fit(rows, keep, rounds):
        rows = [r for r in rows if len(r[1])]
        ds = lightgbm.Dataset(np.vstack([r[2][:, keep] for r in rows]), np.concatenate([r[3] for r in rows]),
                              group=[len(r[1]) for r in rows], free_raw_data=False)
        return fit_bag(params, ds, rounds, args.bag)

    def score(boosters, rows, keep):
        out = {"hit@1": [], "hit@5": [], "recall@20": [], "mrr": []}
        for q, ids, X, _ in rows:
            ranked = ranked_by(ids, bag_predict(boosters, X[:, keep])) if len(ids) else []
            values = metrics.evaluate(ranked, q.answer_ids)
            for m in out:
                out[m].append(values[m])
        return {m: round(float(np.mean(v)), 3) for m, v in out.items()}

    rounds = args.rounds or stored[0]["chosen_rounds"]
    table = []
    for label, keep in variants(names):
        fit_started = time.perf_counter()
        boosters = fit(data["train"], keep, rounds)
        fit_seconds = time.perf_counter() - fit_started
        val = score(boosters, data["val"], keep)
        table.append({"variant": label, "features": len(keep), "rounds": rounds, "leaves": trees["leaves"],
                      "bag": args.bag, "fit_seconds": round(fit_seconds, 1)} | val)
        print(json.dumps(table[-1]), flush=True)
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        print("\n| variant | features | val Hit@1 | val Hit@5 | val R@20 | val MRR |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in table:
            print(f"| {r['variant']} | {r['features']} | {r['hit@1']:.3f} | {r['hit@5']:.3f} | "
                  f"{r['recall@20']:.3f} | {r['mrr']:.3f} |")


if __name__ == "__main__":
    main()
