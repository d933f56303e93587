"""The files an evaluation leaves in `--out DIR`: STaRK-compatible CSV/JSON per method, TREC run and
qrels, a Markdown summary, a PNG chart comparing the methods' metrics and latency, and a self-contained
HTML page with every query's rankings and traces (stark_pg/eval/html_report.py).

    DIR/qrels_{split}.txt
    DIR/{method}/eval_results_{split}.csv     idx, query_id, pred_rank, one column per metric
    DIR/{method}/eval_metrics_{split}.json    mean of each metric
    DIR/{method}/run_{split}.trec
    DIR/report.md, DIR/report.png, DIR/report.html
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import psycopg

from stark_pg.eval import trec
from stark_pg.eval.runner import LATENCY_NOTE, RunOutcome
from stark_pg.resources import queries as sql

CHART_METRICS = ("hit@1", "hit@5", "recall@20", "mrr")
PUBLISHED = Path(__file__).with_name("published.csv")


def write_report(conn: psycopg.Connection, skb_id: int, skb_name: str, split: str, outcomes: list[RunOutcome],
                 out_dir: Path, dataset: str | None = None, bodies: dict[int, str] | None = None) -> Path:
    """Write every file; `bodies` (query id -> text) feeds report.html's per-query view. Returns report.md."""
    from stark_pg.eval.html_report import write_html

    out_dir.mkdir(parents=True, exist_ok=True)
    answers: dict[int, list[int]] = {}
    for outcome in outcomes:
        method_dir = out_dir / outcome.method
        method_dir.mkdir(exist_ok=True)
        rows = list(sql().run_results(conn, skb_id=skb_id, run_id=outcome.run_id))
        metric_names = list(outcome.summary["metrics"])
        with (method_dir / f"eval_results_{split}.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["idx", "query_id", "pred_rank", *metric_names])
            for idx, (query_id, ranked, _scores, answer_ids, _ranks, values, _latency, _error) in enumerate(rows):
                writer.writerow([idx, query_id, json.dumps(list(ranked)), *(values[m] for m in metric_names)])
                answers[query_id] = list(answer_ids)
        (method_dir / f"eval_metrics_{split}.json").write_text(
            json.dumps(outcome.summary["metrics"], indent=2) + "\n", encoding="utf-8")
        trec.write_run(method_dir / f"run_{split}.trec",
                       {row[0]: list(zip(row[1], row[2])) for row in rows}, tag=f"stark-pg-{outcome.method}")
    trec.write_qrels(out_dir / f"qrels_{split}.txt", answers)
    chart = out_dir / "report.png"
    write_chart(outcomes, chart, title=f"{skb_name} ({split})")
    report = out_dir / "report.md"
    report.write_text(markdown(skb_name, split, outcomes, chart.name, dataset), encoding="utf-8")
    write_html(conn, skb_id, skb_name, split, outcomes, bodies or {}, chart, out_dir / "report.html")
    return report


def markdown(skb_name: str, split: str, outcomes: list[RunOutcome], chart: str, dataset: str | None) -> str:
    names = list(outcomes[0].summary["metrics"]) if outcomes else []
    shown = [m for m in names if m in ("hit@1", "hit@5", "hit@10", "recall@20", "recall@100", "mrr", "map",
                                       "ndcg@10")]
    lines = [f"# Evaluation of {skb_name} ({split})", "",
             f"{outcomes[0].summary['queries'] if outcomes else 0} queries. Figures measured by stark-pg on this "
             "SKB; per-query rows are in each method's `eval_results_*.csv` and in `stark.eval_result` "
             "(run ids below).", "",
             "| method | run | " + " | ".join(shown) + " | p50 ms | p95 ms | failed |",
             "| --- | --- | " + " | ".join("---" for _ in shown) + " | --- | --- | --- |"]
    for o in outcomes:
        s = o.summary
        lines.append(f"| {o.method} | {o.run_id} | " + " | ".join(f"{s['metrics'][m]:.3f}" for m in shown)
                     + f" | {s['latency_ms']['p50']:.1f} | {s['latency_ms']['p95']:.1f} | {s['failed']} |")
    lines += ["", f"Latency (p50, p95 ms) is {LATENCY_NOTE}.", "", f"![metrics and latency]({chart})", ""]
    published = published_rows(dataset, human=split == "human")
    if published:
        lines += [f"## Published figures on the full STaRK-{dataset.capitalize()} benchmark (for context only)", "",
                  "**Not comparable with the table above**: measured by their authors on the full STaRK knowledge "
                  "base (129K-1.9M candidates) and the split named in each row (`test`: synthesized test queries; "
                  "`test-rand`: STaRK's random 10% of them; `human-generated`), not on this SKB and split. "
                  "Collected from the papers; `stark_pg/eval/published.csv` notes each row's source and caveats.", "",
                  "| method | Hit@1 | Hit@5 | Recall@20 | MRR | split | source |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in published:
            if not any(row.get(k) for k in ("hit@1", "hit@5", "recall@20", "mrr")):
                continue
            cells = [row.get(k) or "" for k in ("hit@1", "hit@5", "recall@20", "mrr")]
            cells = [f"{float(c):.3f}" if c else "–" for c in cells]
            lines.append(f"| {row['method']} | " + " | ".join(cells) + f" | {row['split']} | {row['source']} |")
        lines.append("")
    return "\n".join(lines)


def published_rows(dataset: str | None, human: bool = False) -> list[dict]:
    """Published rows of one dataset: human-generated queries beside a human split, synthesized otherwise."""
    if not dataset or not PUBLISHED.is_file():
        return []
    splits = {"human-generated"} if human else {"test", "test-rand"}
    with PUBLISHED.open(encoding="utf-8") as handle:
        return [row for row in csv.DictReader(handle) if row["dataset"] == dataset and row["split"] in splits]


def write_chart(outcomes: list[RunOutcome], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    methods = [o.method for o in outcomes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 1.3]})
    width = 0.8 / max(len(methods), 1)
    x = np.arange(len(CHART_METRICS))
    for i, o in enumerate(outcomes):
        values = [o.summary["metrics"].get(m, 0.0) for m in CHART_METRICS]
        bars = left.bar(x + i * width - 0.4 + width / 2, values, width, label=o.method)
        left.bar_label(bars, fmt="%.2f", fontsize=7)
    left.set_xticks(x, CHART_METRICS)
    left.set_ylim(0, 1)
    left.set_ylabel("mean over queries")
    left.legend()
    left.set_title(title)
    p50 = [o.summary["latency_ms"]["p50"] for o in outcomes]
    p95 = [o.summary["latency_ms"]["p95"] for o in outcomes]
    y = np.arange(len(methods))
    right.barh(y + 0.2, p50, 0.4, label="p50")
    right.barh(y - 0.2, p95, 0.4, label="p95")
    right.set_yticks(y, methods)
    right.set_xlabel("latency per query (ms)")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
