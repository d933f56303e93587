"""Vector indexes on a synthetic SKB: build time and size of each kind, and recall@10 against exact search
with p50/p95 latency over a sweep of the search list (hnsw.ef_search / diskann.query_search_list_size).

    python benchmarks/vector_benchmark.py                      # 100,000 nodes
    python benchmarks/vector_benchmark.py --nodes 1000000 --out /tmp/vectors-1m

Loads `synthetic` SKBs of N nodes where missing (`vec-N` and, for the filter comparison, `vec-N-b`),
and fills their document vectors with clustered random unit vectors (no embedding model: 1000 topic
centres plus noise, see retrieval_benchmark.py; real embeddings crowd around topics the same way).
Then, on SKB `vec-N`:
- indexes: HNSW (m=16, ef_construction=64, the default), HNSW (m=32, ef_construction=128), HNSW over
  halfvec (m=16, ef_construction=64), DiskANN (pgvectorscale, where the server has it): build seconds,
  index size; for each, the search list sweep through stark.vss (`stark.ef_search`, as `-o ef_search=`);
- exact search (stark.vss exact => true) and a numpy brute force (the matrix in memory): latency;
- filtered search, one SKB of two: the per-SKB partial HNSW index (what stark-pg builds) against one
  HNSW index over both SKBs filtered by skb_id with pgvector 0.8's iterative scans (off, relaxed_order,
  strict_order); and one node type within the SKB (the partial index, iterative scan off vs relaxed).
Prints a table, writes JSON and (with matplotlib) a PNG of recall against p50 latency into --out;
`--parts indexes` or `--parts filter` runs one half, `--kinds hnsw,halfvec` some of the indexes.
Not a test: run by hand. Use a server of your own (STARK_PG_HOME or STARK_PG_DSN): it adds SKBs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql as pgsql

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]      # this checkout's stark_pg
from retrieval_benchmark import cluster_centers, clustered_unit_vectors, percentiles  # noqa: E402

from stark_pg.db import connect  # noqa: E402
from stark_pg.index.dense import DISKANN_BUILD, ModelTables, statement, vector_index_name  # noqa: E402
from stark_pg.resources import queries as sql  # noqa: E402

MODEL = "clustered-unit-{dim}"
CONFIGS = {  # --kinds name: (label, template section, index method, build settings)
    "hnsw": ("hnsw m16 efc64", "create_hnsw_index", "hnsw", {"m": 16, "ef_construction": 64}),
    "hnsw-m32": ("hnsw m32 efc128", "create_hnsw_index", "hnsw", {"m": 32, "ef_construction": 128}),
    "halfvec": ("halfvec hnsw m16 efc64", "create_hnsw_halfvec_index", "hnsw", {"m": 16, "ef_construction": 64}),
    "diskann": ("diskann", "create_diskann_index", "diskann", DISKANN_BUILD),
    # a cheaper graph (fewer neighbours per node, a shorter build list): what a DiskANN build at 1M can
    # finish in a session on 2 cores
    "diskann-n32-l50": ("diskann nn32 sl50", "create_diskann_index", "diskann",
                        {"num_neighbors": 32, "search_list_size": 50}),
}


def find_skb(conn, name: str) -> int | None:
    row = conn.execute("select skb_id from stark.skb where name = %s", (name,)).fetchone()
    return row[0] if row else None


def ensure_skb(conn, name: str, nodes: int, seed: int) -> int:
    found = find_skb(conn, name)
    if found is None:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "stark_pg", "load", "synthetic", "--nodes", str(nodes), "--seed",
                        str(seed), "--name", name, "--quiet"], check=True, stdout=subprocess.DEVNULL,
                       env=os.environ | {"PYTHONPATH": str(ROOT)})
        print(f"loaded {name} ({nodes:,} nodes) in {time.perf_counter() - started:.0f} s", flush=True)
        found = find_skb(conn, name)
    return found


def ensure_model(conn, dim: int) -> ModelTables:
    name = MODEL.format(dim=dim)
    row = sql().find_model(conn, name=name) or sql().register_model(conn, name=name, dim=dim)
    tables = ModelTables(row[0], name, *row[1:])
    conn.execute(statement("create_tables", tables))
    return tables


def fill_vectors(conn, tables: ModelTables, skb_id: int, seed: int) -> None:
    table = pgsql.Identifier("stark", tables.doc_table)
    have = conn.execute(pgsql.SQL("select count(*) from {} where skb_id = %s").format(table), (skb_id,)).fetchone()[0]
    node_ids = [r[0] for r in conn.execute("select node_id from stark.node where skb_id = %s order by node_id",
                                           (skb_id,))]
    if have == len(node_ids):
        return
    conn.execute(pgsql.SQL("delete from {} where skb_id = %s").format(table), (skb_id,))
    rng, centers, started = np.random.default_rng(seed), cluster_centers(tables.dim), time.perf_counter()
    with conn.cursor().copy(pgsql.SQL("copy {} (skb_id, node_id, doc_hash, vec) from stdin").format(table)) as copy:
        for start in range(0, len(node_ids), 10_000):
            chunk = node_ids[start:start + 10_000]
            for node_id, vec in zip(chunk, clustered_unit_vectors(rng, centers, len(chunk))):
                copy.write(f"{skb_id}\t{node_id}\trandom\t[{','.join(f'{x:.6f}' for x in vec)}]\n")
    conn.execute(pgsql.SQL("analyze {}").format(table))
    print(f"vectors: {len(node_ids):,} in {time.perf_counter() - started:.0f} s", flush=True)


def drop_indexes(conn, tables: ModelTables, skb_ids: list[int]) -> None:
    names = [vector_index_name(tables.doc_table, s, m) for s in skb_ids for m in ("hnsw", "diskann")]
    for name in names + [f"{tables.doc_table}_hnsw_all"]:
        conn.execute(pgsql.SQL("drop index if exists {}").format(pgsql.Identifier("stark", name)))


def index_size(conn, name: str) -> int:
    return conn.execute("select pg_relation_size(%s::regclass)", (f"stark.{name}",)).fetchone()[0]


def timed_rows(conn, statement_, params_list) -> tuple[list[float], list[list[int]]]:
    times, results = [], []
    for params in params_list:
        started = time.perf_counter()
        rows = conn.execute(statement_, params).fetchall()
        times.append((time.perf_counter() - started) * 1000)
        results.append([r[0] for r in rows])
    return times, results


def recall(found: list[list[int]], truth: list[list[int]], k: int) -> float:
    return round(float(np.mean([len(set(a[:k]) & set(b[:k])) / max(1, min(k, len(b))) for a, b in zip(found, truth)])), 4)


def vss(conn, skb: str, model: str, queries: list[np.ndarray], k: int, ef: int | None = None,
        exact: bool = False) -> tuple[list[float], list[list[int]]]:
    conn.execute("select set_config('stark.ef_search', %s, false)", ("" if ef is None else str(ef),))
    return timed_rows(conn, "select node_id from stark.vss(%s, %s, %s, %s, %s)",
                      [(skb, q, k, model, exact) for q in queries])


def sweep(conn, skb: str, model: str, queries, truth, k: int, efs: list[int]) -> list[dict]:
    rows = []
    for ef in efs:
        vss(conn, skb, model, queries[:5], k, ef)                      # warm the index's pages
        ms, found = vss(conn, skb, model, queries, k, ef)
        rows.append({"ef_search": ef, "recall@10": recall(found, truth, k)} | percentiles(ms))
    conn.execute("select set_config('stark.ef_search', '', false)")
    return rows


def doc_matrix(conn, tables: ModelTables, skb_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Ids and vectors of an SKB as numpy arrays, filled row by row from a server-side cursor: a list of
    Python float lists (an object per number) needs several times the memory of the arrays, more than a
    million vectors' worth fits in."""
    table = pgsql.Identifier("stark", tables.doc_table)
    n = conn.execute(pgsql.SQL("select count(*) from {} where skb_id = %s").format(table), (skb_id,)).fetchone()[0]
    ids, matrix = np.empty(n, dtype=np.int64), np.empty((n, tables.dim), dtype=np.float32)
    with conn.transaction(), conn.cursor(name="doc_matrix", binary=True) as cur:
        cur.itersize = 20_000
        cur.execute(pgsql.SQL("select node_id, vec::real[] from {} where skb_id = %s").format(table), (skb_id,))
        for i, (node_id, vec) in enumerate(cur):
            ids[i], matrix[i] = node_id, vec
    return ids, matrix


