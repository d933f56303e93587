"""Per-query latency of BM25, VSS, multi-VSS and hybrid on an indexed SKB, with yardsticks measured in
the same run on the same data: bm25s (fed PostgreSQL's own tokens) and a numpy brute-force search.
BM25 is measured through both engines where the SKB has a pg_textsearch index (the index and the exact
SQL), with the overlap of their top k.

    # the real slice, after `stark-pg index stark-prime-ibd`
    python benchmarks/retrieval_benchmark.py stark-prime-ibd
    # a large SKB: dense part with clustered random unit vectors (no model), HNSW recall@10 vs exact
    python benchmarks/retrieval_benchmark.py synthetic-1000000 --random-vectors --methods bm25,vss

Prints p50/p95 in milliseconds for the SQL alone (what PostgreSQL spends) and, for the real-model
mode, end to end through the method modules, as a user who runs one method gets them: each method is
warmed up on questions outside the timed set (model loaded, plans cached, its index pages read), then
timed alone with the query cache emptied, so that every timed question pays for its own embedding
(cold: a text not embedded before); the embedding part and the rest are reported apart. Beside them:
the query embedding cold and cached (the SKB's recorded encoder, and sentence-transformers' own
`encode` as the yardstick), and with --restart HNSW cold (the first search of each question after a
restart of the embedded server, its shared buffers empty; OS caches dropped too with --drop-caches,
where this user may) and then warm. Not a test: run by hand.

    python benchmarks/retrieval_benchmark.py stark-prime-ibd --methods vss,hybrid --restart
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from stark_pg.db import connect
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb

IBD_QUERIES = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "stark-prime-ibd" / "queries.csv"
RANDOM_MODEL = "clustered-unit-{dim}"
CLUSTERS = 1000          # real embeddings crowd around topics; uniform random vectors in 384-d do not, and
NOISE = 0.6              # no ANN index finds their neighbours (all distances are nearly equal)


def clustered_unit_vectors(rng: np.random.Generator, centers: np.ndarray, n: int) -> np.ndarray:
    """Unit vectors around random cluster centres: each is a centre plus noise of norm about NOISE."""
    dim = centers.shape[1]
    vectors = centers[rng.integers(0, len(centers), n)] + rng.standard_normal((n, dim)) * (NOISE / np.sqrt(dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def cluster_centers(dim: int) -> np.ndarray:
    centers = np.random.default_rng(42).standard_normal((CLUSTERS, dim))
    return centers / np.linalg.norm(centers, axis=1, keepdims=True)


def percentiles(ms: list[float]) -> dict:
    return {"p50": round(float(np.percentile(ms, 50)), 2), "p95": round(float(np.percentile(ms, 95)), 2),
            "n": len(ms)}


def timed(fn, items) -> tuple[list[float], list]:
    times, results = [], []
    for item in items:
        started = time.perf_counter()
        results.append(fn(item))
        times.append((time.perf_counter() - started) * 1000)
    return times, results


def query_texts(conn, skb_id: int, n: int) -> list[str]:
    texts = [r[0] for r in conn.execute("select body from stark.query where skb_id = %s order by query_id limit %s",
                                        (skb_id, n))]
    if len(texts) < n and IBD_QUERIES.is_file():   # an SKB without queries borrows the slice's real ones
        with IBD_QUERIES.open(encoding="utf-8") as handle:
            texts += [row["query"] for row in csv.DictReader(handle)][: n - len(texts)]
    return texts


def bm25_sql(conn, skb_id: int, texts: list[str], k: int, engine: str) -> tuple[dict, list]:
    """BM25 through one engine: pg_textsearch's index (`textsearch`) or the exact SQL (`sql`); each query's
    top k as (node_id, score) rows."""
    ms, results = timed(lambda t: [tuple(r) for r in sql().bm25_top(conn, skb_id=skb_id, scope="*", query=t, k1=1.2,
                                                                    b=0.75, k=k, engine=engine)], texts)
    return percentiles(ms), results


def overlap(reference: list, other: list, up_to_ties: bool = False, rel: float = 1e-9) -> float:
    """The share of the reference top k (node_id, score) that the other top k holds. Up to ties, a node of
    the other list that is not in the reference counts too when it scores the reference's k-th score
    (within `rel`): which of the nodes tied at the cut-off a top k keeps is a tie-break, not a ranking."""
    if not reference:
        return 1.0 if not other else 0.0
    mine = {n for n, _ in reference}
    kth = min(s for _, s in reference)
    hits = sum(n in mine or (up_to_ties and abs(s - kth) <= rel * abs(kth)) for n, s in other)
    return min(hits, len(reference)) / len(reference)


def mean_overlap(references: list, others: list, up_to_ties: bool, rel: float = 1e-9) -> float:
    return round(float(np.mean([overlap(a, b, up_to_ties, rel) for a, b in zip(references, others)])), 4)


def bm25_engines(conn, skb_id: int, texts: list[str], k: int) -> dict:
    """Both engines on the same queries, and how alike their top k are: the plain overlap of the node
    sets, and the overlap up to ties (nodes scoring the k-th score count as interchangeable)."""
    report = {}
    report["bm25_sql"], exact = bm25_sql(conn, skb_id, texts, k, "sql")
    if sql().bm25_engine(conn, skb_id=skb_id, scope="*", engine="auto", k1=1.2, b=0.75) == "textsearch":
        report["bm25_textsearch"], indexed = bm25_sql(conn, skb_id, texts, k, "textsearch")
        report["bm25_textsearch"]["top_k_overlap_with_sql"] = mean_overlap(exact, indexed, False)
        report["bm25_textsearch"]["top_k_overlap_up_to_ties"] = mean_overlap(exact, indexed, True)
        report["bm25_textsearch"]["identical_top_k"] = round(float(np.mean(
            [a == b for a, b in zip(exact, indexed)])), 4)
        report["bm25_textsearch_parts"] = textsearch_parts(conn, skb_id, texts, k)
    report["_sql_top_k"] = exact             # for the yardstick's overlap; not printed
    return report


def textsearch_parts(conn, skb_id: int, texts: list[str], k: int) -> dict:
    """Where the index path's time goes, on the same queries: a `select 1` (the client's round trip),
    the index scan's own top k through stark.bm25_index_scan (no exact re-scoring, its ties unbroken),
    and the scan statement alone as the server executes it (EXPLAIN ANALYZE's execution time, no
    planning, no client), beside stark.bm25_top's whole call measured above."""
    from psycopg import sql as pgsql

    table, index = conn.execute("select stark.bm25_table(%s, '*'), 'stark.' || stark.bm25_index(%s, '*')",
                                (skb_id, skb_id)).fetchone()
    parts = {}
    ms, _ = timed(lambda t: conn.execute("select 1").fetchall(), texts)
    parts["round_trip"] = percentiles(ms)
    ms, _ = timed(lambda t: conn.execute("select node_id, index_score from stark.bm25_index_scan(%s, '*', %s, %s)",
                                         (skb_id, t, k)).fetchall(), texts)
    parts["index_scan_function"] = percentiles(ms)
    executed = []
    with conn.transaction():
        conn.execute("set local enable_seqscan = off")
        for text in texts:
            plan = conn.execute(pgsql.SQL(
                "explain (analyze, format json) select node_id, bm25_get_current_score() from stark.{} "
                "order by body <@> to_bm25query({}, {}) limit {}").format(
                pgsql.Identifier(table), pgsql.Literal(text), pgsql.Literal(index), pgsql.Literal(k))).fetchone()[0]
            executed.append(plan[0]["Execution Time"])
    parts["index_scan_executed"] = percentiles(executed)
    return parts


