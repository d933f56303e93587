"""Embedding throughput of `stark-pg index` in this process versus on Ray workers at equal cores: what
`--executor ray` costs on one machine before it spreads the work over several.

Run by hand (figures in docs/benchmarks.md, "Embedding on Ray"):
    python benchmarks/ray_benchmark.py [--nodes 800] [--cpus 2] [--rounds 2] [--commit-batch 64] [--dsn URL] [--json]

The yardstick and the contenders embed the same documents of a small synthetic SKB (`bench-ray`, loaded
once and reused) with the same model and encoder (the default, all-MiniLM-L6-v2 on ONNX Runtime), each
build starting from no vectors:
- local: `build_dense` in this process, the encoder using every core (`--cpus` should be the machine's);
- ray-1: one Ray worker given `--cpus` CPUs (its thread count);
- ray-2: two Ray workers given half of them each.
The Ray cluster is one head node started here with `ray start --head --num-cpus CPUS` (its files in a
temporary directory, stopped at the end); the builds connect to it as `--ray-address` does. Runs are
interleaved (local, ray-1, ray-2, then again) so that a machine whose load changes meanwhile (this one is
shared) weighs on each alike; the figures are the medians over `--rounds`.

What is measured, from a progress reporter that timestamps every committed batch of the documents stage:
- steady documents/s: documents committed after the first batch, over the time from the first batch's
  commit to the last one's, i.e. throughput once the model is loaded and the workers are running;
- start seconds: from the build's start to its first committed batch (connecting to Ray, starting the
  workers, loading the model, embedding one batch);
- documents seconds: the build's start to the last batch, the whole embedding stage;
- CPU ms a document: the CPU time (user + system) this process and the cluster's embedding workers
  spent between the first batch's commit and the last one's, per document embedded in that span.
  On a machine shared with other jobs, documents/s depend on the share of the cores each
  configuration wins from them (more processes win more); CPU time per document does not, and is the
  overhead at equal cores. PostgreSQL's own CPU time is the same work in every configuration and is
  not counted.
`--commit-batch` documents are committed together (the command line commits 256), so that a two-worker
run has enough batches to keep both busy to the end on a small SKB.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SKB = "bench-ray"


def worker_cpu_seconds(marker: str) -> dict[int, float]:
    """User + system CPU seconds of each of the benchmark cluster's embedding workers, by pid (its
    processes carry `marker` in their environment; Ray names an actor's process after its class)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not (proc / "cmdline").read_bytes().startswith(b"ray::EmbeddingWorker"):
                continue
            if f"STARK_PG_BENCH_RAY={marker}".encode() not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
            found[int(proc.name)] = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue
    return found


class Timestamps:
    """A progress Reporter that records, at every advance of the documents stage, (seconds, count, CPU
    seconds of this process and of the cluster's embedding workers so far)."""

    def __init__(self, marker: str | None):
        self.marks: list[tuple[float, int, float]] = []
        self.marker = marker

    @contextmanager
    def stage(self, label: str, total: int | None = None, unit: str = ""):
        marks = self.marks if label == "documents" else []
        marker = self.marker

        class _Stage:
            def advance(self, n: int = 1) -> None:
                cpu = time.process_time() + (sum(worker_cpu_seconds(marker).values()) if marker else 0.0)
                marks.append((time.perf_counter(), n, cpu))

            def describe(self, text: str) -> None:
                pass

        yield _Stage()


@contextmanager
def ray_head(cpus: int):
    """(HOST:PORT, marker) of a one-node Ray cluster with `cpus` CPUs, stopped when the block ends; its
    processes carry the marker in their environment."""
    temp = Path(tempfile.mkdtemp(prefix="ray-bench-", dir="/tmp"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT), "STARK_PG_BENCH_RAY": str(temp)}
    head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--port",
                             str(port), "--num-cpus", str(cpus), "--include-dashboard=false", "--temp-dir", str(temp),
                             "--node-ip-address", "127.0.0.1", "--disable-usage-stats"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if head.poll() is not None or time.time() > deadline:
                    raise SystemExit("the Ray head did not start")
                time.sleep(0.3)
        time.sleep(2)                     # the raylet registers a moment after the GCS listens
        yield f"127.0.0.1:{port}", str(temp)
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


def prepare(conn, nodes: int) -> None:
    from loaders.synthetic import SyntheticSource
    from stark_pg.skb.store import load_skb

    row = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()
    if row is None or row[0] is None:
        load_skb(conn, SyntheticSource(nodes=nodes, seed=7, edges_per_node=2), SKB)
        conn.commit()


def clear_vectors(conn) -> None:
    from stark_pg.index.dense import find_model

    model = find_model(conn)
    if model is not None:
        conn.execute(f"delete from stark.{model.doc_table} where skb_id = stark.skb_id(%s)", (SKB,))
        conn.commit()


