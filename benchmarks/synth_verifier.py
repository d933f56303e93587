"""How far the synthesize verifier can be trusted: run on real training questions.

Run by hand (figures in docs/synthesize.md):
    python benchmarks/synth_verifier.py stark-prime-ibd --questions 20 [--llm openai:MODEL --base-url URL]

For a seeded sample of the SKB's `train` questions, the two verifiers of `stark-pg synthesize`
(stark_pg/synthesize/textual.py's `verify`, with the question itself as the one requirement) judge
one of the question's real answers and one random node of the same type that is no answer. The share
of real answers accepted is the verifier's recall on human-labelled ground truth; the share of random
nodes accepted is how often it lets a wrong node through. Every call goes through stark.llm_cache, so a
second run replays. Only `train` is read.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from stark_pg.db import connect
from stark_pg.eval.query_sets import from_split
from stark_pg.llm import client_from_options
from stark_pg.resources import queries as sql
from stark_pg.skb.catalog import require_skb
from stark_pg.synthesize.textual import accepted, verify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("skb")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--doc-chars", type=int, default=800)
    parser.add_argument("--llm")
    parser.add_argument("--base-url")
    parser.add_argument("--dsn")
    args = parser.parse_args()

    started = time.perf_counter()
    with connect(args.dsn) as conn:
        skb_id = require_skb(conn, args.skb)
        client = client_from_options(conn, llm=args.llm, base_url=args.base_url)
        questions = from_split(conn, skb_id, "train").queries
        rng = random.Random(args.seed)
        sample = rng.sample(questions, min(args.questions, len(questions)))
        types = dict(conn.execute("select node_id, type from stark.node where skb_id = %s", (skb_id,)).fetchall())
        by_type: dict[str, list[int]] = {}
        for node, kind in sorted(types.items()):
            by_type.setdefault(kind, []).append(node)
        real = wrong = 0
        rows = []
        with client.metered() as meter:
            for q in sample:
                answer = rng.choice(sorted(q.answer_ids))
                others = [n for n in by_type[types[answer]] if n not in set(q.answer_ids)]
                other = rng.choice(others)
                docs = {int(n): (t or "")[:args.doc_chars]
                        for n, t in sql().synth_documents(conn, skb_id=skb_id, node_ids=[answer, other])}
                v_real, _ = verify(client, types[answer], [q.body], docs[answer])
                v_other, _ = verify(client, types[answer], [q.body], docs[other])
                real += accepted(v_real, 1)
                wrong += accepted(v_other, 1)
                rows.append({"query_id": q.query_id, "answer": answer, "answer_accepted": accepted(v_real, 1),
                             "random": other, "random_accepted": accepted(v_other, 1)})
    n = len(sample)
    print(json.dumps({"skb": args.skb, "questions": n, "real_answers_accepted": real, "real_share": round(real / n, 3),
                      "random_nodes_accepted": wrong, "random_share": round(wrong / n, 3),
                      "llm": meter.as_dict(), "seconds": round(time.perf_counter() - started, 1), "rows": rows},
                     indent=1))


if __name__ == "__main__":
    main()
