"""Load speed and memory: synthetic SKBs of 10K, 100K and 1M nodes through `load_skb`, one subprocess each.

    python benchmarks/load_benchmark.py                          # 10000 100000 1000000
    python benchmarks/load_benchmark.py 10000 100000 --json
    python benchmarks/load_benchmark.py 130000 --edges-per-node 62

Each size runs in a fresh Python process (so peak RSS is per size), loads `SyntheticSource` with
`load_skb(..., if_exists="replace")`, then drops the SKB. Printed per size:

- nodes, edges, queries; seconds of the whole `load_skb` call (validation, COPY, the edge
  partition's bulk index build, the queries' exact answers, `analyze`) and nodes/s, edges/s over it;
- stage rates: nodes/s of the node stage (nodes and their text), edges/s of the edge stage (COPY and
  index build), seconds of the query stage (the generator's answer computation and its COPY);
- the generator alone: nodes/s and edges/s of iterating `nodes()` and `edges()` with no database;
- CPU seconds per stage ("nodes", "edges", "edge indexes", "queries"): of this Python process
  (all its threads) and of the whole PostgreSQL server (the postmaster's live children, the
  backend, parallel index-build workers and I/O workers included, plus the children that exited:
  the postmaster's cutime). On a shared machine wall times stretch with the load; CPU seconds show
  the work itself, and on two cores a stage can go no faster than max(python, server) / 1 core
  where the two overlap (COPY) and their sum where they do not (index builds);
- peak memory. "python" is the loading process's peak RSS (getrusage ru_maxrss). "backend" is the
  PostgreSQL backend serving the load, read from /proc/<backend pid>/status (same machine only):
  VmHWM, its peak RSS, which counts the shared buffers it touched, and the peak of RssAnon (its
  private memory: sorts, maintenance_work_mem), sampled every 0.2 s. Parallel index-build workers
  are separate processes and not counted.

The benchmark uses the embedded server under --home (default: $STARK_PG_HOME if set, else
/tmp/stark-bench-home), ignoring STARK_PG_DSN unless --dsn is given. It stops that server at the
end only if it started it (and not with --keep-server): on a shared machine someone else may be
using a server that was already running.
Not a test.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOME = "/tmp/stark-bench-home"


def _status_kb(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS / RssAnon / RssShmem of a process, in kB; empty when unreadable."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "VmRSS", "RssAnon", "RssShmem"):
                    out[key] = int(rest.split()[0])
    except OSError:
        return {}
    return out


def _is_postgres(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"postgres" in handle.read()
    except OSError:
        return False


def _server_cpu_s(postmaster: int | None) -> float:
    """CPU seconds of a local PostgreSQL server so far: its processes' utime + stime, and the
    postmaster's cutime + cstime (children it has reaped: parallel workers of finished statements).
    NaN for a server that is not local (no postmaster pid)."""
    import psutil

    if postmaster is None:
        return float("nan")
    total = 0.0
    try:
        root = psutil.Process(postmaster)
        times = root.cpu_times()
        total += times.user + times.system + times.children_user + times.children_system
        for child in root.children():
            try:
                t = child.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        return float("nan")
    return total


def _python_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _CpuStages:
    """A progress reporter (stark_pg.progress.Reporter) that records each stage's CPU seconds."""

    def __init__(self, postmaster: int | None):
        self.postmaster = postmaster
        self.cpu: dict[str, dict[str, float]] = {}

    def stage(self, label: str, total: int | None = None, unit: str = ""):
        from contextlib import contextmanager

        from stark_pg.progress import NullReporter

        @contextmanager
        def timed():
            py, server = _python_cpu_s(), _server_cpu_s(self.postmaster)
            with NullReporter().stage(label, total, unit) as inner:
                yield inner
            self.cpu[label] = {"python": round(_python_cpu_s() - py, 1),
                               "server": round(_server_cpu_s(self.postmaster) - server, 1)}

        return timed()


def _postmaster_pid(backend: int) -> int | None:
    import psutil

    try:
        return psutil.Process(backend).ppid()
    except psutil.NoSuchProcess:
        return None


