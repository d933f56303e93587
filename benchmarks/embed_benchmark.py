"""The embedding backends side by side, in one process on the same texts: documents per second, a
question's embedding cold (a text not embedded before) and cached, and how close each backend's
vectors are to torch's (cosine).

    # documents rendered from an indexed SKB and its val questions (STARK_PG_HOME or --dsn as usual)
    python benchmarks/embed_benchmark.py stark-prime-ibd --documents 512 --queries 100

Backends take turns round by round (torch, onnx, onnx-int8, openvino, openvino-int8, then again),
so that a machine whose load changes during the run slows them alike; torch's own
sentence-transformers `encode` is the yardstick. Exports happen before any timing. Not a test.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from stark_pg import embed
from stark_pg.db import connect
from stark_pg.embed import Encoder, backends
from stark_pg.skb.catalog import require_skb


def percentiles(ms: list[float]) -> dict:
    return {"p50": round(float(np.percentile(ms, 50)), 2), "p95": round(float(np.percentile(ms, 95)), 2),
            "n": len(ms)}


def texts_of(skb: str, documents: int, queries: int) -> tuple[list[str], list[str]]:
    with connect() as conn:
        skb_id = require_skb(conn, skb)
        docs = [r[0] for r in conn.execute(
            "select stark.render_document(skb_id, node_id, true, 25) from stark.node where skb_id = %s "
            "order by node_id limit %s", (skb_id, documents)) if r[0]]
        asked = [r[0] for r in conn.execute(
            "select body from stark.query where skb_id = %s order by split <> 'val', query_id limit %s",
            (skb_id, queries))]
    return docs, asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("skb")
    parser.add_argument("--documents", type=int, default=512)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=embed.DEFAULT_BATCH)
    parser.add_argument("--backends", default="torch,onnx,onnx-int8,openvino,openvino-int8")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    docs, questions = texts_of(args.skb, args.documents, args.queries)
    encoders = {}
    for label in args.backends.split(","):
        backend, _, int8 = label.partition("-")
        if backends.runtime_available(backend):
            encoders[label] = Encoder(backend, bool(int8))
    report: dict = {"documents": len(docs), "queries": len(questions), "batch": args.batch_size}
    loaded = {}
    for label, encoder in encoders.items():            # export and load outside every timing
        started = time.perf_counter()
        embed.encode(docs[:2], encoder=encoder)
        loaded[label] = round(time.perf_counter() - started, 2)
    report["first_load_seconds_incl_export"] = loaded
    seconds = {label: 0.0 for label in encoders}
    vectors = {}
    for _ in range(args.rounds):
        for label, encoder in encoders.items():
            started = time.perf_counter()
            vectors[label] = embed.encode(docs, batch_size=args.batch_size, encoder=encoder)
            seconds[label] += time.perf_counter() - started
    report["documents_per_second"] = {label: round(args.rounds * len(docs) / s, 1) for label, s in seconds.items()}
    if "torch" in seconds:
        report["speedup_vs_torch"] = {label: round(seconds["torch"] / s, 2) for label, s in seconds.items()}
    cold: dict = {label: [] for label in encoders}
    cached: dict = {label: [] for label in encoders}
    query_vectors: dict = {label: [] for label in encoders}
    embed._query_vector.cache_clear()
    for text in questions:                             # each text new to every backend, backends in turn
        for label, encoder in encoders.items():
            started = time.perf_counter()
            query_vectors[label].append(embed.encode_query(text, None, encoder))
            cold[label].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            embed.encode_query(text, None, encoder)
            cached[label].append((time.perf_counter() - started) * 1000)
    report["query_cold_ms"] = {label: percentiles(ms) for label, ms in cold.items()}
    report["query_cached_ms"] = {label: percentiles(ms) for label, ms in cached.items()}
    if "torch" in vectors:
        report["cosine_to_torch"] = {
            label: {"documents_min": round(float(np.min(np.sum(v * vectors["torch"], axis=1))), 5),
                    "documents_mean": round(float(np.mean(np.sum(v * vectors["torch"], axis=1))), 5),
                    "queries_min": round(float(np.min(np.sum(np.array(query_vectors[label])
                                                              * np.array(query_vectors["torch"]), axis=1))), 5)}
            for label, v in vectors.items() if label != "torch"}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for key, value in report.items():
        print(f"{key:>32}: {value}")


if __name__ == "__main__":
    main()