def bm25s_yardstick(conn, skb_id: int, texts: list[str], k: int, exact: list | None = None) -> dict:
    """bm25s over the same lexemes PostgreSQL indexed (tokens fetched from the postings), timed four ways
    on the same queries: its scores alone (`get_scores`, no ranking: not a top k); the scores and a top-k
    selection (`np.argpartition` of the negated scores, then the k sorted), the fair yardstick for a top-k
    search; bm25s's own `retrieve` (numpy backend, one query a call: `np.argpartition(scores, -k)`, slow
    on mostly equal scores in numpy 2); and the scores with a full
    `argsort`, the way this benchmark timed bm25s until 2026-11-29 (it sorts every document, so it is
    labelled as such and is no yardstick). With `exact` (the SQL engine's top k per query), the overlap of
    bm25s's top k with it, plain and up to ties (bm25s scores in float32: ties within 1e-5)."""
    import bm25s

    started = time.perf_counter()
    docs: dict[int, list[str]] = {}
    with conn.transaction(), conn.cursor(name="postings") as cur:
        cur.itersize = 200_000
        cur.execute("select node_id, term, tf from stark.lex_posting where skb_id = %s and scope = '*'", (skb_id,))
        for node_id, term, tf in cur:
            docs.setdefault(node_id, []).extend([term] * tf)
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index(list(docs.values()), show_progress=False)
    node_ids = np.fromiter(docs, dtype=np.int64, count=len(docs))
    built = time.perf_counter() - started
    vocab = retriever.vocab_dict
    tokens = [[t for t, n in conn.execute("select term, qtf from stark.query_terms(%s)", (text,)) for _ in range(n)
               if t in vocab] for text in texts]
    asked = [toks for toks in tokens if toks]            # a query with no known term scores nothing

    def argpartition_top_k(toks: list[str]) -> list[tuple[int, float]]:
        # the k smallest of the negated scores: np.argpartition(scores, -k), as bm25s.retrieve selects, is
        # far slower on arrays where most values are equal (every non-matching document scores 0)
        negated = -retriever.get_scores(toks)
        top = np.argpartition(negated, k - 1)[:k]
        top = top[np.argsort(negated[top], kind="stable")]
        return [(int(node_ids[i]), float(-negated[i])) for i in top if negated[i] < 0]

    def retrieve(toks: list[str]):
        return retriever.retrieve([toks], k=k, show_progress=False, n_threads=0, backend_selection="numpy")

    report = {"index_seconds": round(built, 1), "docs": len(docs), "queries_with_known_terms": len(asked)}
    ms, _ = timed(retriever.get_scores, asked)
    report["get_scores_only"] = percentiles(ms)
    ms, ranked = timed(argpartition_top_k, asked)
    report["get_scores_argpartition"] = percentiles(ms)
    ms, _ = timed(retrieve, asked)
    report["retrieve"] = percentiles(ms)
    ms, _ = timed(lambda toks: retriever.get_scores(toks).argsort()[::-1][:k], asked)
    report["get_scores_full_argsort"] = percentiles(ms)
    if exact is not None:
        reference = [rows for rows, toks in zip(exact, tokens) if toks]
        report["top_k_overlap_with_sql"] = mean_overlap(reference, ranked, False)
        report["top_k_overlap_up_to_ties"] = mean_overlap(reference, ranked, True, rel=1e-5)
    return report


