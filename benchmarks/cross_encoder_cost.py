"""What `fusion-ce` costs per query over fusion alone, at N = 5, 10, 20 re-scored results.

Run by hand (figures in docs/fusion.md, "A cross-encoder over fusion's top N"):
    python benchmarks/cross_encoder_cost.py stark-prime-ibd [--name default] [--questions 30] [--threads 2]

Each question is searched by fusion alone and by fusion-ce at every N, one after the other (the same
load on the machine for all), after one warm-up search of each (the models loaded, the statements
prepared). fusion-ce runs at its stored weight, or at weight 1 when that is 0 (at weight 0 it runs no
cross-encoder and costs what fusion does): the cost is the model's. Questions come from the train split
(their answers are not read); val and test are not touched. Prints per method: mean, p50 and p95 of the
whole search in milliseconds, and of the cross-encoder's part (documents read and scored; `ce_ms`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stark_pg.db import connect  # noqa: E402
from stark_pg.eval.query_sets import from_split  # noqa: E402
from stark_pg.models.cross_encoder import load_model  # noqa: E402
from stark_pg.retrieve import fusion, fusion_ce  # noqa: E402
from stark_pg.skb.catalog import require_skb  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("skb")
    parser.add_argument("--name", default="default", help="the cross-encoder (train cross-encoder --name)")
    parser.add_argument("--questions", type=int, default=30, help="the first N questions of train")
    parser.add_argument("--tops", default="5,10,20", help="the N of fusion's results re-scored")
    parser.add_argument("--threads", type=int, default=2, help="torch threads at query time")
    parser.add_argument("-k", type=int, default=20, help="results returned")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    tops = [int(t) for t in args.tops.split(",")]
    with connect() as conn:
        skb_id = require_skb(conn, args.skb)
        ce = load_model(conn, skb_id, args.skb, args.name)
        weight = ce.weight or 1.0
        questions = [q.body for q in from_split(conn, skb_id, "train").queries[:args.questions]]
        methods = {"fusion": (fusion, fusion.Options(name=ce.fusion))} | {
            f"fusion-ce top={n}": (fusion_ce, fusion_ce.Options(name=args.name, top=n, weight=weight)) for n in tops}
        total = {m: [] for m in methods}
        ce_ms = {m: [] for m in methods}
        for i, question in enumerate([questions[0], *questions]):
            for label, (module, options) in methods.items():
                started = time.perf_counter()
                ranking = module.search(conn, args.skb, question, args.k, options)
                spent = (time.perf_counter() - started) * 1000
                if i:      # the first is the warm-up
                    total[label].append(spent)
                    ce_ms[label].append(ranking.trace.get("ce_ms", 0.0))
    print(f"{args.skb}: {len(questions)} train questions, k={args.k}, cross-encoder {args.name!r} "
          f"(max_length {ce.settings['max_length']}, weight {weight:g}), torch threads {args.threads}")
    print(f"{'method':<18} {'mean ms':>8} {'p50':>8} {'p95':>8}   {'ce mean':>8} {'ce p50':>8} {'ce p95':>8}")
    for label in methods:
        t, c = np.array(total[label]), np.array(ce_ms[label])
        print(f"{label:<18} {t.mean():8.0f} {np.percentile(t, 50):8.0f} {np.percentile(t, 95):8.0f}   "
              f"{c.mean():8.0f} {np.percentile(c, 50):8.0f} {np.percentile(c, 95):8.0f}")


if __name__ == "__main__":
    main()