def enable_vectorscale(conn) -> bool:
    """Whether the server has pgvectorscale (DiskANN); creates the extension where it is available."""
    have = conn.execute("select count(*) > 0 from pg_available_extensions where name = 'vectorscale'").fetchone()[0]
    if have:
        conn.execute("create extension if not exists vectorscale cascade")
    return bool(have)


def exact_baselines(conn, tables: ModelTables, skb_id: int, skb: str, queries, k: int, report: dict) -> list[list[int]]:
    """Exact search in SQL (no vector index may exist when this runs) and a numpy brute force over the
    matrix in memory, both timed into `report`; returns the exact top k, the truth for recall."""
    exact_ms, truth = vss(conn, skb, tables.name, queries, k, exact=True)
    report["exact_sql"] = percentiles(exact_ms)
    ids, matrix = doc_matrix(conn, tables, skb_id)
    numpy_ms, numpy_top = [], []
    for q in queries:
        started = time.perf_counter()
        scores = matrix @ q
        top = np.argpartition(-scores, k)[:k]
        numpy_top.append(list(ids[top[np.argsort(-scores[top])]]))
        numpy_ms.append((time.perf_counter() - started) * 1000)
    report["numpy_bruteforce"] = percentiles(numpy_ms) | {"recall@10": recall(numpy_top, truth, k)}
    print(f"exact: {report['exact_sql']}  numpy: {report['numpy_bruteforce']}", flush=True)
    return truth


