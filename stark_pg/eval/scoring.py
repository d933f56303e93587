"""Scoring rankings made elsewhere (TREC run + qrels) with stark-pg's metrics, for `stark-pg score`."""

from __future__ import annotations

from pathlib import Path

from stark_pg.eval import metrics, trec


def score_run(run_path: Path, qrels_path: Path, names=metrics.DEFAULT_METRICS) -> dict:
    """Mean and per-query metrics over the queries of the qrels that have a relevant document.

    As trec_eval does, queries of the run without judgments are ignored, and judged queries missing
    from the run score zero. Relevant documents a ranking lacks count as unranked (see metrics).
    """
    run, qrels = trec.read_run(run_path), trec.read_qrels(qrels_path)
    per_query = {qid: metrics.evaluate([doc for doc, _ in run.get(qid, [])], relevant, names)
                 for qid, relevant in qrels.items() if relevant}
    return {"queries": len(per_query), "missing_from_run": sorted(q for q in per_query if q not in run),
            "metrics": metrics.mean_metrics(list(per_query.values())), "per_query": per_query}
