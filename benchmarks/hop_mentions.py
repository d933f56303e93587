"""How often a question names a node near its answer: the evidence behind relation fields beyond one hop.

For each question of a split: does its text contain (case-insensitively; names of 4 characters or
more) the name of a node one hop from an answer, or only two hops away? And the same for a random
node of the answer's type that is not an answer (seeded), which says how much of that is chance: a
two-hop neighbourhood holds a sixth of the slice. A relation field (the neighbours' names, BM25 over
them) can only help where the first rate is well above the second.

With --typed, the same question for paths of a known shape: for each question, the shapes (relation,
middle node's type, relation, named node's type; or relation, named node's type for one hop) by which
the first answers of its 10 nearest other training questions (by stored MiniLM question vectors;
questions with the same text left out) reach a node their own question names. Does the answer reach a
node this question names by one of those shapes, and does a random node of its type? That is the
ceiling of a "typed path" feature learned from neighbouring questions, before building it.

    python benchmarks/hop_mentions.py stark-prime-ibd --split train
    python benchmarks/hop_mentions.py stark-prime-ibd --split train --typed
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
    parser.add_argument("--typed", action="store_true", help="also the typed-path shapes of the nearest questions")
    parser.add_argument("--neighbours", type=int, default=10, help="with --typed: nearest training questions")
    parser.add_argument("--dsn", default=None, help="default: STARK_PG_DSN or the embedded server")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with connect(args.dsn) as conn:
        skb_id = require_skb(conn, args.skb)
        nodes = conn.execute("select node_id, type, lower(name) from stark.node where skb_id = %s order by node_id", (skb_id,)).fetchall()
        name = {n: x for n, _, x in nodes if x and len(x) >= 4}
        of_type = defaultdict(list)
        type_of = {}
        for n, t, _ in nodes:
            of_type[t].append(n)
            type_of[n] = t
        typed_adjacent = defaultdict(set)          # node -> {(neighbour, relation)}, either direction
        for src, relation, dst in conn.execute("select src, relation, dst from stark.edge where skb_id = %s",
                                               (skb_id,)):
            typed_adjacent[src].add((dst, relation))
            typed_adjacent[dst].add((src, relation))
        adjacent = defaultdict(set, {n: {m for m, _ in pairs} for n, pairs in typed_adjacent.items()})
        questions = conn.execute("select body, answer_ids from stark.query where skb_id = %s and split = %s "
                                 "order by query_id", (skb_id, args.split)).fetchall()
        counts = {"answer": [0, 0], "random node of its type": [0, 0]}
        sizes = []
        for body, answers in questions:
            named = named_in(body.lower(), name)
            others = [n for n in of_type[type_of[answers[0]]] if n not in set(answers)]
            for label, node in (("answer", answers[0]), ("random node of its type", rng.choice(others))):
                one = adjacent[node]
                two = set().union(*(adjacent[m] for m in one)) - one - {node}
                if label == "answer":
                    sizes.append(len(two))
                named_one = bool(one & named)
                named_two = bool(two & named)
                counts[label][0] += named_one
                counts[label][1] += named_two and not named_one
        print(f"{args.skb}, {args.split}: {len(questions)} questions, {len(nodes):,} nodes; "
              f"an answer's two-hop neighbourhood: median {sorted(sizes)[len(sizes) // 2]} nodes")
        print("| node | question names a neighbour | names a node two hops away (and none one hop away) |")
        print("| --- | --- | --- |")
        for label, (one, two) in counts.items():
            print(f"| {label} | {one} ({one / len(questions):.1%}) | {two} ({two / len(questions):.1%}) |")
        if args.typed:
            typed_paths(conn, skb_id, args, name, type_of, of_type, typed_adjacent)


def named_in(text: str, name: dict) -> set:
    """The nodes whose name (4 characters or more) the lower-cased text contains."""
    return {n for n, x in name.items() if x in text}


def shapes(node: int, targets: set, typed_adjacent: dict, type_of: dict) -> set:
    """The shapes of the paths of one or two edges from `node` to a node of `targets`:
    (relation, target type) and (relation, middle type, relation, target type)."""
    found = set()
    for mid, r1 in typed_adjacent[node]:
        if mid in targets:
            found.add((r1, type_of[mid]))
        for end, r2 in typed_adjacent[mid]:
            if end in targets and end != node:
                found.add((r1, type_of[mid], r2, type_of[end]))
    return found


def typed_paths(conn, skb_id: int, args, name: dict, type_of: dict, of_type: dict, typed_adjacent: dict) -> None:
    import numpy as np
    from pgvector.psycopg import register_vector

    from stark_pg.embed import canonical_name

    register_vector(conn)
    rng = random.Random(args.seed)
    pool = conn.execute(
        "select q.query_id, q.body, q.answer_ids, v.vec from stark.query q join stark.query_vector v "
        "on v.skb_id = q.skb_id and v.query_id = q.query_id and v.model = %s "
        "where q.skb_id = %s and q.split = 'train' order by q.query_id", (canonical_name(None), skb_id)).fetchall()
    vectors = np.array([r[3].to_numpy().astype(np.float32) for r in pool])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    own = [shapes(r[2][0], named_in(r[1].lower(), name), typed_adjacent, type_of) for r in pool]
    questions = conn.execute("select query_id, body, answer_ids from stark.query where skb_id = %s and split = %s "
                             "order by query_id", (skb_id, args.split)).fetchall()
    index = {r[0]: i for i, r in enumerate(pool)}
    hits = {"answer": [0, 0], "random node of its type": [0, 0]}
    with_shapes = 0
    for query_id, body, answers in questions:
        if query_id not in index:
            continue
        i = index[query_id]
        order = np.argsort(-(vectors @ vectors[i]))
        near = [j for j in order if j != i and pool[j][1] != body][: args.neighbours]
        learned = set().union(*(own[j] for j in near))
        with_shapes += bool(learned)
        named = named_in(body.lower(), name)
        others = [n for n in of_type[type_of[answers[0]]] if n not in set(answers)]
        for label, node in (("answer", answers[0]), ("random node of its type", rng.choice(others))):
            found = shapes(node, named, typed_adjacent, type_of) & learned
            hits[label][0] += any(len(f) == 2 for f in found)
            hits[label][1] += bool(found)
    n = len(questions)
    print(f"typed paths: {with_shapes} of {n} questions have a shape from their {args.neighbours} nearest questions")
    print("| node | reaches a named node by a learned one-edge shape | by a learned shape of one or two edges |")
    print("| --- | --- | --- |")
    for label, (one, any_) in hits.items():
        print(f"| {label} | {one} ({one / n:.1%}) | {any_} ({any_ / n:.1%}) |")


if __name__ == "__main__":
    main()
