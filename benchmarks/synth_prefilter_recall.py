"""How many answers `stark-pg synthesize --prefilter N` loses: its recall against verifying every candidate.

Run by hand (figures in docs/synthesize.md):
    python benchmarks/synth_prefilter_recall.py stark-prime-ibd [--split synthetic] [--keep 2,3,4,5] [--json]

The sample is every LLM item of the split that was kept with each of its candidates verified (no
prefilter). For each N, on the items with more than N candidates: the answers other than the gold that
the prefilter's shortlist (stark_pg/synthesize/prefilter.py, the N-1 candidates nearest the
requirements) keeps, over all such answers (recall), and the verifications it saves. No LLM is called:
the verdicts are the stored ones.
"""

from __future__ import annotations

import argparse
import json

from stark_pg.db import connect
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb
from stark_pg.synthesize.pipeline import _clip
from stark_pg.synthesize.prefilter import shortlist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("skb")
    parser.add_argument("--split", default="synthetic")
    parser.add_argument("--keep", default="2,3,4,5", help="values of N")
    parser.add_argument("--doc-chars", type=int, default=800, help="as the split was made with")
    parser.add_argument("--dsn")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    with connect(args.dsn) as conn:
        skb_id = require_skb(conn, args.skb)
        items = list(sql().synth_fully_verified(conn, skb_id=skb_id, split=args.split))
        nodes = sorted({int(c) for _, _, candidates, _, _ in items for c in candidates})
        documents = {int(n): _clip(text or "", args.doc_chars)
                     for n, text in sql().synth_documents(conn, skb_id=skb_id, node_ids=nodes)}
    rows = []
    for keep in (int(k) for k in args.keep.split(",")):
        large = [i for i in items if len(i[2]) > keep]
        found = kept = asked = saved = 0
        for _, gold, candidates, answers, requirements in large:
            others = [int(c) for c in candidates if c != gold]
            short = set(shortlist(list(requirements), documents, others, keep - 1))
            wanted = [int(a) for a in answers if a != gold]
            found += len(wanted)
            kept += sum(a in short for a in wanted)
            asked += len(short)
            saved += len(others) - len(short)
        rows.append({"keep": keep, "items": len(large), "answers_beside_gold": found, "kept": kept,
                     "recall": round(kept / found, 3) if found else None,
                     "verifications_asked": asked, "verifications_saved": saved})
    report = {"skb": args.skb, "split": args.split, "fully_verified_items": len(items), "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.skb} split {args.split}: {len(items)} items verified in full")
    print(f"{'N':>3} {'items':>6} {'answers':>8} {'kept':>5} {'recall':>7} {'asked':>6} {'saved':>6}")
    for r in rows:
        recall = "-" if r["recall"] is None else f"{r['recall']:.3f}"
        print(f"{r['keep']:>3} {r['items']:>6} {r['answers_beside_gold']:>8} {r['kept']:>5} {recall:>7} "
              f"{r['verifications_asked']:>6} {r['verifications_saved']:>6}")


if __name__ == "__main__":
    main()