def build_and_sweep(conn, tables: ModelTables, skb_ids: list[int], skb: str, queries, truth, k: int, efs: list[int],
                    kinds: list[str], vectorscale: bool, timeout_s: float | None = None) -> list[dict]:
    """Build each kind of index over the first SKB's vectors in turn (the others dropped first): build
    seconds, size, and the search-list sweep. A build that runs past `timeout_s` is cancelled and reported
    as unfinished instead of holding up the rest of the run (a DiskANN build over a million vectors can take that long)."""
    entries = []
    for kind in kinds:
        label, section, method, build = CONFIGS[kind]
        if method == "diskann" and not vectorscale:
            print("notice: vectorscale is not available on this server: no DiskANN", flush=True)
            continue
        drop_indexes(conn, tables, skb_ids)
        index = vector_index_name(tables.doc_table, skb_ids[0], method)
        conn.execute("select set_config('statement_timeout', %s, false)", (f"{int(timeout_s * 1000)}" if timeout_s else "0",))
        started = time.perf_counter()
        try:
            conn.execute(statement(section, tables, index=pgsql.Identifier(index),
                                   table=pgsql.Identifier("stark", tables.doc_table), skb=skb_ids[0], **build))
        except psycopg.errors.QueryCanceled:
            entry = {"index": label, "build_s": None, "unfinished_after_s": round(time.perf_counter() - started, 1),
                     "size_mb": None, "sweep": []}
            entries.append(entry)
            print(json.dumps(entry), flush=True)
            continue
        finally:
            conn.execute("select set_config('statement_timeout', '0', false)")
        build = time.perf_counter() - started
        entry = {"index": label, "build_s": round(build, 1), "size_mb": round(index_size(conn, index) / 2**20, 1),
                 "sweep": sweep(conn, skb, tables.name, queries, truth, k, efs)}
        entries.append(entry)
        print(json.dumps(entry), flush=True)
    return entries


