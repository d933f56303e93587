"""How long `stark-pg serve` takes to answer the run diff page (and its JSON) over two stored runs.

    python benchmarks/serve_diff.py                      # the two newest val runs of stark-prime-ibd
    python benchmarks/serve_diff.py --a 1 --b 2 --repeat 20 --json

Runs against the database stark-pg uses (STARK_PG_DSN or the embedded server in STARK_PG_HOME), which
must hold the runs: `stark-pg eval stark-prime-ibd -m bm25 --split val` and `-m vss` store two over the
171 val questions. The server runs in this process on a free loopback port (uvicorn, as `stark-pg serve`
runs it); each page is fetched over HTTP, the first request timed apart (a fresh connection, templates
compiled), then --repeat more. Prints the milliseconds per page: first, median, slowest.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
import urllib.request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skb", default="stark-prime-ibd")
    parser.add_argument("--a", type=int, help="run A (default: the second newest val run of --skb)")
    parser.add_argument("--b", type=int, help="run B (default: the newest val run of --skb)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import uvicorn

    from stark_pg.serve import create_app
    from stark_pg.serve.app import runs_view

    app = create_app(args.dsn)
    a, b = args.a, args.b
    if a is None or b is None:
        runs = [r for r in runs_view(app.state.store, args.skb)["runs"] if r["query_set"] == "split:val"]
        if len(runs) < 2:
            raise SystemExit(f"{args.skb} has fewer than two val runs: `stark-pg eval {args.skb} -m bm25 "
                             "--split val` and `-m vss` store two")
        b, a = runs[0]["run_id"], runs[1]["run_id"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    report = {"a": a, "b": b, "repeat": args.repeat, "pages": {}}
    try:
        for label, path in (("diff page", f"/runs/{a}/diff/{b}"), ("diff JSON", f"/api/runs/{a}/diff/{b}"),
                            ("diff page, wins by change", f"/runs/{a}/diff/{b}?show=wins&sort=change&order=desc")):
            times, size = [], 0
            for _ in range(args.repeat + 1):
                start = time.perf_counter()
                with urllib.request.urlopen(base + path, timeout=60) as reply:
                    size = len(reply.read())
                times.append((time.perf_counter() - start) * 1000)
            report["pages"][label] = {"path": path, "bytes": size, "first_ms": round(times[0], 1),
                                      "median_ms": round(statistics.median(times[1:]), 1),
                                      "max_ms": round(max(times[1:]), 1)}
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"runs {a} and {b}, {args.repeat} requests after the first")
    for label, page in report["pages"].items():
        print(f"{label:28} {page['bytes']:>8,} bytes  first {page['first_ms']:7.1f} ms  "
              f"median {page['median_ms']:7.1f} ms  slowest {page['max_ms']:7.1f} ms")


if __name__ == "__main__":
    main()