def fill_random_vectors(conn, skb_id: int, dim: int) -> str:
    """Register a pseudo-model whose document vectors are clustered random unit vectors; fill it; build HNSW."""
    from psycopg import sql as pgsql

    from stark_pg.index.dense import ModelTables, hnsw_index_name, statement

    name = RANDOM_MODEL.format(dim=dim)
    row = sql().find_model(conn, name=name) or sql().register_model(conn, name=name, dim=dim)
    tables = ModelTables(row[0], name, *row[1:])
    conn.execute(statement("create_tables", tables))
    have = conn.execute(pgsql.SQL("select count(*) from {} where skb_id = %s").format(
        pgsql.Identifier("stark", tables.doc_table)), (skb_id,)).fetchone()[0]
    node_ids = [r[0] for r in conn.execute("select node_id from stark.node where skb_id = %s", (skb_id,))]
    if have < len(node_ids):
        rng = np.random.default_rng(0)
        started = time.perf_counter()
        with conn.cursor().copy(pgsql.SQL("copy {} (skb_id, node_id, doc_hash, vec) from stdin").format(
                pgsql.Identifier("stark", tables.doc_table))) as copy:
            for start in range(0, len(node_ids), 10_000):
                chunk = node_ids[start:start + 10_000]
                vectors = clustered_unit_vectors(rng, cluster_centers(dim), len(chunk))
                for node_id, vec in zip(chunk, vectors):
                    copy.write(f"{skb_id}\t{node_id}\trandom\t[{','.join(f'{x:.6f}' for x in vec)}]\n")
        print(f"random vectors: {len(node_ids):,} in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    conn.execute("set maintenance_work_mem = '4GB'")
    conn.execute(statement("create_hnsw_index", tables, index=pgsql.Identifier(hnsw_index_name(tables.doc_table, skb_id)),
                           table=pgsql.Identifier("stark", tables.doc_table), skb=skb_id, m=16, ef_construction=64))
    print(f"HNSW index ready in {time.perf_counter() - started:.0f} s", flush=True)
    return name


def doc_matrix(conn, skb_id: int, model: str) -> tuple[np.ndarray, np.ndarray]:
    from psycopg import sql as pgsql

    table = sql().find_model(conn, name=model)[2]
    ids, vecs = [], []
    with conn.transaction(), conn.cursor(name="vectors") as cur:
        cur.itersize = 50_000
        cur.execute(pgsql.SQL("select node_id, vec from {} where skb_id = %s").format(pgsql.Identifier("stark", table)),
                    (skb_id,))
        for node_id, vec in cur:
            ids.append(node_id)
            vecs.append(np.asarray(vec.to_numpy() if hasattr(vec, "to_numpy") else vec, dtype=np.float32))
    return np.array(ids), np.vstack(vecs)


def dense(conn, skb_name: str, skb_id: int, model: str, vectors: list[np.ndarray], k: int) -> dict:
    hnsw_ms, hnsw = timed(lambda v: [r[0] for r in sql().vss_top(conn, skb=skb_name, embedding=v, k=k, model=model,
                                                                 exact=False)], vectors)
    exact_ms, exact = timed(lambda v: [r[0] for r in sql().vss_top(conn, skb=skb_name, embedding=v, k=k, model=model,
                                                                   exact=True)], vectors)
    recall = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(hnsw, exact)]))
    ids, matrix = doc_matrix(conn, skb_id, model)
    numpy_ms, _ = timed(lambda v: ids[np.argpartition(-(matrix @ v), k)[:k]], vectors)
    return {"hnsw": percentiles(hnsw_ms), "exact_sql": percentiles(exact_ms), "numpy_bruteforce": percentiles(numpy_ms),
            "hnsw_recall@10_vs_exact": round(recall, 4), "vectors": len(ids)}


