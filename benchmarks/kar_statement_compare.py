"""Two versions of KAR's neighbour statement, alternating on the same calls: same rows, which is faster.

    python benchmarks/kar_statement_compare.py synthetic-130000 --model clustered-unit-384 --count 100
    python benchmarks/kar_statement_compare.py stark-prime-ibd --old-sql /tmp/kar_old.sql

Loads the statement builder (`stark.kar_neighbours_sql`) from --old-sql (default: the database's
installed one, i.e. whatever its last migration put there) and from --new-sql (default: this checkout's
sql/functions/kar.sql) as temporary functions, draws --count calls like benchmarks/kar_benchmark.py
(1-3 random anchors, the document vector of a random node as the query, 2 hops, k 10, cap 100), runs
both statements on each call in random order, checks that they return the same rows, and prints p50 /
p95 / max milliseconds of each. Needs the SKB's document vectors of --model (kar_benchmark.py
--random-vectors fills clustered random ones for a synthetic SKB). Not a test: run by hand.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def builder(path: Path, name: str) -> str:
    """The builder function of a kar.sql file, renamed into pg_temp."""
    text = path.read_text(encoding="utf-8")
    start = text.index("create or replace function stark.kar_neighbours_sql")
    end = text.index("comment on function stark.kar_neighbours_sql")
    return text[start:end].replace("stark.kar_neighbours_sql", f"pg_temp.{name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("skb")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--old-sql", type=Path, help="a kar.sql to compare against (default: the installed builder)")
    parser.add_argument("--new-sql", type=Path, default=ROOT / "sql" / "functions" / "kar.sql")
    parser.add_argument("--dsn", default=None, help="default: STARK_PG_DSN or the embedded server")
    args = parser.parse_args()

    from stark_pg.db.connection import connect

    conn = connect(args.dsn, migrate=False)      # compares what is installed: upgrades nothing
    register_vector(conn)
    skb, table = conn.execute(
        "select s.skb_id, m.doc_table from stark.skb s, stark.embedding_model m where s.name = %s and m.name = %s",
        (args.skb, args.model)).fetchone()
    conn.execute(builder(args.new_sql, "kar_new"))
    old_fn = "stark.kar_neighbours_sql"
    if args.old_sql:
        conn.execute(builder(args.old_sql, "kar_old"))
        old_fn = "pg_temp.kar_old"
    statements = {name: conn.execute(f"select {fn}(%s, %s, 2, false)", (skb, table)).fetchone()[0]
                  for name, fn in (("old", old_fn), ("new", "pg_temp.kar_new"))}
    rng = random.Random(args.seed)
    nodes = [r[0] for r in conn.execute(f"select node_id from stark.{table} where skb_id = %s", (skb,))]
    times: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.count):
        anchors = rng.sample(nodes, rng.randint(1, 3))
        query = conn.execute(f"select vec from stark.{table} where skb_id = %s and node_id = %s",
                             (skb, rng.choice(nodes))).fetchone()[0]
        rows = {}
        for name in rng.sample(sorted(statements), 2):
            cursor = psycopg.RawCursor(conn)
            started = time.perf_counter()
            cursor.execute(statements[name], (anchors, query, 10, 100))
            rows[name] = cursor.fetchall()
            times[name].append((time.perf_counter() - started) * 1000)
        if rows["old"] != rows["new"]:
            print(f"different rows for anchors {anchors}", file=sys.stderr)
            return 1
    print(f"{args.skb}: {args.count} calls, same rows from both statements")
    for name, values in times.items():
        values.sort()
        print(f"  {name}: p50 {statistics.median(values):.1f} ms, p95 {values[int(0.95 * len(values))]:.1f} ms, "
              f"max {values[-1]:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
