"""Throughput of an LLM method's evaluation with --workers: questions per second with 1, 4 and 16
workers against a local OpenAI-compatible server that answers every chat request after a set delay,
as a served model does, and the ratio to the sequential rate.

Run by hand (figures in docs/benchmarks.md, "Concurrent model calls"):
    python benchmarks/workers_benchmark.py [--delay 1.0] [--queries 32] [--workers 1,4,16] [--dsn URL] [--json]

The server is tests/fake_llm_server.py (the real openai SDK talks to it over HTTP); the method is
vss+rerank with `batch=true`, one chat request per question (every candidate in one prompt), so a
sequential run takes about `delay` seconds a question and the ratio shows the concurrency alone.
Every run asks with `cache=refresh`, so each one calls the server and none replays another's
answers. The SKB is a small synthetic one (`bench-workers`, made once in the database and then
reused) whose documents and questions are embedded by the same server (`openai:bench-embed`, no
delay, before the timed runs), so no local model is loaded. Each worker count is one stored eval run, as `stark-pg eval` stores it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fake_llm_server import FakeLLMServer, Scripted, user_text  # noqa: E402

SKB = "bench-workers"
EMBED = "openai:bench-embed"


def responder(delay: float):
    """Scores for every candidate of a batch prompt (`[1]`, `[2]`... headers), after `delay` seconds."""
    def answer(kind, body):
        n = len(re.findall(r"^\[\d+\]$", user_text(kind, body), re.M)) or 1
        return Scripted(text=json.dumps({"scores": [round(1 / (i + 1), 3) for i in range(n)]}), delay=delay)
    return answer


def prepare(conn, nodes: int):
    """The SKB's id, loaded and indexed by the fake server's embeddings if not there yet."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.index.dense import build_dense
    from stark_pg.skb.store import load_skb

    row = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()
    if row is None or row[0] is None:
        load_skb(conn, SyntheticSource(nodes=nodes, seed=11, edges_per_node=4), SKB)
    build_dense(conn, SKB, model=EMBED, multi_vector=False)
    return conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=1.0, help="Seconds the server takes per chat request.")
    parser.add_argument("--queries", type=int, default=32, help="Questions per run.")
    parser.add_argument("--workers", default="1,4,16", help="Worker counts, comma-separated; the first is the base.")
    parser.add_argument("--nodes", type=int, default=400, help="Nodes of the synthetic SKB (when it is made).")
    parser.add_argument("--dsn", default=None, help="PostgreSQL to use (default: stark-pg's own).")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]

    server = FakeLLMServer().start()
    server.responder = responder(args.delay)
    os.environ["STARK_PG_EMBED_BASE_URL"] = server.openai_url
    from stark_pg.db import connect
    from stark_pg.eval.query_sets import QuerySet, from_splits
    from stark_pg.eval.runner import run_method
    from stark_pg.llm import embeddings
    from stark_pg.llm.concurrency import workers
    from stark_pg.retrieve import get_method, vss_rerank

    rows = []
    try:
        with connect(args.dsn) as conn:
            skb_id = prepare(conn, args.nodes)
            splits = [s for (s,) in conn.execute("select distinct split from stark.query where skb_id = %s "
                                                 "order by split", (skb_id,))]
            every = from_splits(conn, skb_id, splits)
            chosen = QuerySet(f"bench:{args.queries}", "bench", every.queries[:args.queries])
            options = vss_rerank.Options(k_max=10, batch=True, llm="openai:bench-llm", base_url=server.openai_url,
                                         cache="refresh", model=EMBED)
            with embeddings.cache_in(conn):      # the questions' vectors asked once, before any timing
                embeddings.encode([q.body for q in chosen.queries], EMBED)
            for n in counts:
                before = len(server.requests)
                started = time.perf_counter()
                with workers(n):
                    outcome = run_method(conn, skb_id, SKB, "vss+rerank", options, chosen, resolve=get_method,
                                         depth=100)
                seconds = time.perf_counter() - started
                rows.append({"workers": n, "questions": len(chosen.queries), "seconds": round(seconds, 2),
                             "questions_per_second": round(len(chosen.queries) / seconds, 3),
                             "requests": len(server.requests) - before, "failed": outcome.summary["failed"]})
    finally:
        server.stop()
    base = rows[0]["questions_per_second"]
    for row in rows:
        row["ratio"] = round(row["questions_per_second"] / base, 2)
    if args.json:
        print(json.dumps({"delay": args.delay, "runs": rows}, indent=2))
        return
    print(f"vss+rerank (batch), {rows[0]['questions']} questions, server delay {args.delay:g} s per request")
    print(f"{'workers':>7} {'seconds':>8} {'q/s':>7} {'ratio':>6} {'requests':>8} {'failed':>6}")
    for r in rows:
        print(f"{r['workers']:>7} {r['seconds']:>8.2f} {r['questions_per_second']:>7.3f} {r['ratio']:>6.2f} "
              f"{r['requests']:>8} {r['failed']:>6}")


if __name__ == "__main__":
    main()