def end_to_end(conn, skb_name: str, method: str, warm_texts: list[str], texts: list[str], k: int) -> dict:
    """One method alone: warmed up on `warm_texts` (never timed), then each of `texts` searched with an
    empty query cache (its embedding cold). The whole search, and its parts from the method's trace:
    the query embedding (`embed_ms`) and the rest (SQL, and any ranking in Python)."""
    from stark_pg import embed
    from stark_pg.retrieve import get_method

    module = get_method(method)
    for text in warm_texts:
        module.search(conn, skb_name, text, k)
    embed._query_vector.cache_clear()
    whole, embedding, rest = [], [], []
    for text in texts:
        started = time.perf_counter()
        ranking = module.search(conn, skb_name, text, k)
        ms = (time.perf_counter() - started) * 1000
        whole.append(ms)
        spent = float(ranking.trace.get("embed_ms") or 0.0)
        embedding.append(spent)
        rest.append(ms - spent)
    return {"whole": percentiles(whole), "query_embedding": percentiles(embedding), "rest": percentiles(rest)}


def query_embedding(conn, skb_name: str, texts: list[str], warm_texts: list[str]) -> dict:
    """The query embedding alone, with the SKB's recorded encoder: cold (each text new to the process's
    cache; the model loaded and warmed up on other texts first) and cached (the same text again); and
    the yardstick, sentence-transformers' own `encode` of one text (torch)."""
    from stark_pg import embed

    encoder = embed.skb_encoder(conn, skb_name, None)
    for text in warm_texts:
        embed.encode_query(text, None, encoder)
    embed._query_vector.cache_clear()
    cold, _ = timed(lambda t: embed.encode_query(t, None, encoder), texts)
    cached, _ = timed(lambda t: embed.encode_query(t, None, encoder), texts)
    model = embed.load_model()
    for text in warm_texts:
        model.encode([text], normalize_embeddings=True)
    yardstick, _ = timed(lambda t: model.encode([t], normalize_embeddings=True, show_progress_bar=False), texts)
    return {"encoder": encoder.label, "cold": percentiles(cold), "cached": percentiles(cached),
            "sentence_transformers_encode_torch": percentiles(yardstick)}