def filtered(conn, tables: ModelTables, skb_ids: list[int], queries, truth, k: int, ef: int) -> dict:
    """The per-SKB partial index against one index over both SKBs with iterative scans; a node-type filter."""
    doc = pgsql.Identifier("stark", tables.doc_table)
    skb = skb_ids[0]
    by_skb = pgsql.SQL("select d.node_id from {} d where d.skb_id = {} order by d.vec <=> %s limit %s").format(
        doc, pgsql.Literal(skb))
    conn.execute(f"set hnsw.ef_search = {ef}")
    report: dict = {"ef_search": ef}
    drop_indexes(conn, tables, skb_ids)
    started = time.perf_counter()
    for s in skb_ids:
        conn.execute(statement("create_hnsw_index", tables, index=pgsql.Identifier(vector_index_name(tables.doc_table, s)),
                               table=doc, skb=s, m=16, ef_construction=64))
    build = time.perf_counter() - started
    size = sum(index_size(conn, vector_index_name(tables.doc_table, s)) for s in skb_ids)
    conn.execute("set hnsw.iterative_scan = off")
    ms, found = timed_rows(conn, by_skb, [(q, k) for q in queries])
    report["partial index per SKB"] = {"build_s": round(build, 1), "size_mb": round(size / 2**20, 1),
                                       "recall@10": recall(found, truth, k), "results": float(np.mean([len(f) for f in found]))} | percentiles(ms)

    # one node type of the SKB: the partial index, with and without iterative scan
    kind = conn.execute("select type from stark.node where skb_id = %s group by type "
                        "order by abs(count(*) - 0.1 * sum(count(*)) over ()) limit 1", (skb,)).fetchone()[0]
    share = conn.execute("select avg((type = %s)::int)::float from stark.node where skb_id = %s", (kind, skb)).fetchone()[0]
    by_type = pgsql.SQL("select d.node_id from {} d join stark.node n on n.skb_id = d.skb_id and n.node_id = d.node_id "
                        "where d.skb_id = {} and n.type = %s order by d.vec <=> %s limit %s").format(doc, pgsql.Literal(skb))
    exact_type = pgsql.SQL("select d.node_id from {} d join stark.node n on n.skb_id = d.skb_id and n.node_id = d.node_id "
                           "where d.skb_id = {} and n.type = %s order by (d.vec <=> %s) + 0 limit %s").format(
        doc, pgsql.Literal(skb))
    _, type_truth = timed_rows(conn, exact_type, [(kind, q, k) for q in queries])
    report["one node type"] = {"type": kind, "share": round(share, 4)}
    for mode in ("off", "relaxed_order", "strict_order"):
        conn.execute(f"set hnsw.iterative_scan = {mode}")
        plan = "\n".join(r[0] for r in conn.execute(pgsql.SQL("explain ") + by_type, (kind, queries[0], k)))
        ms, found = timed_rows(conn, by_type, [(kind, q, k) for q in queries])
        report["one node type"][f"partial index, iterative {mode}"] = {
            "recall@10": recall(found, type_truth, k), "results": float(np.mean([len(f) for f in found])),
            "uses_index": "_hnsw__skb" in plan} | percentiles(ms)

    # one HNSW index over both SKBs, filtered by skb_id
    drop_indexes(conn, tables, skb_ids)
    started = time.perf_counter()
    conn.execute(pgsql.SQL("create index {} on {} using hnsw (vec vector_cosine_ops) with (m = 16, ef_construction = 64)")
                 .format(pgsql.Identifier(f"{tables.doc_table}_hnsw_all"), doc))
    build = time.perf_counter() - started
    report["one index, both SKBs"] = {"build_s": round(build, 1),
                                      "size_mb": round(index_size(conn, f"{tables.doc_table}_hnsw_all") / 2**20, 1)}
    for mode in ("off", "relaxed_order", "strict_order"):
        conn.execute(f"set hnsw.iterative_scan = {mode}")
        plan = "\n".join(r[0] for r in conn.execute(pgsql.SQL("explain ") + by_skb, (queries[0], k)))
        ms, found = timed_rows(conn, by_skb, [(q, k) for q in queries])
        report["one index, both SKBs"][f"iterative {mode}"] = {
            "recall@10": recall(found, truth, k), "results": float(np.mean([len(f) for f in found])),
            "uses_index": "hnsw_all" in plan} | percentiles(ms)
    conn.execute("reset hnsw.iterative_scan")
    conn.execute("reset hnsw.ef_search")
    drop_indexes(conn, tables, skb_ids)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--ef", default="10,20,40,64,100,200,400", help="search list sizes to sweep")
    parser.add_argument("--kinds", default="hnsw,hnsw-m32,halfvec,diskann",
                        help="indexes to build and sweep: " + ", ".join(CONFIGS))
    parser.add_argument("--parts", default="indexes,filter",
                        help="indexes (build and sweep each kind), filter (partial per SKB vs one index, second SKB)")
    parser.add_argument("--out", type=Path, default=Path("vector-benchmark"))
    parser.add_argument("--index-timeout", type=float, help="cancel an index build after this many seconds "
                        "(reported as unfinished) and go on with the next kind")
    parser.add_argument("--maintenance-work-mem", default="1GB",
                        help="for the index builds; an HNSW graph larger than this builds much more slowly "
                             "(1M vectors, m=16: about 2 GB)")
    args = parser.parse_args()
    efs = [int(x) for x in args.ef.split(",")]
    parts = set(args.parts.split(","))
    k = args.k
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"nodes": args.nodes, "dim": args.dim, "queries": args.queries, "k": k}
    with connect() as conn:
        conn.execute("select set_config('maintenance_work_mem', %s, false)", (args.maintenance_work_mem,))
        name = f"vec-{args.nodes}"
        skb_ids = [ensure_skb(conn, name, args.nodes, 7)]
        if "filter" in parts:
            skb_ids.append(ensure_skb(conn, f"{name}-b", args.nodes, 8))
        tables = ensure_model(conn, args.dim)
        for i, s in enumerate(skb_ids):
            fill_vectors(conn, tables, s, seed=100 + i)
        queries = list(clustered_unit_vectors(np.random.default_rng(1), cluster_centers(args.dim), args.queries))
        report["pgvectorscale"] = enable_vectorscale(conn)
        drop_indexes(conn, tables, skb_ids)
        truth = exact_baselines(conn, tables, skb_ids[0], name, queries, k, report)

        kinds = args.kinds.split(",") if "indexes" in parts else []
        report["indexes"] = build_and_sweep(conn, tables, skb_ids, name, queries, truth, k, efs, kinds,
                                            report["pgvectorscale"], args.index_timeout)
        drop_indexes(conn, tables, skb_ids)
        if "filter" in parts:
            report["filtered"] = filtered(conn, tables, skb_ids, queries, truth, k, ef=100)
            print(json.dumps(report["filtered"], indent=1), flush=True)

    (args.out / "vector_benchmark.json").write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    if report["indexes"]:
        plot(report, args.out / "vector_benchmark.png")


