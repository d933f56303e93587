"""mFAR inference latency: `stark.mfar` (every pair's shortlist united, the weighted score in one statement).

    # a trained model on a real SKB: SQL time and end to end (query embedding + gate + SQL)
    python benchmarks/mfar_benchmark.py stark-prime-ibd --name all
    # a large synthetic SKB with no model: clustered random vectors for documents and every field chunk,
    # per-field BM25 built if missing, random gate weights over every (field, scorer) pair
    python benchmarks/mfar_benchmark.py synthetic-100000 --random-vectors
    # the lexical fields' BM25 engines compared in one run (default sql,textsearch; one query at a time,
    # the engines taking turns on each query)
    python benchmarks/mfar_benchmark.py synthetic-100000 --random-vectors --engines sql,textsearch

Prints per engine p50/p95 in ms over --queries queries (the SKB's own, or generated from node names),
the number of (field, scorer) pairs and candidates, and how many of the first engine's top k each
other engine returns (mean overlap). Uses STARK_PG_DSN or the embedded server of STARK_PG_HOME. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval_benchmark import (RANDOM_MODEL, cluster_centers, clustered_unit_vectors, fill_random_vectors,  # noqa: E402
                                 percentiles, query_texts)

from stark_pg.db import connect  # noqa: E402
from stark_pg.resources import queries as sql  # noqa: E402
from stark_pg.skb.catalog import require_skb  # noqa: E402


def fill_random_chunks(conn, skb_id: int, model: str) -> None:
    """One clustered random vector per chunk kind of every node (name, each text field, each relation)."""
    from psycopg import sql as pgsql

    from stark_pg.index.dense import ModelTables, hnsw_index_name, statement

    row = sql().find_model(conn, name=model)
    tables = ModelTables(row[0], model, *row[1:])
    chunk = pgsql.Identifier("stark", tables.chunk_table)
    if conn.execute(pgsql.SQL("select exists (select 1 from {} where skb_id = %s)").format(chunk), (skb_id,)).fetchone()[0]:
        return
    started = time.perf_counter()
    kinds = conn.execute("""
        select n.node_id, 'name' from stark.node n where n.skb_id = %(s)s
        union all select f.node_id, 'field:' || f.field from stark.node_field f where f.skb_id = %(s)s
        union all select distinct e.src, 'relation:' || e.relation from stark.edge e where e.skb_id = %(s)s
        order by 1""", {"s": skb_id}).fetchall()
    rng = np.random.default_rng(7)
    centers = cluster_centers(tables.dim)
    with conn.cursor().copy(pgsql.SQL("copy {} (skb_id, node_id, chunk_no, kind, doc_hash, vec) from stdin").format(
            chunk)) as copy:
        for start in range(0, len(kinds), 10_000):
            part = kinds[start:start + 10_000]
            vectors = clustered_unit_vectors(rng, centers, len(part))
            for i, ((node_id, kind), vec) in enumerate(zip(part, vectors)):
                copy.write(f"{skb_id}\t{node_id}\t{start + i}\t{kind}\trandom\t[{','.join(f'{x:.6f}' for x in vec)}]\n")
    print(f"random chunk vectors: {len(kinds):,} in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    conn.execute("set maintenance_work_mem = '4GB'")
    conn.execute(statement("create_hnsw_index", tables, index=pgsql.Identifier(hnsw_index_name(tables.chunk_table,
                                                                                                skb_id)),
                           table=chunk, skb=skb_id, m=16, ef_construction=64))
    print(f"chunk HNSW index ready in {time.perf_counter() - started:.0f} s", flush=True)


def random_vectors_run(conn, skb: str, skb_id: int, texts: list[str], pool: int, k: int, engines: list[str]) -> dict:
    from stark_pg.index.lexical import build_lexical, relation_scopes
    from stark_pg.models.mfar import skb_fields, variant_pairs

    model = fill_random_vectors(conn, skb_id, 384)
    fill_random_chunks(conn, skb_id, model)
    started = time.perf_counter()
    build_lexical(conn, skb, extra_scopes=relation_scopes(conn, skb))
    print(f"lexical scopes (with type and relations) ready in {time.perf_counter() - started:.0f} s", flush=True)
    pairs = variant_pairs(skb_fields(conn, skb, model), "all")
    rng = np.random.default_rng(3)
    vectors = clustered_unit_vectors(rng, cluster_centers(384), len(texts))
    weights = [rng.dirichlet(np.ones(len(pairs))) for _ in texts]
    times: dict[str, list[float]] = {e: [] for e in engines}
    tops: dict[str, list[list[int]]] = {e: [] for e in engines}
    for i, (text, vector) in enumerate(zip(texts, vectors)):
        args = dict(skb=skb, query=text, embedding=vector, model=model, fields=[p.field for p in pairs],
                    scorers=[p.scorer for p in pairs], weights=weights[i].tolist(), means=[0.0] * len(pairs),
                    scales=[1.0] * len(pairs), k=k, pool=pool, k1=1.2, b=0.75)
        for engine in turns(engines, i):
            started = time.perf_counter()
            rows = list(sql().mfar_top(conn, **args, engine=engine))
            times[engine].append((time.perf_counter() - started) * 1000)
            tops[engine].append([int(r[0]) for r in rows])
    # candidate-set size, measured apart from the timing
    sizes: dict[str, list[int]] = {e: [] for e in engines}
    for text, vector in list(zip(texts, vectors))[:10]:
        for engine in engines:
            rows = sql().mfar_field_scores(conn, skb=skb, query=text, embedding=vector, model=model,
                                           lexical=[p.field for p in pairs if p.scorer == "lexical"],
                                           dense=[p.field for p in pairs if p.scorer == "dense"], pool=pool,
                                           include=[], k1=1.2, b=0.75, engine=engine)
            sizes[engine].append(len({r[0] for r in rows}))
    return {"pairs": len(pairs), "lexical_pairs": sum(p.scorer == "lexical" for p in pairs),
            "engines": {e: {"sql_ms": percentiles(times[e]), "candidates_median": float(np.median(sizes[e])),
                            f"top{k}_overlap_with_{engines[0]}": overlap(tops[engines[0]], tops[e])}
                        for e in engines}}


def turns(engines: list[str], i: int) -> list[str]:
    """The engines in a rotating order, so neither always runs on a query whose pages the other just read."""
    shift = i % len(engines)
    return engines[shift:] + engines[:shift]


def overlap(reference: list[list[int]], other: list[list[int]]) -> float:
    """Mean share of the reference top k that the other top k holds."""
    shares = [len(set(a) & set(b)) / max(len(a), 1) for a, b in zip(reference, other)]
    return round(float(np.mean(shares)), 4) if shares else 0.0


def trained_run(conn, skb: str, texts: list[str], name: str, pool: int, k: int, engines: list[str]) -> dict:
    from stark_pg.retrieve import mfar

    options = {e: mfar.Options(name=name, pool=pool, engine=e) for e in engines}
    for e in engines:
        mfar.search(conn, skb, texts[0], k, options[e])          # load the model and the encoder once
    total: dict[str, list[float]] = {e: [] for e in engines}
    sql_ms: dict[str, list[float]] = {e: [] for e in engines}
    tops: dict[str, list[list[int]]] = {e: [] for e in engines}
    for i, text in enumerate(texts):
        for engine in turns(engines, i):
            started = time.perf_counter()
            ranking = mfar.search(conn, skb, text, k, options[engine])
            total[engine].append((time.perf_counter() - started) * 1000)
            sql_ms[engine].append(ranking.trace["sql_ms"])
            tops[engine].append([h.node_id for h in ranking.hits])
    return {"pairs": len(ranking.trace["weights"]),
            "engines": {e: {"sql_ms": percentiles(sql_ms[e]), "end_to_end_ms": percentiles(total[e]),
                            f"top{k}_overlap_with_{engines[0]}": overlap(tops[engines[0]], tops[e])}
                        for e in engines}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("skb")
    parser.add_argument("--name", default="all", help="trained mFAR model (without --random-vectors)")
    parser.add_argument("--random-vectors", action="store_true", help="no model: random vectors and weights")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--pool", type=int, default=100)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--engines", default="sql,textsearch",
                        help="lexical BM25 engines to compare, comma-separated (auto, textsearch, sql)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not engines or any(e not in ("auto", "textsearch", "sql") for e in engines):
        parser.error(f"--engines {args.engines!r}: comma-separated auto, textsearch, sql")
    with connect() as conn:
        skb_id = require_skb(conn, args.skb)
        texts = query_texts(conn, skb_id, args.queries)
        if args.random_vectors:
            report = random_vectors_run(conn, args.skb, skb_id, texts, args.pool, args.k, engines)
        else:
            report = trained_run(conn, args.skb, texts, args.name, args.pool, args.k, engines)
    report = {"skb": args.skb, "queries": len(texts), "pool": args.pool,
              "load_average": [round(x, 2) for x in os.getloadavg()], **report}
    print(json.dumps(report, indent=2) if args.json else
          "\n".join(f"{key}: {value}" for key, value in report.items()))


if __name__ == "__main__":
    main()
