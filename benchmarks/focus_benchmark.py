"""Latency of 4StepFocus's substitution SQL (stark.focus_substitute) over many generated triplet sets.

Triplet sets are shaped like an LLM's for a STaRK question: a walk of 1-4 hops from a random answer
node, each hop either a named entity (a constant: the real neighbour) or a new unknown of the
neighbour's type; now and then a second constant on the answer. Each set runs with relations
ignored (the paper's setting) and respected. Prints p50 / p95 / max milliseconds (client wall time
of the statement), rounds and target-set sizes.

    python benchmarks/focus_benchmark.py stark-prime-ibd
    stark-pg load synthetic --nodes 130000 --edges-per-node 62
    stark-pg index synthetic-130000 --no-lexical --no-dense      # the graph's typed-link summary alone
    python benchmarks/focus_benchmark.py synthetic-130000

--compare FUNCTION times another SQL function with stark.focus_substitute's signature (an older version
installed under another name) on the same sets in the same session, alternating which of the two runs
first, and counts the sets where the two disagree (there should be none: only plans differ between
versions). --previous REV does the installing: it takes sql/functions/focus.sql as of the git revision
REV, creates its substitution functions as temporary ones (pg_temp.prev_*, gone with the session) and
compares against them:

    python benchmarks/focus_benchmark.py synthetic-130000 --previous b4adf77

--max-cost LIST times stark.focus_substitute's bound on one revision's estimated index reads (its
`max_cost`; 'none': no bound, the exact sets) on the same sets in turns, and counts the sets each value
cut (with 'none' among them, also whether the bounded sets are the exact ones or supersets of them):

    python benchmarks/focus_benchmark.py synthetic-100000 --max-cost none,200000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
from psycopg import sql as pgsql

from stark_pg.db import connect
from stark_pg.retrieve.focus.substitute import Problem, Triplet, substitute
from stark_pg.skb.catalog import require_skb


def neighbours(conn, skb_id: int, node: int) -> list[tuple[str, int, str]]:
    return conn.execute("select e.relation, e.dst, n.type from stark.edge e "
                        "join stark.node n on n.skb_id = e.skb_id and n.node_id = e.dst "
                        "where e.skb_id = %s and e.src = %s", (skb_id, node)).fetchall()


def generate(conn, skb_id: int, start: int, start_type: str, rng: random.Random) -> Problem:
    variables = {"x1": start_type}
    triplets: list[Triplet] = []
    current, var = start, "x1"
    for _ in range(rng.randint(1, 4)):
        hops = neighbours(conn, skb_id, current)
        if not hops:
            break
        relation, other, other_type = rng.choice(hops)
        if rng.random() < 0.5 or len(variables) >= 3:
            triplets.append(Triplet(var, relation, (other,)))
            if rng.random() < 0.3:                       # a second constant on the answer
                relation2, other2, _ = rng.choice(neighbours(conn, skb_id, start))
                triplets.append(Triplet("x1", relation2, (other2,)))
            break
        name = f"x{len(variables) + 1}"
        variables[name] = other_type
        triplets.append(Triplet(var, relation, name))
        var, current = name, other
    if not any(not isinstance(t.tail, str) for t in triplets):   # every LLM set names at least one entity
        hops = neighbours(conn, skb_id, current)
        if hops:
            relation, other, _ = rng.choice(hops)
            triplets.append(Triplet(var, relation, (other,)))
    return Problem(variables, tuple(triplets))


SUBSTITUTION_FUNCTIONS = ("focus_substitute", "focus_revise_sql", "focus_probe_sql", "focus_revise", "focus_linked",
                          "focus_complement", "focus_gather_sql", "focus_edge_ends_sql",
                          "focus_domain_source")


def install_previous(conn, revision: str) -> str:
    """sql/functions/focus.sql of a git revision, its substitution functions created as temporary ones
    (pg_temp.prev_<name>, calling each other); returns the name of its stark.focus_substitute."""
    text = subprocess.run(["git", "show", f"{revision}:sql/functions/focus.sql"], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parent).stdout
    start = text.index("create or replace function stark.focus_domain_source")
    body = re.sub(r"(?m)^(drop function|comment on function)[^;]*;", "", text[start:])
    for name in SUBSTITUTION_FUNCTIONS:
        body = re.sub(rf"\bstark\.{name}\b", f"pg_temp.prev_{name}", body)
        body = re.sub(rf"\b{name}\.(relation|other_type)\b", rf"prev_{name}.\1", body)
    conn.execute(body)
    return "pg_temp.prev_focus_substitute"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("skb")
    parser.add_argument("--count", type=int, default=200, help="triplet sets (each run twice)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--directed", action="store_true", help="edges head -> tail only (the same sets when "
                                                                    "every edge is stored both ways, as in PrimeKG)")
    parser.add_argument("--show-slowest", type=int, default=0, help="print the slowest sets' problems")
    parser.add_argument("--compare", default=None, metavar="FUNCTION",
                        help="also time this function (schema-qualified, focus_substitute's signature) on the "
                             "same sets, alternating with stark.focus_substitute")
    parser.add_argument("--previous", default=None, metavar="REV",
                        help="compare with focus.sql as of this git revision (installed as temporary functions)")
    parser.add_argument("--max-cost", default=None, metavar="LIST",
                        help="time stark.focus_substitute with each of these max_cost values on the same sets, in "
                             "turns (comma-separated; 'none' for no bound), instead of its default alone")
    parser.add_argument("--dsn", default=None, help="default: STARK_PG_DSN or the embedded server")
    args = parser.parse_args()
    if args.max_cost:
        return compare_costs(args)
    rng = random.Random(args.seed)
    with connect(args.dsn) as conn:
        skb_id = require_skb(conn, args.skb)
        nodes, edges = conn.execute("select (select count(*) from stark.node where skb_id = %s), "
                                    "(select count(*) from stark.edge where skb_id = %s)", (skb_id, skb_id)).fetchone()
        problems = sample_problems(conn, skb_id, args.count, rng)
        substitute(conn, args.skb, problems[0])                         # warm caches and plans
        other = None
        if args.previous:
            args.compare = install_previous(conn, args.previous)
        if args.compare:
            other = pgsql.SQL("select variable, size, node_ids, rounds from {}(%s, %s::jsonb, "
                              "respect_relations => %s, directed => %s)").format(
                pgsql.Identifier(*args.compare.split(".")))
            conn.execute(other, (args.skb, json.dumps(problems[0].as_json()), False, False)).fetchall()
        print(f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (1 / 5 / 15 min) at the start")
        summary = conn.execute("select count(*) from stark.edge_type_link where skb_id = %s", (skb_id,)).fetchone()[0]
        print(f"typed-link summary: {f'{summary} rows' if summary else 'none (stark-pg index builds it)'}")
        print(f"{args.skb}: {nodes:,} nodes, {edges:,} edges; {len(problems)} triplet sets, "
              f"edges {'head -> tail' if args.directed else 'either way'} "
              f"({statistics.mean(len(p.triplets) for p in problems):.1f} triplets, "
              f"{statistics.mean(len(p.variables) for p in problems):.1f} variables on average)")
        for respect in (False, True):
            times, rounds, sizes, other_times, differ = [], [], [], [], 0
            for n, p in enumerate(problems):
                if other is not None and n % 2 == 1:              # every other set, the other function first
                    started = time.perf_counter()
                    theirs = conn.execute(other, (args.skb, json.dumps(p.as_json()), respect, args.directed)).fetchall()
                    other_times.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                result = substitute(conn, args.skb, p, respect_relations=respect, directed=args.directed)
                times.append((time.perf_counter() - started) * 1000)
                rounds.append(result.rounds)
                sizes.append(result.sets["x1"].size)
                if other is not None and n % 2 == 0:
                    started = time.perf_counter()
                    theirs = conn.execute(other, (args.skb, json.dumps(p.as_json()), respect, args.directed)).fetchall()
                    other_times.append((time.perf_counter() - started) * 1000)
                if other is not None:
                    ours = {v: (s.size, s.node_ids) for v, s in result.sets.items()}
                    differ += ours != {v: (size, ids) for v, size, ids, _ in theirs}
            t = np.array(times)
            for i in np.argsort(-t)[:args.show_slowest]:
                print(f"    {t[i]:.1f} ms, rounds {rounds[i]}, target {sizes[i]}: {json.dumps(problems[i].as_json())}")
            print(f"  relations {'respected' if respect else 'ignored '}: p50 {np.percentile(t, 50):7.2f} ms  "
                  f"p95 {np.percentile(t, 95):7.2f} ms  max {t.max():8.2f} ms  | rounds mean {np.mean(rounds):.1f} "
                  f"max {max(rounds)} | target set median {int(np.median(sizes))}, p95 {int(np.percentile(sizes, 95))}")
            if other is not None:
                o = np.array(other_times)
                print(f"    {args.compare}: p50 {np.percentile(o, 50):7.2f} ms  p95 {np.percentile(o, 95):7.2f} ms  "
                      f"max {o.max():8.2f} ms  | sets that differ: {differ}")
        print(f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (1 / 5 / 15 min) at the end")


def sample_problems(conn, skb_id: int, count: int, rng: random.Random) -> list:
    """`count` substitution problems from random start nodes, the same ones on every run with --seed."""
    conn.execute("select setseed(%s)", (rng.uniform(-1, 1),))
    starts = conn.execute("select node_id, type from stark.node where skb_id = %s order by random() limit %s",
                          (skb_id, count * 2)).fetchall()
    problems = []
    for node, node_type in starts:
        p = generate(conn, skb_id, node, node_type, rng)
        if p.triplets:
            problems.append(p)
        if len(problems) == count:
            break
    return problems


def compare_costs(args) -> None:
    """Each set with each max_cost in turns (the order shuffled per set): p50 / p95 / max, how many sets a
    bound cut, and whether every cut set is a superset of the unbounded one (it must be)."""
    rng = random.Random(args.seed)
    costs = [None if c.strip().lower() == "none" else float(c) for c in args.max_cost.split(",")]
    with connect(args.dsn) as conn:
        skb_id = require_skb(conn, args.skb)
        problems = sample_problems(conn, skb_id, args.count, rng)
        for cost in costs:                                           # warm caches and plans
            substitute(conn, args.skb, problems[0], max_cost=cost)
        print(f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (1 / 5 / 15 min) at the start")
        for respect in (False, True):
            times = {c: [] for c in costs}
            cut = {c: 0 for c in costs}
            results: dict = {c: [] for c in costs}
            for p in problems:
                order = list(costs)
                rng.shuffle(order)
                for cost in order:
                    started = time.perf_counter()
                    result = substitute(conn, args.skb, p, respect_relations=respect, directed=args.directed,
                                        max_cost=cost)
                    times[cost].append((time.perf_counter() - started) * 1000)
                    cut[cost] += result.cut > 0
                    results[cost].append(result)
            exact = results[None] if None in costs else None
            for cost in costs:
                t = np.array(times[cost])
                line = (f"  relations {'respected' if respect else 'ignored '}, max_cost {cost if cost is None else int(cost)}: "
                        f"p50 {np.percentile(t, 50):7.2f} ms  p95 {np.percentile(t, 95):7.2f} ms  max {t.max():8.2f} ms"
                        f"  | sets cut {cut[cost]} of {len(problems)}")
                if exact is not None and cost is not None:
                    same = sum({v: s.node_ids for v, s in r.sets.items()} == {v: s.node_ids for v, s in e.sets.items()}
                               for r, e in zip(results[cost], exact))
                    superset = all(all(s.unconstrained or (e.sets[v].node_ids is not None
                                                           and set(e.sets[v].node_ids) <= set(s.node_ids))
                                       for v, s in r.sets.items())
                                   for r, e in zip(results[cost], exact))
                    line += f", same sets as unbounded {same}, supersets {superset}"
                print(line)
            for cost in costs:
                t = np.array(times[cost])
                for i in np.argsort(-t)[:args.show_slowest]:
                    print(f"    max_cost {cost}: {t[i]:.1f} ms, cut {results[cost][i].cut}: "
                          f"{json.dumps(problems[i].as_json())}")
        print(f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (1 / 5 / 15 min) at the end")


if __name__ == "__main__":
    main()
