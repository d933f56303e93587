"""Retrieval quality on the real slice's val split against the reference figures in its README.

Reference (computed outside the project with bm25s and all-MiniLM-L6-v2): BM25 MRR 0.334, VSS 0.278,
RRF of both 0.337. Ours must be within 0.02 for BM25 and VSS, and hybrid must beat both.
"""

from __future__ import annotations

import psycopg


def latest_mrr(url: str) -> dict[str, float]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("""select distinct on (method) method, (summary->'metrics'->>'mrr')::float
                               from stark.eval_run where query_set = 'split:val' and finished_at is not null
                               order by method, run_id desc""").fetchall()
    return dict(rows)


def test_bm25_and_vss_match_the_reference_and_hybrid_beats_both(ibd_indexed_url):
    mrr = latest_mrr(ibd_indexed_url)
    assert abs(mrr["bm25"] - 0.334) <= 0.02, mrr
    assert abs(mrr["vss"] - 0.278) <= 0.02, mrr
    assert mrr["hybrid"] > max(mrr["bm25"], mrr["vss"]), mrr


def test_hnsw_agrees_with_exact_search(ibd_indexed_url):
    from stark_pg.embed import encode_query

    with psycopg.connect(ibd_indexed_url) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        queries = [r[0] for r in conn.execute("select body from stark.query where split = 'val' order by query_id "
                                              "limit 30")]
        overlap = 0
        for text in queries:
            vector = encode_query(text)
            approx = {r[0] for r in conn.execute("select node_id from stark.vss('stark-prime-ibd', %s, 10)", (vector,))}
            exact = {r[0] for r in conn.execute("select node_id from stark.vss('stark-prime-ibd', %s, 10, "
                                                "exact => true)", (vector,))}
            overlap += len(approx & exact)
    assert overlap / (10 * len(queries)) >= 0.95
