"""Latency of 4StepFocus's ranking step (stark.focus_rank): candidates first, then cosine plus the
answer-type bonus, which scans the vectors of every node of the types that have a probability.

Each round draws a query vector (the SKB's own queries embedded, or random unit vectors with
--random-vectors, for SKBs indexed with random vectors), a belief over one to three node types and,
every other round, 50 random candidates; it times the statement at depth k (100) with the bonus and
without (type_weight 0: plain VSS, or candidates then VSS). Prints p50 / p95 / max milliseconds.

    python benchmarks/focus_rank_benchmark.py stark-prime-ibd
    python benchmarks/focus_rank_benchmark.py synthetic-100000 --random-vectors
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval_benchmark import RANDOM_MODEL, fill_random_vectors, percentiles  # noqa: E402

from stark_pg.db import connect  # noqa: E402
from stark_pg.embed import canonical_name, encode  # noqa: E402
from stark_pg.resources import queries as sql  # noqa: E402
from stark_pg.skb.catalog import require_skb  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("skb")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--random-vectors", action="store_true",
                        help=f"random unit query vectors against the model {RANDOM_MODEL!r} (filled by "
                             "benchmarks/retrieval_benchmark.py if missing)")
    parser.add_argument("--model", default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dsn", default=None, help="default: STARK_PG_DSN or the embedded server")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with connect(args.dsn) as conn:
        skb_id = require_skb(conn, args.skb)
        model = fill_random_vectors(conn, skb_id, 384) if args.random_vectors else canonical_name(args.model)
        types = [t for t, n in sql().focus_node_types(conn, skb_id=skb_id)]
        type_sizes = dict(sql().focus_node_types(conn, skb_id=skb_id))
        node_ids = [n for n, in conn.execute("select node_id from stark.node where skb_id = %s", (skb_id,))]
        dim = conn.execute("select dim from stark.embedding_model where name = %s", (model,)).fetchone()[0]
        if args.random_vectors:
            generator = np.random.default_rng(args.seed)
            vectors = generator.normal(size=(args.count, dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        else:
            bodies = [b for b, in conn.execute("select body from stark.query where skb_id = %s order by query_id "
                                               "limit %s", (skb_id, args.count))]
            vectors = encode(bodies, model)
        timings: dict[str, list[float]] = {"bonus": [], "no bonus": []}
        scanned = []
        for i, vector in enumerate(vectors):
            chosen = rng.sample(types, rng.randint(1, min(3, len(types))))
            weights = [rng.random() for _ in chosen]
            probs = [w / sum(weights) for w in weights]
            candidates = sorted(rng.sample(node_ids, 50)) if i % 2 else None
            scanned.append(sum(type_sizes[t] for t in chosen))
            for label, weight in (("bonus", 0.15), ("no bonus", 0.0)):
                started = time.perf_counter()
                rows = list(sql().focus_rank(conn, skb=args.skb, embedding=vector, candidates=candidates,
                                             type_names=chosen, type_probs=probs, type_weight=weight, k=args.k,
                                             model=model))
                timings[label].append((time.perf_counter() - started) * 1000)
                assert len(rows) == min(args.k, len(node_ids))
    print(json.dumps({"skb": args.skb, "queries": len(vectors), "k": args.k,
                      "nodes_of_bonus_types_median": statistics.median(scanned),
                      **{label: percentiles(values) | {"max": round(max(values), 2)} for label, values in timings.items()}}, indent=1))


if __name__ == "__main__":
    main()