def run_one(nodes: int, edges_per_node: float, seed: int, dsn: str | None, keep: str | None = None) -> dict:
    """Load one synthetic SKB and measure it; drop it afterwards, or keep it under the name `keep`."""
    sys.path.insert(0, str(ROOT))
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.skb.catalog import drop_skb
    from stark_pg.skb.store import load_skb

    name = keep or f"bench-{nodes}"
    with connect(dsn) as conn:
        pid = conn.info.backend_pid
        local = _is_postgres(pid)
        peak = {"VmHWM": 0, "RssAnon": 0}
        done = threading.Event()

        def sample() -> None:
            status = _status_kb(pid)
            for key, value in peak.items():
                peak[key] = max(value, status.get(key, 0))

        def watch() -> None:
            while not done.wait(0.2):
                sample()

        watcher = threading.Thread(target=watch, daemon=True)
        if local:
            watcher.start()
        source = SyntheticSource(nodes=nodes, seed=seed, edges_per_node=edges_per_node)
        started = time.perf_counter()
        stages_cpu = _CpuStages(_postmaster_pid(pid) if local else None)
        summary = load_skb(conn, source, name, if_exists="replace", progress=stages_cpu)
        seconds = time.perf_counter() - started
        done.set()
        if local:
            watcher.join()
            sample()
        if not keep:
            drop_skb(conn, name)
    python_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss        # kB on Linux

    # the generator alone, no database: how much of the load's time is ours
    started = time.perf_counter()
    generated_nodes = sum(1 for _ in source.nodes())
    node_seconds = time.perf_counter() - started
    started = time.perf_counter()
    generated_edges = sum(1 for _ in source.edges())
    edge_seconds = time.perf_counter() - started

    stages = summary.stage_seconds
    return {
        "nodes": summary.nodes, "edges": summary.edges, "queries": summary.queries,
        "edges_per_node": edges_per_node, "seconds": round(seconds, 2),
        "nodes_per_s": round(summary.nodes / seconds), "edges_per_s": round(summary.edges / seconds),
        "node_stage_per_s": round(summary.nodes / stages["nodes"]) if stages.get("nodes") else None,
        "edge_stage_per_s": round(summary.edges / stages["edges"]) if stages.get("edges") else None,
        "query_stage_seconds": stages.get("queries"),
        "generator_nodes_per_s": round(generated_nodes / node_seconds),
        "generator_edges_per_s": round(generated_edges / edge_seconds),
        "python_peak_rss_mb": round(python_peak_kb / 1024),
        "backend_peak_rss_mb": round(peak["VmHWM"] / 1024) if local else None,
        "backend_peak_private_mb": round(peak["RssAnon"] / 1024) if local else None,
        "stage_cpu_seconds": stages_cpu.cpu,
        "load_average_1min": round(os.getloadavg()[0], 1),
    }


def run_in_subprocess(size: int, edges_per_node: float, seed: int, dsn: str | None, env: dict,
                      keep_as: str | None = None) -> dict:
    """`run_one` in a fresh Python process, so that its peak RSS is this size's alone; its row."""
    command = [sys.executable, __file__, "--one", str(size), "--edges-per-node", str(edges_per_node),
               "--seed", str(seed)] + (["--dsn", dsn] if dsn else []) + (["--keep-as", keep_as] if keep_as else [])
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"size {size} failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


COLUMNS = (("nodes", "nodes", "{:,}"), ("edges", "edges", "{:,}"), ("seconds", "s", "{:.1f}"),
           ("nodes_per_s", "nodes/s", "{:,}"), ("edges_per_s", "edges/s", "{:,}"),
           ("node_stage_per_s", "node stage/s", "{:,}"), ("edge_stage_per_s", "edge stage/s", "{:,}"),
           ("query_stage_seconds", "query stage s", "{:.1f}"),
           ("generator_nodes_per_s", "gen nodes/s", "{:,}"), ("generator_edges_per_s", "gen edges/s", "{:,}"),
           ("python_peak_rss_mb", "python peak MB", "{:,}"), ("backend_peak_rss_mb", "backend peak MB", "{:,}"),
           ("backend_peak_private_mb", "backend private MB", "{:,}"))


def table(rows: list[dict]) -> str:
    cells = [[title for _, title, _ in COLUMNS]]
    for row in rows:
        cells.append([fmt.format(row[key]) if row.get(key) is not None else "-" for key, _, fmt in COLUMNS])
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000, 1_000_000], help="node counts")
    parser.add_argument("--edges-per-node", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    parser.add_argument("--home", default=os.environ.get("STARK_PG_HOME", DEFAULT_HOME),
                        help=f"STARK_PG_HOME of the benchmark's embedded server (default: $STARK_PG_HOME, "
                             f"else {DEFAULT_HOME})")
    parser.add_argument("--dsn", help="use this server instead of the embedded one")
    parser.add_argument("--keep-server", action="store_true", help="leave the embedded server running")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)   # the per-size subprocess
    parser.add_argument("--keep-as", help=argparse.SUPPRESS)          # ... keeping its SKB under this name
    args = parser.parse_args()

    if args.one:
        print(json.dumps(run_one(args.one, args.edges_per_node, args.seed, args.dsn, args.keep_as)))
        return

    env = dict(os.environ, STARK_PG_HOME=args.home)
    env.pop("STARK_PG_DSN", None)
    os.environ.update(STARK_PG_HOME=args.home)
    sys.path.insert(0, str(ROOT))
    from stark_pg.db import embedded

    was_running = args.dsn is not None or embedded.running_pid() is not None
    rows = []
    print(f"server: embedded, STARK_PG_HOME={args.home}" if not args.dsn else "server: --dsn", file=sys.stderr)
    for size in args.sizes:
        rows.append(run_in_subprocess(size, args.edges_per_node, args.seed, args.dsn, env))
        print(f"{size:,} nodes: {rows[-1]['seconds']} s", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(table(rows))
        for row in rows:
            cpu = ", ".join(f"{stage} {v['python']} / {v['server']}" for stage, v in row["stage_cpu_seconds"].items())
            print(f"{row['nodes']:,} nodes, CPU seconds python / server per stage: {cpu}; "
                  f"load average {row['load_average_1min']}")
        print("\npython: peak RSS of the loading process; backend: the PostgreSQL backend's peak RSS (VmHWM, "
              "shared buffers it touched included) and peak private memory (RssAnon)")
    if not was_running and not args.keep_server:
        embedded.stop()


if __name__ == "__main__":
    main()
