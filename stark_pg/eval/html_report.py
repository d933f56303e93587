"""`report.html`: one self-contained page to see what each method did on each query, and why it failed.

The page carries everything inline (CSS, the chart as a base64 PNG, no scripts, no links outside the
page), so it can be mailed, archived or opened offline. It shows the metrics table, the chart, an
overview of where each method ranked each query's first answer, and per query: the text, its answers
(with each method's rank for them), each method's top 10 with the answers marked, and the method's
trace (what it stored in stark.eval_result.trace: its SQL, candidate counts, LLM calls...) and error.
Every text is escaped: queries and node names come from files anyone can write.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path

import psycopg

from stark_pg.eval.runner import LATENCY_NOTE, RunOutcome
from stark_pg.resources import queries as sql

TOP = 10
MAX_QUERIES = 500          # per-query sections shown; the rest stay in stark.eval_result
TRACE_CHARS = 6000         # per trace shown; traces with LLM transcripts can be long
TABLE_METRICS = ("hit@1", "hit@5", "hit@10", "recall@20", "recall@100", "mrr", "map", "ndcg@10")

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; vertical-align: top; }
th:first-child, td:first-child, td.text { text-align: left; }
img { max-width: 100%; }
.query { border-top: 2px solid #888; margin-top: 1.5em; }
.query-text { font-size: 1.1em; background: #f4f4f4; padding: 0.5em; white-space: pre-wrap; }
.methods { display: flex; flex-wrap: wrap; gap: 1em; }
.method { flex: 1 1 320px; border: 1px solid #ddd; padding: 0 0.8em 0.5em; }
ol { padding-left: 2em; }
li.answer { background: #d9f2d9; font-weight: bold; }
td.hit { background: #d9f2d9; } td.miss { background: #f8dada; }
.error { color: #a00; }
pre { background: #f8f8f8; padding: 0.5em; overflow-x: auto; font-size: 12px; white-space: pre-wrap; }
.muted { color: #777; }
"""


def write_html(conn: psycopg.Connection, skb_id: int, skb_name: str, split: str, outcomes: list[RunOutcome],
               bodies: dict[int, str], chart: Path, path: Path) -> Path:
    """Write the page to `path`; `bodies` gives each query's text (a query file's queries are not stored)."""
    details = {o.run_id: {row[0]: row for row in sql().run_query_details(conn, skb_id=skb_id, run_id=o.run_id, top=TOP)}
               for o in outcomes}
    query_ids = sorted({qid for rows in details.values() for qid in rows})
    shown = query_ids[:MAX_QUERIES]
    node_ids = {n for rows in details.values() for qid in shown if qid in rows
                for n in (*rows[qid][1], *rows[qid][2])}
    nodes = {row[0]: (row[1], row[2]) for row in sql().describe_nodes(conn, skb_id=skb_id, node_ids=sorted(node_ids))}
    title = f"Evaluation of {skb_name} ({split})"
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{escape(title)}</title>\n"
             f"<style>{STYLE}</style>\n</head>\n<body>\n<h1>{escape(title)}</h1>\n",
             f"<p>{len(query_ids)} queries. Figures measured by stark-pg on this SKB; every query's row is in "
             f"<code>stark.eval_result</code> under the run ids below.</p>\n",
             _metrics_table(outcomes)]
    if chart.is_file():
        encoded = base64.b64encode(chart.read_bytes()).decode("ascii")
        parts.append(f'<img alt="metrics and latency" src="data:image/png;base64,{encoded}">\n')
    parts.append(_overview(outcomes, details, shown, bodies))
    if len(shown) < len(query_ids):
        parts.append(f'<p class="muted">The first {len(shown)} of {len(query_ids)} queries (by id) are shown below; '
                     "the rest are in stark.eval_result.</p>\n")
    parts += [_query_section(qid, bodies.get(qid, ""), outcomes, details, nodes) for qid in shown]
    parts.append("</body>\n</html>\n")
    path.write_text("".join(parts), encoding="utf-8")
    return path


def _metrics_table(outcomes: list[RunOutcome]) -> str:
    names = [m for m in TABLE_METRICS if outcomes and m in outcomes[0].summary["metrics"]]
    rows = ["<table class=\"metrics\">\n<tr><th>method</th><th>run</th>"
            + "".join(f"<th>{escape(m)}</th>" for m in names) + "<th>p50 ms</th><th>p95 ms</th><th>failed</th></tr>\n"]
    for o in outcomes:
        s = o.summary
        rows.append(f"<tr><td>{escape(o.method)}</td><td>{o.run_id}</td>"
                    + "".join(f"<td>{s['metrics'][m]:.3f}</td>" for m in names)
                    + f"<td>{s['latency_ms']['p50']:.1f}</td><td>{s['latency_ms']['p95']:.1f}</td>"
                    f"<td>{s['failed']}</td></tr>\n")
    rows.append("</table>\n")
    rows.append(f'<p class="muted">Latency (p50, p95 ms) is {escape(LATENCY_NOTE)}.</p>\n')
    return "".join(rows)


