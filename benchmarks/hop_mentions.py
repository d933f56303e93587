"""How often a question names a node near its answer: the evidence behind relation fields beyond one hop.

For each question of a split: does its text contain (case-insensitively; names of 4 characters or
more) the name of a node one hop from an answer, or only two hops away? And the same for a random
node of the answer's type that is not an answer (seeded), which says how much of that is chance: a
two-hop neighbourhood holds a sixth of the slice. A relation field (the neighbours' names, BM25 over
them) can only help where the first rate is well above the second.

    python benchmarks/hop_mentions.py stark-prime-ibd --split train
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict

from stark_pg.db import connect
from stark_pg.skb.catalog import require_skb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("skb")
    parser.add_argument("--split", default="train")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dsn", default=None, help="default: STARK_PG_DSN or the embedded server")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with connect(args.dsn) as conn:
        skb_id = require_skb(conn, args.skb)
        nodes = conn.execute("select node_id, type, lower(name) from stark.node where skb_id = %s", (skb_id,)).fetchall()
        name = {n: x for n, _, x in nodes if x and len(x) >= 4}
        of_type = defaultdict(list)
        type_of = {}
        for n, t, _ in nodes:
            of_type[t].append(n)
            type_of[n] = t
        adjacent = defaultdict(set)
        for src, dst in conn.execute("select src, dst from stark.edge where skb_id = %s", (skb_id,)):
            adjacent[src].add(dst)
            adjacent[dst].add(src)
        questions = conn.execute("select body, answer_ids from stark.query where skb_id = %s and split = %s "
                                 "order by query_id", (skb_id, args.split)).fetchall()
        counts = {"answer": [0, 0], "random node of its type": [0, 0]}
        sizes = []
        for body, answers in questions:
            text = body.lower()
            others = [n for n in of_type[type_of[answers[0]]] if n not in set(answers)]
            for label, node in (("answer", answers[0]), ("random node of its type", rng.choice(others))):
                one = adjacent[node]
                two = set().union(*(adjacent[m] for m in one)) - one - {node}
                if label == "answer":
                    sizes.append(len(two))
                named_one = any(m in name and name[m] in text for m in one)
                named_two = any(m in name and name[m] in text for m in two)
                counts[label][0] += named_one
                counts[label][1] += named_two and not named_one
        print(f"{args.skb}, {args.split}: {len(questions)} questions, {len(nodes):,} nodes; "
              f"an answer's two-hop neighbourhood: median {sorted(sizes)[len(sizes) // 2]} nodes")
        print("| node | question names a neighbour | names a node two hops away (and none one hop away) |")
        print("| --- | --- | --- |")
        for label, (one, two) in counts.items():
            print(f"| {label} | {one} ({one / len(questions):.1%}) | {two} ({two / len(questions):.1%}) |")


if __name__ == "__main__":
    main()