def restarted_server(drop_caches: bool) -> dict:
    """Restart the embedded server (its shared buffers start empty); with `drop_caches`, also ask the
    kernel to drop its page cache (root on a machine that allows it), reporting whether it did."""
    import os

    from stark_pg.db import embedded

    if os.environ.get("STARK_PG_DSN"):
        raise SystemExit("--restart needs the embedded server (no STARK_PG_DSN)")
    embedded.stop()
    dropped = False
    if drop_caches:
        try:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as handle:
                handle.write("3\n")
            dropped = True
        except OSError as exc:
            dropped = f"not allowed: {exc}"
    embedded.start()
    return {"restarted": True, "os_caches_dropped": dropped}


def hnsw_cold_and_warm(skb_name: str, model: str, vectors: list[np.ndarray], k: int, drop_caches: bool) -> dict:
    """HNSW searches right after a restart of the server (cold), then the same searches again (warm)."""
    report = restarted_server(drop_caches)
    with connect() as conn:
        cold, _ = timed(lambda v: list(sql().vss_top(conn, skb=skb_name, embedding=v, k=k, model=model,
                                                      exact=False)), vectors)
        warm, _ = timed(lambda v: list(sql().vss_top(conn, skb=skb_name, embedding=v, k=k, model=model,
                                                      exact=False)), vectors)
    return report | {"cold": percentiles(cold), "warm": percentiles(warm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("skb")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--methods", default="bm25,vss,multivss,hybrid")
    parser.add_argument("--random-vectors", action="store_true",
                        help="dense part with random unit vectors around 1000 cluster centres (no model needed)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--no-yardsticks", action="store_true")
    parser.add_argument("--warmup", type=int, default=20, help="questions (outside the timed ones) each method is "
                                                                 "warmed up on")
    parser.add_argument("--restart", action="store_true", help="also HNSW cold: restart the embedded server first")
    parser.add_argument("--drop-caches", action="store_true", help="with --restart: drop the OS page cache too "
                                                                     "(root, where allowed; slows every process "
                                                                     "on the machine for a while)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    methods = args.methods.split(",")
    report: dict = {"skb": args.skb}
    with connect() as conn:
        skb_id = require_skb(conn, args.skb)
        report["nodes"] = sql().count_nodes(conn, skb_id=skb_id)
        everything = query_texts(conn, skb_id, args.queries + args.warmup)
        warm_texts, texts = everything[:args.warmup], everything[args.warmup:]
        if "bm25" in methods:
            report |= bm25_engines(conn, skb_id, texts, args.k)
            exact = report.pop("_sql_top_k")
            if not args.no_yardsticks:
                report["bm25s"] = bm25s_yardstick(conn, skb_id, texts, args.k, exact)
        if args.random_vectors:
            model = fill_random_vectors(conn, skb_id, args.dim)
            vectors = list(clustered_unit_vectors(np.random.default_rng(1), cluster_centers(args.dim), len(texts)))
            report["vss_random_vectors"] = dense(conn, args.skb, skb_id, model, vectors, args.k)
        else:
            from stark_pg.embed import DEFAULT_MODEL, encode_query, skb_encoder

            # the query embeddings only for the dense methods (bm25 alone loads no model)
            encoder = skb_encoder(conn, args.skb, None)
            vectors = [encode_query(t, None, encoder) for t in texts] if {"vss", "multivss"} & set(methods) else []
            if set(methods) - {"bm25"}:
                report["query_embedding"] = query_embedding(conn, args.skb, texts, warm_texts)
            if "vss" in methods:
                report["vss_sql"] = dense(conn, args.skb, skb_id, DEFAULT_MODEL, vectors, args.k)
            if "multivss" in methods:
                ms, _ = timed(lambda v: list(sql().multivss_top(conn, skb=args.skb, embedding=v, k=args.k,
                                                                model=DEFAULT_MODEL, agg="max", top=3, pool=None,
                                                                exact=False)), vectors)
                report["multivss_sql"] = percentiles(ms)
            for method in methods:
                report[f"{method}_end_to_end"] = end_to_end(conn, args.skb, method, warm_texts, texts, args.k)
    if args.restart and not args.random_vectors and vectors:
        report["hnsw_after_restart"] = hnsw_cold_and_warm(args.skb, DEFAULT_MODEL, vectors, args.k, args.drop_caches)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for key, value in report.items():
        print(f"{key:>24}: {value}")


if __name__ == "__main__":
    main()
