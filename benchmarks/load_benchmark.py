"""Load speed and memory: synthetic SKBs of 10K, 100K and 1M nodes through `load_skb`, one subprocess each.

    python benchmarks/load_benchmark.py                 # 10000 100000 1000000
    python benchmarks/load_benchmark.py 10000 --json

Prints nodes, edges, seconds, nodes/s and edges/s over the whole load and within the node stage
(nodes with their text fields) and the edge stage (COPY plus the bulk index build), and peak memory: the loading Python process's peak
RSS (getrusage) and the PostgreSQL backend's peak RSS (VmHWM in /proc, same machine only). Uses
its own embedded server under STARK_PG_HOME (default /tmp/stark-bench-home). Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time


def backend_peak_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run_one(nodes: int, edges_per_node: float) -> dict:
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.skb.catalog import drop_skb
    from stark_pg.skb.store import load_skb

    with connect() as conn:
        pid = conn.info.backend_pid
        peak = {"backend_kb": 0}
        done = threading.Event()

        def watch():
            while not done.wait(0.5):
                peak["backend_kb"] = max(peak["backend_kb"], backend_peak_kb(pid) or 0)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = time.perf_counter()
        summary = load_skb(conn, SyntheticSource(nodes=nodes, edges_per_node=edges_per_node), f"bench-{nodes}")
        seconds = time.perf_counter() - started
        done.set()
        watcher.join()
        peak["backend_kb"] = max(peak["backend_kb"], backend_peak_kb(pid) or 0)
        drop_skb(conn, f"bench-{nodes}")
    return {"nodes": summary.nodes, "edges": summary.edges, "queries": summary.queries, "seconds": round(seconds, 2),
            "nodes_per_s": round(summary.nodes / seconds), "edges_per_s": round(summary.edges / seconds),
            "node_stage_per_s": round(summary.nodes / summary.stage_seconds["nodes"]),
            "edge_stage_per_s": round(summary.edges / summary.stage_seconds["edges"]),
            "python_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "backend_peak_mb": round(peak["backend_kb"] / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--edges-per-node", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)   # the per-size subprocess
    args = parser.parse_args()
    os.environ.setdefault("STARK_PG_HOME", "/tmp/stark-bench-home")
    if args.one:
        print(json.dumps(run_one(args.one, args.edges_per_node)))
        return
    rows = []
    for size in args.sizes:
        done = subprocess.run([sys.executable, __file__, "--one", str(size), "--edges-per-node",
                               str(args.edges_per_node)], capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if not args.json:
            r = rows[-1]
            print(f"{r['nodes']:>9,} nodes {r['edges']:>11,} edges {r['seconds']:>8.1f} s "
                  f"{r['nodes_per_s']:>9,} nodes/s {r['edges_per_s']:>10,} edges/s (stages: "
                  f"{r['node_stage_per_s']:,} nodes/s, {r['edge_stage_per_s']:,} edges/s) "
                  f"python peak {r['python_peak_mb']:>5} MB  postgres backend peak {r['backend_peak_mb']:>5} MB",
                  flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