def print_table(report: dict) -> None:
    print(f"\n{report['nodes']:,} vectors of {report['dim']} dimensions, {report['queries']} queries, k={report['k']}")
    print(f"{'index':<24} {'build s':>8} {'size MB':>8} {'ef_search':>9} {'recall@10':>9} {'p50 ms':>8} {'p95 ms':>8}")
    for entry in report["indexes"]:
        if entry["build_s"] is None:
            print(f"{entry['index']:<24} build cancelled after {entry['unfinished_after_s']} s (--index-timeout)")
        for i, row in enumerate(entry["sweep"]):
            print(f"{entry['index'] if i == 0 else '':<24} {entry['build_s'] if i == 0 else '':>8} "
                  f"{entry['size_mb'] if i == 0 else '':>8} {row['ef_search']:>9} {row['recall@10']:>9.4f} "
                  f"{row['p50']:>8.2f} {row['p95']:>8.2f}")
    for label, key in (("exact (SQL)", "exact_sql"), ("numpy brute force", "numpy_bruteforce")):
        row = report[key]
        print(f"{label:<24} {'':>8} {'':>8} {'':>9} {1.0:>9.4f} {row['p50']:>8.2f} {row['p95']:>8.2f}")
    if "filtered" in report:
        f = report["filtered"]
        print(f"\nfiltered search, ef_search={f['ef_search']}: one SKB of two")
        print(f"{'index':<44} {'recall@10':>9} {'results':>7} {'p50 ms':>8} {'p95 ms':>8}")
        rows = [("partial index per SKB", f["partial index per SKB"])]
        rows += [(f"one index, both SKBs, iterative {m}", f["one index, both SKBs"][f"iterative {m}"])
                 for m in ("off", "relaxed_order", "strict_order")]
        t = f["one node type"]
        rows += [(f"type {t['type']} ({t['share']:.1%}), partial, iter. {m}", t[f"partial index, iterative {m}"])
                 for m in ("off", "relaxed_order", "strict_order")]
        for label, row in rows:
            print(f"{label:<44} {row['recall@10']:>9.4f} {row['results']:>7.1f} {row['p50']:>8.2f} {row['p95']:>8.2f}")
        print(f"build: partial per SKB {f['partial index per SKB']['build_s']} s, "
              f"{f['partial index per SKB']['size_mb']} MB; one index {f['one index, both SKBs']['build_s']} s, "
              f"{f['one index, both SKBs']['size_mb']} MB")


def plot(report: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG", flush=True)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for entry in report["indexes"]:
        ax.plot([r["p50"] for r in entry["sweep"]], [r["recall@10"] for r in entry["sweep"]], marker="o",
                label=entry["index"])
        for r in entry["sweep"]:
            ax.annotate(str(r["ef_search"]), (r["p50"], r["recall@10"]), fontsize=6, xytext=(2, -8),
                        textcoords="offset points")
    ax.axvline(report["exact_sql"]["p50"], color="grey", linestyle=":", label="exact SQL p50")
    ax.axvline(report["numpy_bruteforce"]["p50"], color="black", linestyle="--", label="numpy brute force p50")
    ax.set_xscale("log")
    ax.set_xlabel("p50 latency (ms, log)")
    ax.set_ylabel("recall@10 vs exact")
    ax.set_title(f"{report['nodes']:,} vectors ({report['dim']}-d): search list sweep")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