def one_run(conn, ray_options, commit_batch: int, marker: str) -> dict:
    from stark_pg.index.dense import build_dense

    clear_vectors(conn)
    reporter = Timestamps(marker if ray_options else None)
    started = time.perf_counter()
    report = build_dense(conn, SKB, multi_vector=False, progress=reporter, batch_size=commit_batch, ray=ray_options)
    marks = reporter.marks
    first_at, _, first_cpu = marks[0]
    last_at, _, last_cpu = marks[-1]
    after_first = sum(m[1] for m in marks[1:])
    return {"documents": report["documents"]["embedded"], "encoding": report["encoding"],
            "steady_docs_per_s": after_first / (last_at - first_at),
            "cpu_ms_per_doc": 1000 * (last_cpu - first_cpu) / after_first,
            "start_s": first_at - started, "documents_s": last_at - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=800, help="Nodes of the synthetic SKB (documents embedded).")
    parser.add_argument("--cpus", type=int, default=os.cpu_count(), help="CPUs of the Ray head: the local "
                                                                       "encoder's cores, to compare at equal cores.")
    parser.add_argument("--rounds", type=int, default=2, help="Interleaved runs of each configuration.")
    parser.add_argument("--commit-batch", type=int, default=64, help="Documents committed together.")
    parser.add_argument("--dsn", help="PostgreSQL (default: STARK_PG_DSN, else the embedded server).")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()

    from stark_pg.db import connect
    from stark_pg.embed.ray_executor import RayOptions

    load = os.getloadavg()
    runs: dict[str, list[dict]] = {"local": [], "ray-1": [], "ray-2": []}
    with connect(args.dsn) as conn, ray_head(args.cpus) as (address, marker):
        prepare(conn, args.nodes)
        one_run(conn, None, args.commit_batch, marker)  # the ONNX export and the page cache warm, not timed
        configs = {"local": None, "ray-1": RayOptions(address, workers=1),
                   "ray-2": RayOptions(address, workers=2)}
        for round_no in range(args.rounds):
            for name, options in configs.items():
                run = one_run(conn, options, args.commit_batch, marker)
                runs[name].append(run)
                print(f"round {round_no + 1} {name}: {run['steady_docs_per_s']:.1f} documents/s and "
                      f"{run['cpu_ms_per_doc']:.1f} CPU ms a document after the first batch, first batch after "
                      f"{run['start_s']:.1f} s, {run['documents_s']:.1f} s in all", file=sys.stderr)
    summary = {}
    for name, rows in runs.items():
        summary[name] = {
            "steady_docs_per_s": round(statistics.median(r["steady_docs_per_s"] for r in rows), 2),
            "cpu_ms_per_doc": round(statistics.median(r["cpu_ms_per_doc"] for r in rows), 1),
            "start_s": round(statistics.median(r["start_s"] for r in rows), 2),
            "documents_s": round(statistics.median(r["documents_s"] for r in rows), 2),
            "runs": [round(r["steady_docs_per_s"], 2) for r in rows],
        }
    for name in ("ray-1", "ray-2"):
        summary[name]["steady_vs_local"] = round(summary[name]["steady_docs_per_s"]
                                                 / summary["local"]["steady_docs_per_s"], 3)
        summary[name]["whole_vs_local"] = round(summary["local"]["documents_s"] / summary[name]["documents_s"], 3)
        summary[name]["cpu_vs_local"] = round(summary[name]["cpu_ms_per_doc"] / summary["local"]["cpu_ms_per_doc"], 3)
    result = {"nodes": args.nodes, "cpus": args.cpus, "rounds": args.rounds, "commit_batch": args.commit_batch,
              "load_average_before": [round(x, 2) for x in load],
              "load_average_after": [round(x, 2) for x in os.getloadavg()], "configs": summary}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.nodes} documents, {args.cpus} CPUs, median of {args.rounds} rounds "
          f"(load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f})")
    print(f"{'config':8} {'steady docs/s':>14} {'vs local':>9} {'CPU ms/doc':>11} {'vs local':>9} "
          f"{'first batch s':>14} {'embedding s':>12} {'whole vs local':>15}")
    for name, row in summary.items():
        print(f"{name:8} {row['steady_docs_per_s']:>14.1f} {row.get('steady_vs_local', 1):>9.3f} "
              f"{row['cpu_ms_per_doc']:>11.1f} {row.get('cpu_vs_local', 1):>9.3f} "
              f"{row['start_s']:>14.1f} {row['documents_s']:>12.1f} {row.get('whole_vs_local', 1):>15.3f}")


if __name__ == "__main__":
    main()
