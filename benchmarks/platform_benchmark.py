"""The platform's scale figures in one run: for synthetic SKBs of each size (default 100,000 and 1,000,000
nodes, 20 edges a node), one after the other on one embedded server:

1. the load: whole and per-stage rates, CPU seconds, peak memory (load_benchmark.py's measurement, in a
   subprocess of its own so that peak RSS is per size); the SKB is kept for the next steps;
2. `stark-pg index SKB --no-dense --no-graph`: the BM25 postings and the pg_textsearch index, timed;
3. BM25 over the SKB's own queries, k 10: pg_textsearch, the SQL postings (with the overlap of the two
   top 10s, plain and up to ties at the 10th score) and bm25s (numpy backend) over the same lexemes, as
   the yardstick: its scores with a top-k selection (argpartition), its own `retrieve`, and, labelled as
   such, the scores with a full argsort (what this benchmark reported before 2026-11-29);
4. vectors of 384 dimensions (clustered random unit vectors: no model can embed 1M documents here in a
   session): exact search in SQL and a numpy brute force over the matrix in memory, then each index kind
   (default HNSW m16 efc64 and DiskANN where pgvectorscale exists) built, sized and swept over its search
   list with recall@10 against the exact top 10. A build past --index-timeout is cancelled and reported.

    python benchmarks/platform_benchmark.py                            # 100000 1000000
    python benchmarks/platform_benchmark.py 100000 --index-timeout 900 --out /tmp/platform
    python benchmarks/platform_benchmark.py 100000 300000 --no-vectors         # load, lexical index, BM25 only

Prints Markdown tables (what docs/benchmarks.md shows), the 1-minute load average beside each step
(the machine may be shared), and writes platform_benchmark.json into --out. The server is the embedded
one under --home (default: $STARK_PG_HOME if set, else /tmp/stark-bench-home), ignoring STARK_PG_DSN;
each size's SKB is dropped after its steps unless --keep. Not a test: run by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_HOME = "/tmp/stark-bench-home"


def load_average() -> float:
    return round(os.getloadavg()[0], 1)


def measure_load(nodes: int, name: str, env: dict) -> dict:
    """load_benchmark.py's per-size measurement (20 edges a node, seed 0) in a fresh process, keeping the
    SKB as `name`."""
    from load_benchmark import run_in_subprocess

    return run_in_subprocess(nodes, 20.0, 0, None, env, keep_as=name)


def build_lexical(name: str, env: dict) -> dict:
    started, before = time.perf_counter(), load_average()
    subprocess.run([sys.executable, "-m", "stark_pg", "index", name, "--no-dense", "--no-graph", "--quiet"],
                   check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
    return {"seconds": round(time.perf_counter() - started, 1), "load_average": [before, load_average()]}


def measure_bm25(conn, skb_id: int, queries: int, k: int) -> dict:
    from retrieval_benchmark import bm25_engines, bm25s_yardstick, query_texts

    texts = query_texts(conn, skb_id, queries)
    report = bm25_engines(conn, skb_id, texts, k)
    report["bm25s"] = bm25s_yardstick(conn, skb_id, texts, k, report.pop("_sql_top_k"))
    return report | {"queries": len(texts), "load_average": load_average()}


def measure_vectors(conn, skb_id: int, name: str, args) -> dict:
    import numpy as np
    from retrieval_benchmark import cluster_centers, clustered_unit_vectors
    from vector_benchmark import (build_and_sweep, drop_indexes, enable_vectorscale, ensure_model, exact_baselines,
                                  fill_vectors)

    conn.execute("select set_config('maintenance_work_mem', %s, false)", (args.maintenance_work_mem,))
    tables = ensure_model(conn, args.dim)
    fill_vectors(conn, tables, skb_id, seed=100)
    queries = list(clustered_unit_vectors(np.random.default_rng(1), cluster_centers(args.dim), args.queries))
    report: dict = {"dim": args.dim, "queries": args.queries, "k": args.k}
    report["pgvectorscale"] = enable_vectorscale(conn)
    drop_indexes(conn, tables, [skb_id])
    truth = exact_baselines(conn, tables, skb_id, name, queries, args.k, report)
    report["indexes"] = build_and_sweep(conn, tables, [skb_id], name, queries, truth, args.k,
                                        [int(x) for x in args.ef.split(",")], args.kinds.split(","),
                                        report["pgvectorscale"], args.index_timeout)
    drop_indexes(conn, tables, [skb_id])
    return report | {"load_average": load_average()}


def run_size(nodes: int, args, env: dict) -> dict:
    from stark_pg.db import connect
    from stark_pg.skb.catalog import drop_skb, require_skb

    name = f"platform-{nodes}"
    row: dict = {"nodes": nodes, "skb": name}
    row["load"] = measure_load(nodes, name, env)
    print(f"{nodes:,}: loaded in {row['load']['seconds']} s", file=sys.stderr, flush=True)
    row["lexical_index"] = build_lexical(name, env)
    print(f"{nodes:,}: lexical index in {row['lexical_index']['seconds']} s", file=sys.stderr, flush=True)
    with connect() as conn:
        skb_id = require_skb(conn, name)
        row["bm25"] = measure_bm25(conn, skb_id, args.queries, args.k)
        print(f"{nodes:,}: BM25 measured", file=sys.stderr, flush=True)
        if not args.no_vectors:
            row["vectors"] = measure_vectors(conn, skb_id, name, args)
        if not args.keep:
            drop_skb(conn, name)
    return row


def spread(timing: dict) -> str:
    return f"{timing['p50']} / {timing['p95']}"


def markdown(rows: list[dict]) -> str:
    out = ["| nodes | edges | whole load s (nodes/s, edges/s) | node stage nodes/s | edge stage edges/s "
           "| peak RSS Python / backend MB | load avg |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lo = r["load"]
        out.append(f"| {lo['nodes']:,} | {lo['edges']:,} | {lo['seconds']} ({lo['nodes_per_s']:,}, "
                   f"{lo['edges_per_s']:,}) | {lo['node_stage_per_s']:,} | {lo['edge_stage_per_s']:,} | "
                   f"{lo['python_peak_rss_mb']:,} / {lo['backend_peak_rss_mb'] or '-'} | {lo['load_average_1min']} |")
    out += ["", "| nodes | lexical index s | pg_textsearch p50 / p95 ms | SQL postings | bm25s scores + argpartition "
            "| bm25s.retrieve | bm25s scores + full argsort (no yardstick) | top-10 overlap, index vs SQL: plain "
            "/ up to ties / identical lists | load avg |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        b, s = r["bm25"], r["bm25"]["bm25s"]
        ts = b.get("bm25_textsearch")
        agree = (f"{ts['top_k_overlap_with_sql']} / {ts['top_k_overlap_up_to_ties']} / {ts['identical_top_k']}"
                 if ts else "-")
        out.append(f"| {r['nodes']:,} | {r['lexical_index']['seconds']} | "
                   f"{spread(ts) if ts else 'absent'} | {spread(b['bm25_sql'])} | {spread(s['get_scores_argpartition'])} "
                   f"| {spread(s['retrieve'])} | {spread(s['get_scores_full_argsort'])} | {agree} | {b['load_average']} |")
    out += ["", "| nodes | pg_textsearch: round trip | index scan executed (server) | stark.bm25_index_scan "
            "| stark.bm25_top | bm25s get_scores alone | bm25s top 10 overlap with SQL: plain / up to ties |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        b, s = r["bm25"], r["bm25"]["bm25s"]
        parts = b.get("bm25_textsearch_parts")
        if parts:
            out.append(f"| {r['nodes']:,} | {spread(parts['round_trip'])} | {spread(parts['index_scan_executed'])} | "
                       f"{spread(parts['index_scan_function'])} | {spread(b['bm25_textsearch'])} | "
                       f"{spread(s['get_scores_only'])} | {s['top_k_overlap_with_sql']} / {s['top_k_overlap_up_to_ties']} |")
    if any("vectors" in r for r in rows):
        out += ["", "| nodes | index | build s | size MB | search list: recall@10 · p50 / p95 ms |",
                "| --- | --- | --- | --- | --- |"]
    for r in rows:
        if "vectors" not in r:
            continue
        v = r["vectors"]
        for e in v["indexes"]:
            if e["build_s"] is None:
                out.append(f"| {r['nodes']:,} | {e['index']} | cancelled after {e['unfinished_after_s']} | | |")
                continue
            sweep = ", ".join(f"{s['ef_search']}: {s['recall@10']:.3f} · {spread(s)}" for s in e["sweep"])
            out.append(f"| {r['nodes']:,} | {e['index']} | {e['build_s']} | {e['size_mb']} | {sweep} |")
        out.append(f"| {r['nodes']:,} | exact in SQL | | | 1.000 · {spread(v['exact_sql'])} |")
        nb = v["numpy_bruteforce"]
        out.append(f"| {r['nodes']:,} | numpy brute force | | | {nb['recall@10']:.3f} · {spread(nb)} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[100_000, 1_000_000], help="node counts")
    parser.add_argument("--queries", type=int, default=100, help="BM25 queries (the SKB's own) and query vectors")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--ef", default="40,100,200,400,800", help="search list sizes to sweep")
    parser.add_argument("--kinds", default="hnsw,diskann", help="vector index kinds (see vector_benchmark.py)")
    parser.add_argument("--index-timeout", type=float, help="cancel a vector index build after this many seconds")
    parser.add_argument("--maintenance-work-mem", default="3GB", help="for the vector index builds (HNSW at 1M: ~2 GB)")
    parser.add_argument("--home", default=os.environ.get("STARK_PG_HOME", DEFAULT_HOME))
    parser.add_argument("--out", type=Path, default=Path("platform-benchmark"))
    parser.add_argument("--keep", action="store_true", help="keep each size's SKB")
    parser.add_argument("--no-vectors", action="store_true", help="skip step 4 (the vectors and their indexes)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    args = parser.parse_args()

    env = dict(os.environ, STARK_PG_HOME=args.home, PYTHONPATH=str(ROOT))
    env.pop("STARK_PG_DSN", None)
    os.environ.update(STARK_PG_HOME=args.home)
    os.environ.pop("STARK_PG_DSN", None)
    sys.path[:0] = [str(HERE), str(ROOT)]
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count(), "sizes": []}
    for nodes in args.sizes:
        report["sizes"].append(run_size(nodes, args, env))
        (args.out / "platform_benchmark.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2) if args.json else markdown(report["sizes"]))


if __name__ == "__main__":
    main()
