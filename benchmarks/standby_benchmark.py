"""Search throughput from concurrent clients on the embedded primary alone, on its hot standby alone,
and spread over both: what a standby (`stark-pg db replica add`) adds for read load.

Run by hand in a home of its own (figures in docs/benchmarks.md, "Reads on a hot standby"):
    STARK_PG_HOME=/tmp/standby-home python benchmarks/standby_benchmark.py [--nodes 2000] [--clients 8]
        [--seconds 20] [--rounds 3] [--methods bm25,vss] [--figure docs/standby-benchmark.png] [--json]

The SKB is a synthetic one (`bench-standby-N`, loaded and indexed on the primary once, then reused);
the home gets one standby if it has none. Each client is a process with one connection, searching the
SKB's questions in turn (each client from its own offset) for `--seconds`; queries per second are
summed over the clients. `bm25` is the method's own search with `engine=sql` (the engine a standby
uses, so both servers do the same work: pg_textsearch's index cannot be read on a standby); `vss` is
the HNSW search of the SQL API (stark.vss) with query vectors embedded once beforehand, so no client
loads a model and the servers' work is what is measured. Configurations, each with the same clients:
- primary, 1 client: the yardstick (one connection's rate);
- primary, N clients; standby, N clients (`target_session_attrs=prefer-standby`);
- both, N clients: the multi-host DSN with `target_session_attrs=any load_balance_hosts=random`, so
  libpq puts each client on one of the two servers at random (the split is printed).
Both servers run on this machine: they share its cores, so a standby here can add throughput only
where one server leaves cores idle. On separate machines each brings its own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def prepare(nodes: int) -> tuple[str, list[str]]:
    """The SKB (loaded and indexed on the primary when missing) and its questions."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.index.dense import build_dense
    from stark_pg.index.lexical import build_lexical
    from stark_pg.resources import queries
    from stark_pg.skb.catalog import all_skb_names
    from stark_pg.skb.store import load_skb

    skb = f"bench-standby-{nodes}"
    with connect() as conn:
        if skb not in all_skb_names(conn):
            load_skb(conn, SyntheticSource(nodes=nodes, seed=7, edges_per_node=10), skb)
            build_lexical(conn, skb)
            build_dense(conn, skb, multi_vector=False)
        skb_id = conn.execute("select stark.skb_id(%s)", (skb,)).fetchone()[0]
        bodies = [body for split in ("train", "val", "test")
                  for _, body, _ in queries().split_queries(conn, skb_id=skb_id, split=split)]
    return skb, bodies


def client(dsn: str, skb: str, method: str, work: list, offset: int, start, seconds: float, results) -> None:
    """Search in turn from `offset` until `seconds` after `start` is set; report (count, on_standby)."""
    import psycopg
    from pgvector.psycopg import register_vector

    from stark_pg.resources import queries

    conn = psycopg.connect(dsn, autocommit=True)     # as given: stark_pg.db.connect would route it
    register_vector(conn)
    on_standby = bool(queries().in_recovery(conn))
    if method == "bm25":
        from stark_pg.retrieve import get_method

        module = get_method("bm25")
        options = module.Options(engine="sql")
        run = lambda item: module.search(conn, skb, item, 100, options)          # noqa: E731
    else:
        import numpy as np

        run = lambda item: list(queries().vss_top(conn, skb=skb, embedding=np.asarray(item, dtype=np.float32),  # noqa: E731
                                                   k=100, model="all-MiniLM-L6-v2", exact=False))
    run(work[offset % len(work)])          # warm this connection's caches before the clock starts
    start.wait()
    deadline = time.monotonic() + seconds
    count, i = 0, offset
    while time.monotonic() < deadline:
        run(work[i % len(work)])
        count += 1
        i += 1
    conn.close()
    results.put((count, on_standby))


