"""A synthesized split written in STaRK's own QA layout, with its provenance.

`stark_qa.csv` (`id,query,answer_ids`), `split/NAME.index` (the split's query ids) and `NAME.jsonl`
(one line per question: how it was made). `stark-pg load DIR --skb SKB` reads the first two back as
the split, so a split made once (hours of LLM time, for questions with textual requirements) can be
shipped and trained on without making it again.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import psycopg

from stark_pg.resources import queries as sql

PROVENANCE = ("seq", "template", "hops", "anchors", "anchor_names", "candidates", "mode", "gold", "requirements",
              "verdicts", "model", "prompt_version", "calls", "seconds")


def export_split(conn: psycopg.Connection, skb_name: str, split: str, out: Path) -> dict:
    from stark_pg.skb.catalog import require_skb

    skb_id = require_skb(conn, skb_name)
    rows = list(sql().synth_questions(conn, skb_id=skb_id, split=split))
    if not rows:
        raise ValueError(f"SKB {skb_name!r} has no synthesized split {split!r} (`stark-pg synthesize {skb_name} "
                         f"--split {split}` makes one)")
    out = Path(out)
    (out / "split").mkdir(parents=True, exist_ok=True)
    with open(out / "stark_qa.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "query", "answer_ids"])
        for row in rows:
            writer.writerow([row[0], row[1], json.dumps(list(row[2]))])
    (out / "split" / f"{split}.index").write_text("".join(f"{row[0]}\n" for row in rows), encoding="utf-8")
    with open(out / f"{split}.jsonl", "w", encoding="utf-8") as handle:
        for row in rows:
            record = {"id": row[0], "query": row[1], "answer_ids": list(row[2])} | dict(zip(PROVENANCE, row[3:]))
            handle.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
    return {"skb": skb_name, "split": split, "questions": len(rows), "out": str(out),
            "files": ["stark_qa.csv", f"split/{split}.index", f"{split}.jsonl"]}