def _first_rank(row) -> int | None:
    ranks = [r for r in (row[3] if row else []) if r]
    return min(ranks) if ranks else None


def _overview(outcomes, details, shown, bodies) -> str:
    """Where each method ranked each query's first answer: the queries to look at jump out."""
    rows = ["<h2>Queries</h2>\n<p>Rank of the first answer per method (– : not ranked); the query's id leads to "
            "its rankings.</p>\n<table class=\"overview\">\n<tr><th>query</th><th>text</th>"
            + "".join(f"<th>{escape(o.method)}</th>" for o in outcomes) + "</tr>\n"]
    for qid in shown:
        cells = []
        for o in outcomes:
            rank = _first_rank(details[o.run_id].get(qid))
            cells.append(f'<td class="{"hit" if rank == 1 else "miss" if rank is None else ""}">{rank or "–"}</td>')
        text = bodies.get(qid, "")
        short = text if len(text) <= 140 else text[:140] + "…"
        rows.append(f'<tr><td><a href="#q-{qid}">{qid}</a></td><td class="text">{escape(short)}</td>'
                    + "".join(cells) + "</tr>\n")
    rows.append("</table>\n")
    return "".join(rows)


def _node(node_id: int, nodes: dict) -> str:
    kind, name = nodes.get(node_id, ("?", "?"))
    return f"{escape(name)} <span class=\"muted\">({escape(kind)}, {node_id})</span>"


def _query_section(qid: int, body: str, outcomes, details, nodes) -> str:
    answers = next((list(details[o.run_id][qid][2]) for o in outcomes if qid in details[o.run_id]), [])
    parts = [f'<section class="query" id="q-{qid}">\n<h3>Query {qid}</h3>\n'
             f'<p class="query-text">{escape(body)}</p>\n<h4>Answers ({len(answers)})</h4>\n<ul class="answers">\n']
    for i, answer in enumerate(answers):
        ranks = []
        for o in outcomes:
            row = details[o.run_id].get(qid)
            rank = row[3][i] if row and i < len(row[3]) else 0
            ranks.append(f"{escape(o.method)}: {rank or '–'}")
        parts.append(f'<li data-node="{answer}">{_node(answer, nodes)} — rank {", ".join(ranks)}</li>\n')
    parts.append('</ul>\n<div class="methods">\n')
    for o in outcomes:
        parts.append(_method_block(o, details[o.run_id].get(qid), set(answers), nodes))
    parts.append("</div>\n</section>\n")
    return "".join(parts)


def _method_block(outcome: RunOutcome, row, answers: set[int], nodes: dict) -> str:
    head = f'<div class="method" data-method="{escape(outcome.method)}">\n<h4>{escape(outcome.method)} ' \
           f'<span class="muted">(run {outcome.run_id})</span></h4>\n'
    if row is None:
        return head + '<p class="muted">not evaluated on this query</p>\n</div>\n'
    _qid, top_ids, _answers, _ranks, values, latency_ms, trace, error = row
    shown = ", ".join(f"{m} {values[m]:.3f}" for m in ("hit@1", "recall@20", "mrr") if m in values)
    parts = [head, f'<p class="muted">{escape(shown)}; {latency_ms:.1f} ms</p>\n']
    if error:
        parts.append(f'<p class="error">failed: {escape(error)}</p>\n')
    if top_ids:
        parts.append("<ol>\n")
        for node in top_ids:
            if node in answers:
                parts.append(f'<li class="answer" data-node="{node}">✓ {_node(node, nodes)}</li>\n')
            else:
                parts.append(f'<li data-node="{node}">{_node(node, nodes)}</li>\n')
        parts.append("</ol>\n")
    else:
        parts.append('<p class="muted">nothing ranked</p>\n')
    text = json.dumps(trace, indent=1, ensure_ascii=False, default=str)
    if len(text) > TRACE_CHARS:
        text = text[:TRACE_CHARS] + f"\n… ({len(text) - TRACE_CHARS} more characters in stark.eval_result.trace)"
    parts.append(f"<details><summary>trace</summary>\n<pre>{escape(text)}</pre>\n</details>\n</div>\n")
    return "".join(parts)