def measure(dsn: str, skb: str, method: str, work: list, clients: int, seconds: float) -> dict:
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=client, args=(dsn, skb, method, work, i * 7, start, seconds, results))
             for i in range(clients)]
    for p in procs:
        p.start()
    time.sleep(8 + clients)            # every client connected, imported and warmed (spawned interpreters)
    start.set()
    done = [results.get(timeout=seconds + 600) for _ in procs]
    for p in procs:
        p.join()
    total = sum(c for c, _ in done)
    return {"queries": total, "qps": round(total / seconds, 1),
            "on_standby": sum(1 for _, s in done if s), "clients": clients}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--methods", default="bm25,vss")
    parser.add_argument("--rounds", type=int, default=3, help="Measure every configuration this many times, "
                                                              "interleaved; the median is reported.")
    parser.add_argument("--figure", type=Path, default=None, help="Write a bar chart (PNG) here.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from psycopg.conninfo import make_conninfo

    from stark_pg.db import embedded, replica

    if not os.environ.get("STARK_PG_HOME"):
        sys.exit("set STARK_PG_HOME to a home of the benchmark's own: it adds a standby and restarts the server")
    skb, bodies = prepare(args.nodes)
    primary = embedded.start().uri
    standby = next((r for r in replica.replicas() if r.pid is not None), None) or replica.add()
    replica.wait_caught_up(standby, timeout=600)
    routed = replica.routed_url(primary, [standby])
    dsns = {"primary": primary, "standby": make_conninfo(routed, target_session_attrs="prefer-standby"),
            "both": make_conninfo(routed, target_session_attrs="any")}
    work = {"bm25": bodies}
    if "vss" in args.methods:
        from stark_pg import embed

        work["vss"] = [vector.tolist() for vector in embed.encode(bodies)]
    cpu = os.cpu_count()
    load_before = [round(x, 2) for x in os.getloadavg()]
    configurations = [(method, label, dsn, clients)
                      for method in [m.strip() for m in args.methods.split(",") if m.strip()]
                      for label, dsn, clients in (("primary", primary, 1), ("primary", primary, args.clients),
                                                  ("standby", dsns["standby"], args.clients),
                                                  ("both", dsns["both"], args.clients))]
    measured: dict[tuple, list[dict]] = {}
    for round_ in range(args.rounds):         # interleaved, so that a change in the machine's load hits all alike
        for method, label, dsn, clients in configurations:
            result = measure(dsn, skb, method, work[method], clients, args.seconds)
            measured.setdefault((method, label, clients), []).append(result)
            print(f"round {round_ + 1}: {method:5} {label:8} {clients:2} clients: {result['qps']:8.1f} queries/s "
                  f"({result['on_standby']} of {clients} on the standby)", file=sys.stderr, flush=True)
    rows = []
    for (method, label, clients), results in measured.items():
        rates = sorted(r["qps"] for r in results)
        rows.append({"method": method, "servers": label, "clients": clients,
                     "qps": rates[len(rates) // 2], "qps_rounds": [r["qps"] for r in results],
                     "on_standby": [r["on_standby"] for r in results]})
    for row in rows:
        base = next(r for r in rows if r["method"] == row["method"] and r["servers"] == "primary"
                    and r["clients"] == args.clients)
        row["ratio_to_primary"] = round(row["qps"] / base["qps"], 2)
    summary = {"skb": skb, "questions": len(bodies), "seconds": args.seconds, "rounds": args.rounds, "cpus": cpu,
               "load_average_before": load_before, "load_average_after": [round(x, 2) for x in os.getloadavg()],
               "rows": rows}
    if args.figure:
        figure(rows, args)
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{skb}, {len(bodies)} questions, {args.seconds:g} s per configuration, median of {args.rounds} rounds, "
          f"{cpu} CPUs, load average {load_before[0]} before, {summary['load_average_after'][0]} after")
    print("| method | servers | clients | queries/s (median) | each round | ratio to primary, same clients | "
          "clients on the standby |")
    print("| --- | --- | ---: | ---: | --- | ---: | --- |")
    for r in rows:
        print(f"| {r['method']} | {r['servers']} | {r['clients']} | {r['qps']:.1f} | "
              f"{' / '.join(f'{q:.0f}' for q in r['qps_rounds'])} | {r['ratio_to_primary']:.2f} | "
              f"{' / '.join(map(str, r['on_standby']))} |")


def figure(rows: list[dict], args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(1, len(methods), figsize=(4.5 * len(methods), 3.6), squeeze=False)
    for ax, method in zip(axes[0], methods):
        mine = [r for r in rows if r["method"] == method]
        labels = [f"{r['servers']}\n{r['clients']} client{'s' if r['clients'] > 1 else ''}" for r in mine]
        bars = ax.bar(labels, [r["qps"] for r in mine], color=["#999", "#4c72b0", "#dd8452", "#55a868"][:len(mine)])
        ax.bar_label(bars, fmt="%.0f")
        ax.set_title(f"{method}: queries/s")
        ax.set_ylim(0, max(r["qps"] for r in mine) * 1.2)
    fig.suptitle(f"Search throughput, embedded primary and one hot standby on one {os.cpu_count()}-core machine",
                 fontsize=10)
    fig.tight_layout()
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.figure, dpi=110)


if __name__ == "__main__":
    main()
