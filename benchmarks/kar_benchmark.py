"""Latency and recall of KAR's relation propagation in SQL (stark.kar_neighbours), per per-hop cap and
per last hop (exact, or the approximate walk through the HNSW index).

Draws --count calls shaped like KAR's: 1-3 anchor nodes (seeded, among the nodes that have edges) and
a query vector. By default the query vector is the stored document vector of a random node (cheap: no
model to load, nothing to embed); --query-embeddings instead embeds the SKB's own query bodies with
the real model (stark_pg.embed.encode, one batch; costs CPU). Every call runs, in a seeded random
order, with the default cap (100), each cap of --caps, no cap (per_hop_cap => NULL: the exact answer)
and, unless --no-directed, the default cap with directed => true; unless --no-index, the default cap
with last_hop => 'index', once per --index-min-rows (stark.kar_index_min_rows: an anchor whose previous
hop's kept nodes have fewer edge rows takes the exact last hop; 0 makes every anchor walk the index)
and --index-overfetch (stark.kar_index_overfetch: the walk keeps that many times k nodes, then the best).
The index setting needs an HNSW index over the SKB's document vectors: `stark-pg index` builds one for
a real model, and --random-vectors builds one for its pseudo-model (m 16, ef_construction 64; about a
minute at 130,000 vectors) if there is none. Prints, per setting, p50 / p95 / max
milliseconds (client wall time of the statement, fetch included) and the mean rows per call; per capped
setting, recall of the exact top k: |capped top-k set & exact top-k set| / |exact top-k set| per anchor,
averaged over anchors (that have a neighbour) and calls; per index setting also its recall of the exact
last hop's top k at the same cap (what the walk approximates; "vs cap"). The directed setting is compared with the
undirected one at the same cap: in PrimeKG-shaped SKBs every edge is stored both ways, so the sets
should be equal at half the edge reads.

    # the slice (indexed with the real model)
    python benchmarks/kar_benchmark.py stark-prime-ibd --count 200
    # STaRK-Prime's size without a model: clustered random document vectors of the pseudo-model
    # clustered-unit-384, retrieval_benchmark.py --random-vectors' generator (filled here if missing,
    # with an HNSW index for the index last hop)
    stark-pg load synthetic --nodes 130000 --edges-per-node 62
    python benchmarks/kar_benchmark.py synthetic-130000 --random-vectors --count 200

Not a test: run by hand.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval_benchmark import RANDOM_MODEL, cluster_centers, clustered_unit_vectors  # noqa: E402

from stark_pg.db import connect  # noqa: E402
from stark_pg.embed import DEFAULT_MODEL, canonical_name  # noqa: E402
from stark_pg.resources import queries as sql  # noqa: E402
from stark_pg.skb.catalog import require_skb  # noqa: E402

DEFAULT_CAP = 100            # stark.kar_neighbours' per_hop_cap default
STATEMENT = ("select * from stark.kar_neighbours(%(skb)s, %(anchors)s::bigint[], hops => %(hops)s, query => %(query)s, "
             "k => %(k)s, per_hop_cap => %(cap)s, model => %(model)s, directed => %(directed)s, "
             "last_hop => %(last_hop)s, max_frontier => %(frontier)s)")
DEFAULT_FRONTIER = 10000     # stark.kar_neighbours' max_frontier default


def fill_random_document_vectors(conn, skb_id: int, dim: int) -> str:
    """Clustered random unit vectors (retrieval_benchmark's generator) for the nodes of the SKB that have
    none in the pseudo-model's document table; binary COPY; no HNSW index (not needed here)."""
    from psycopg import sql as pgsql

    from stark_pg.index.dense import ModelTables, statement

    name = RANDOM_MODEL.format(dim=dim)
    row = sql().find_model(conn, name=name) or sql().register_model(conn, name=name, dim=dim)
    tables = ModelTables(row[0], name, *row[1:])
    conn.execute(statement("create_tables", tables))
    table = pgsql.Identifier("stark", tables.doc_table)
    missing = [r[0] for r in conn.execute(pgsql.SQL(
        "select n.node_id from stark.node n where n.skb_id = %s and not exists "
        "(select 1 from {} d where d.skb_id = n.skb_id and d.node_id = n.node_id) order by n.node_id").format(table),
        (skb_id,))]
    if missing:
        rng, centers = np.random.default_rng(0), cluster_centers(dim)
        started = time.perf_counter()
        with conn.transaction(), conn.cursor().copy(pgsql.SQL(
                "copy {} (skb_id, node_id, doc_hash, vec) from stdin with (format binary)").format(table)) as copy:
            copy.set_types(["integer", "bigint", "text", "vector"])
            for start in range(0, len(missing), 10_000):
                chunk = missing[start:start + 10_000]
                for node_id, vec in zip(chunk, clustered_unit_vectors(rng, centers, len(chunk))):
                    copy.write_row((skb_id, node_id, "random", vec))
        conn.execute(pgsql.SQL("analyze {}").format(table))
        print(f"random vectors ({name}, {tables.doc_table}): {len(missing):,} in "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return name


def ensure_hnsw_index(conn, skb_id: int, model: str) -> None:
    """The SKB's partial HNSW index over the model's document vectors (m 16, ef_construction 64, as
    `stark-pg index` builds it), if it has none: `last_hop => 'index'` walks it. `stark-pg index` builds
    one for a real model; the pseudo-model's vectors are filled here, so their index is built here too."""
    from psycopg import sql as pgsql

    from stark_pg.index.dense import ModelTables, hnsw_index_name, statement

    row = sql().find_model(conn, name=model)
    tables = ModelTables(row[0], model, *row[1:])
    if conn.execute("select (stark.vector_index(%s, %s)).method", (tables.doc_table, skb_id)).fetchone()[0]:
        return
    started = time.perf_counter()
    conn.execute("set maintenance_work_mem = '1GB'")
    conn.execute(statement("create_hnsw_index", tables, index=pgsql.Identifier(hnsw_index_name(tables.doc_table, skb_id)),
                           table=pgsql.Identifier("stark", tables.doc_table), skb=skb_id, m=16, ef_construction=64))
    print(f"HNSW index over {tables.doc_table} (SKB {skb_id}): built in {time.perf_counter() - started:.0f} s",
          file=sys.stderr, flush=True)


def draw_calls(conn, skb_id: int, model: str, count: int, rng: random.Random,
               query_embeddings: bool) -> tuple[list[list[int]], list[np.ndarray], str]:
    """Anchor sets (1-3 nodes with an edge either way) and one query vector per call."""
    from psycopg import sql as pgsql

    linked = [n for n, in conn.execute(
        "select n.node_id from stark.node n where n.skb_id = %s and (exists (select 1 from stark.edge e "
        "where e.skb_id = n.skb_id and e.src = n.node_id) or exists (select 1 from stark.edge e "
        "where e.skb_id = n.skb_id and e.dst = n.node_id)) order by n.node_id", (skb_id,))]
    anchors = [sorted(rng.sample(linked, rng.randint(1, min(3, len(linked))))) for _ in range(count)]
    doc_table = sql().find_model(conn, name=model)[2]
    if query_embeddings:
        from stark_pg.embed import encode

        bodies = [b for b, in conn.execute("select body from stark.query where skb_id = %s order by query_id "
                                           "limit %s", (skb_id, count))]
        if not bodies:
            raise SystemExit(f"SKB {skb_id} has no queries to embed; drop --query-embeddings")
        vectors = list(encode(bodies, model))
        vectors = [vectors[i % len(vectors)] for i in range(count)]
        return anchors, vectors, f"{len(bodies)} query bodies embedded with {model}"
    table = pgsql.Identifier("stark", doc_table)
    with_vector = [n for n, in conn.execute(pgsql.SQL("select node_id from {} where skb_id = %s order by node_id")
                                            .format(table), (skb_id,))]
    sources = [rng.choice(with_vector) for _ in range(count)]
    stored = {n: np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)
              for n, v in conn.execute(pgsql.SQL("select node_id, vec from {} where skb_id = %s and node_id = any(%s)")
                                       .format(table), (skb_id, sorted(set(sources))))}
    return anchors, [stored[n] for n in sources], f"document vectors of {len(set(sources))} random nodes ({model})"


def top_sets(rows) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for anchor, _hop, _relations, _path, neighbour, _similarity, _rank, _frontier in rows:
        out.setdefault(anchor, set()).add(neighbour)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("skb")
    parser.add_argument("--count", type=int, default=200, help="calls (each runs once per setting)")
    parser.add_argument("--hops", type=int, default=2)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--caps", default="100,50,25", help="per-hop caps besides the default and no cap")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=None, help=f"default {DEFAULT_MODEL}, or {RANDOM_MODEL.format(dim=384)} "
                                                      "with --random-vectors")
    parser.add_argument("--random-vectors", action="store_true",
                        help="use (and fill if missing) clustered random document vectors of a pseudo-model")
    parser.add_argument("--dim", type=int, default=384, help="--random-vectors: dimension")
    parser.add_argument("--query-embeddings", action="store_true",
                        help="embed the SKB's query bodies with the model instead of borrowing node vectors")
    parser.add_argument("--no-directed", action="store_true", help="skip the directed => true setting")
    parser.add_argument("--no-index", action="store_true", help="skip the last_hop => 'index' settings")
    parser.add_argument("--index-min-rows", default="15000",
                        help="stark.kar_index_min_rows for the index settings, comma-separated (one setting each)")
    parser.add_argument("--index-overfetch", default="2",
                        help="stark.kar_index_overfetch for the index settings, comma-separated (one setting each)")
    parser.add_argument("--max-frontier", default=None,
                        help="also the default cap with each of these max_frontier values (comma-separated, 'none' "
                             "for no bound); the other capped settings use the default, no cap has none")
    parser.add_argument("--show-slowest", type=int, default=0, help="print the slowest calls of each setting")
    parser.add_argument("--dsn", default=None, help="default: STARK_PG_DSN or the embedded server")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.random_vectors and (args.query_embeddings or args.model):
        parser.error("--random-vectors uses its own pseudo-model: no --model, no --query-embeddings")
    caps = [DEFAULT_CAP] + [int(c) for c in args.caps.split(",") if c.strip()]
    # (label, per_hop_cap, directed, last_hop, (stark.kar_index_min_rows, stark.kar_index_overfetch) or None,
    #  max_frontier)
    settings: list[tuple[str, int | None, bool, str, tuple[int, int] | None, int | None]] = [
        (f"cap {c}" + (" (default)" if c == DEFAULT_CAP else ""), c, False, "exact", None, DEFAULT_FRONTIER)
        for c in dict.fromkeys(caps)]
    settings.append(("no cap (exact)", None, False, "exact", None, None))
    for f in dict.fromkeys((args.max_frontier or "").split(",")):
        if f.strip():
            bound = None if f.strip().lower() == "none" else int(f)
            if bound != DEFAULT_FRONTIER:
                settings.append((f"cap {DEFAULT_CAP}, frontier {bound}", DEFAULT_CAP, False, "exact", None, bound))
    if not args.no_directed:
        settings.append((f"directed, cap {DEFAULT_CAP}", DEFAULT_CAP, True, "exact", None, DEFAULT_FRONTIER))
    if not args.no_index:
        settings += [(f"index, cap {DEFAULT_CAP}, min {m}, x{f}", DEFAULT_CAP, False, "index", (m, f), DEFAULT_FRONTIER)
                     for m in dict.fromkeys(int(x) for x in args.index_min_rows.split(",") if x.strip())
                     for f in dict.fromkeys(int(x) for x in args.index_overfetch.split(",") if x.strip())]
    rng = random.Random(args.seed)
    with connect(args.dsn, migrate=False) as conn:   # measures only: no schema upgrade (stark-pg load did it)
        register_vector(conn)
        skb_id = require_skb(conn, args.skb)
        model = (fill_random_document_vectors(conn, skb_id, args.dim) if args.random_vectors
                 else canonical_name(args.model))
        if args.random_vectors and not args.no_index:
            ensure_hnsw_index(conn, skb_id, model)
        nodes, edges = conn.execute("select (select count(*) from stark.node where skb_id = %s), "
                                    "(select count(*) from stark.edge where skb_id = %s)", (skb_id, skb_id)).fetchone()
        anchors, vectors, source = draw_calls(conn, skb_id, model, args.count, rng, args.query_embeddings)

        def run(i: int, cap: int | None, directed: bool, last_hop: str, walk: tuple[int, int] | None,
                frontier: int | None):
            conn.execute("select set_config('stark.kar_index_min_rows', %s, false), "
                         "set_config('stark.kar_index_overfetch', %s, false)",
                         ("", "") if walk is None else tuple(map(str, walk)))
            return conn.execute(STATEMENT, {"skb": args.skb, "anchors": anchors[i], "hops": args.hops,
                                            "query": vectors[i], "k": args.k, "cap": cap, "model": model,
                                            "directed": directed, "last_hop": last_hop,
                                            "frontier": frontier}).fetchall()

        for _, *setting in settings:                            # warm caches and the plpgsql plan
            run(0, *setting)
        times = {label: [] for label, *_ in settings}
        results: dict[str, list] = {label: [] for label, *_ in settings}
        for i in range(len(anchors)):
            order = list(settings)
            rng.shuffle(order)                                  # no setting always runs on caches the others warmed
            for label, *setting in order:
                started = time.perf_counter()
                rows = run(i, *setting)
                times[label].append((time.perf_counter() - started) * 1000)
                results[label].append(rows)

    exact = [top_sets(rows) for rows in results["no cap (exact)"]]
    report: dict = {"skb": args.skb, "nodes": nodes, "edges": edges, "calls": len(anchors), "hops": args.hops,
                    "k": args.k, "query_vectors": source,
                    "anchors_mean": round(float(np.mean([len(a) for a in anchors])), 2), "settings": {}}
    def recall(got: list, truth: list[dict[int, set[int]]]) -> float | None:
        values = [len(top_sets(rows).get(a, set()) & want) / len(want)
                  for rows, want_sets in zip(got, truth) for a, want in want_sets.items() if want]
        return round(float(np.mean(values)), 4) if values else None

    for label, cap, directed, last_hop, walk, frontier in settings:
        t = np.array(times[label])
        cut = sum(any(r[7] is not None and frontier is not None and r[7] > frontier for r in rows)
                  for rows in results[label])
        entry = {"per_hop_cap": cap, "directed": directed, "last_hop": last_hop, "max_frontier": frontier,
                 "calls_cut_by_frontier": cut,
                 "index_min_rows": walk and walk[0], "index_overfetch": walk and walk[1],
                 "p50_ms": round(float(np.percentile(t, 50)), 2), "p95_ms": round(float(np.percentile(t, 95)), 2),
                 "max_ms": round(float(t.max()), 2), "rows_mean": round(float(np.mean([len(r) for r in results[label]])), 2)}
        if cap is not None:
            entry["recall_vs_exact"] = recall(results[label], exact)
        if last_hop == "index":
            twin = next(lbl for lbl, c, d, h, _, f in settings if c == cap and d == directed and h == "exact"
                        and f == frontier)
            entry["recall_vs_same_cap"] = recall(results[label], [top_sets(rows) for rows in results[twin]])
            entry["same_rows_as_same_cap"] = sum(a == b for a, b in zip(results[label], results[twin]))
        if directed:
            twin = next(lbl for lbl, c, d, h, _, f in settings if c == cap and not d and h == last_hop
                        and f == frontier)
            entry["same_sets_as_undirected"] = sum(top_sets(a) == top_sets(b)
                                                   for a, b in zip(results[label], results[twin]))
            entry["same_rows_as_undirected"] = sum(a == b for a, b in zip(results[label], results[twin]))
        entry["slowest"] = [{"ms": round(float(t[i]), 1), "anchors": anchors[i]}
                            for i in np.argsort(-t)[:args.show_slowest]]
        report["settings"][label] = entry
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{args.skb}: {nodes:,} nodes, {edges:,} edges; {report['calls']} calls, {report['anchors_mean']} anchors "
          f"on average, hops {args.hops}, k {args.k}; query vectors: {source}")
    print(f"  {'setting':<33} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'rows':>7} {'recall@k':>9} {'vs cap':>7} "
          f"{'cut':>5}")
    for label, entry in report["settings"].items():
        value, same_cap = entry.get("recall_vs_exact"), entry.get("recall_vs_same_cap")
        print(f"  {label:<33} {entry['p50_ms']:8.2f} {entry['p95_ms']:8.2f} {entry['max_ms']:8.2f} "
              f"{entry['rows_mean']:7.1f} {'' if value is None else f'{value:.4f}':>9} "
              f"{'' if same_cap is None else f'{same_cap:.4f}':>7} {entry['calls_cut_by_frontier']:>5}")
        if entry["last_hop"] == "index":
            print(f"    same rows as the exact last hop at cap {entry['per_hop_cap']} in "
                  f"{entry['same_rows_as_same_cap']} of {report['calls']} calls")
        if entry["directed"]:
            print(f"    vs undirected at the same cap: same top-k sets in {entry['same_sets_as_undirected']} of "
                  f"{report['calls']} calls, same rows in {entry['same_rows_as_undirected']}")
        for slow in entry["slowest"]:
            print(f"    {slow['ms']:.1f} ms: anchors {slow['anchors']}")


if __name__ == "__main__":
    main()
