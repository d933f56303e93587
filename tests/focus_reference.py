"""Plain-Python reference of 4StepFocus's Algorithms 2 (substitution) and 3 (preparing triplets),
written the way the paper states them (sets, loops over triplets), independent of the SQL.

The tests run both on the same graphs and triplets and require identical candidate sets.
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict


class Graph:
    """Nodes {id: (type, name)} and typed directed edges, with adjacency in both directions."""

    def __init__(self, nodes: dict[int, tuple[str, str | None]], edges):
        self.nodes = nodes
        self.out = defaultdict(list)      # src -> [(relation, dst)]
        self.inc = defaultdict(list)      # dst -> [(relation, src)]
        for src, relation, dst in edges:
            self.out[src].append((relation, dst))
            self.inc[dst].append((relation, src))

    def of_type(self, node_type: str | None) -> set[int]:
        return {n for n, (t, _) in self.nodes.items() if node_type is None or t == node_type}

    def neighbours(self, node: int, relation: str | None, direction: str) -> set[int]:
        """Nodes joined to `node` by `relation` (None: any): 'out' (node is the head), 'in' (node is the
        tail), 'both'."""
        found = set()
        if direction in ("out", "both"):
            found |= {d for r, d in self.out.get(node, ()) if relation is None or r == relation}
        if direction in ("in", "both"):
            found |= {s for r, s in self.inc.get(node, ()) if relation is None or r == relation}
        return found


def substitute(graph: Graph, variables: dict[str, str | None], triplets: list[dict], *,
               respect_relations: bool = False, directed: bool = False) -> dict[str, set[int]]:
    """Algorithm 2: start every variable at the nodes of its type; repeat over all triplets, narrowing
    a variable next to a constant to the constant's neighbours and each variable of a variable pair
    to the neighbours of the other's candidates, until a pass changes no set's size."""
    candidates = {v: graph.of_type(t) for v, t in variables.items()}

    def neighbours_of(nodes, relation, direction):
        found = set()
        for n in nodes:
            found |= graph.neighbours(n, relation, direction)
        return found

    sizes = None
    while True:
        for t in triplets:
            head, tail = t["head"], t["tail"]
            relation = t.get("relation") if respect_relations else None
            head_var, tail_var = isinstance(head, str), isinstance(tail, str)
            if not head_var and not tail_var:
                continue
            # the tail's candidates are reached from the head along the edge (or either way)
            forward, backward = ("out", "in") if directed else ("both", "both")
            if head_var and not tail_var:
                candidates[head] &= neighbours_of(tail, relation, backward)
            elif tail_var and not head_var:
                candidates[tail] &= neighbours_of(head, relation, forward)
            else:
                candidates[tail] &= neighbours_of(candidates[head], relation, forward)
                candidates[head] &= neighbours_of(candidates[tail], relation, backward)
        new_sizes = {v: len(c) for v, c in candidates.items()}
        if new_sizes == sizes:
            return candidates
        sizes = new_sizes


# ---------------------------------------------------------------------------------------------
# Algorithm 3: link each constant to nodes, drop what cannot be used.

def normalize(name: str) -> str:
    return re.sub(r"[\W_]+", " ", name.lower()).strip()


def link(graph: Graph, constant: str, node_type: str | None, *, ratio: float) -> tuple[int, ...]:
    """Nodes whose normalised name equals the constant's (of its type when it has any such, else of
    any type); failing that, the one node whose name is most similar by difflib's ratio, if at least
    `ratio` (of the constant's type first). Nothing: the constant is not linked."""
    target = normalize(constant)
    exact = [n for n, (_, name) in graph.nodes.items() if name is not None and normalize(name) == target]
    typed = [n for n in exact if graph.nodes[n][0] == node_type]
    if typed or exact:
        return tuple(sorted(typed or exact))
    scored = []
    for n, (t, name) in graph.nodes.items():
        if name is None:
            continue
        r = difflib.SequenceMatcher(None, target, normalize(name)).ratio()
        if r >= ratio:
            scored.append((t == node_type, r, -n))
    if not scored:
        return ()
    best = max(scored)
    return (-best[2],)


def prepare(graph: Graph, raw: list[dict], target: str, node_types: set[str], relations: set[str], *,
            ratio: float) -> tuple[dict[str, str | None], list[dict]]:
    """Triplets as {head, head_type, relation, tail, tail_type}, variables written '?name'. Unknown
    types and relations become None; constants are linked; a triplet with an unlinked constant is
    dropped, one between two constants skipped; triplets not connected to the target are left out
    (they cannot change its candidates). Returns the variables with their types and the triplets."""
    variables: dict[str, str | None] = {}
    kept = []
    for t in raw:
        ends = []
        for end, end_type in ((t["head"], t.get("head_type")), (t["tail"], t.get("tail_type"))):
            end_type = end_type if end_type in node_types else None
            if end.startswith("?"):
                name = end[1:]
                if variables.get(name) is None:
                    variables[name] = end_type
                ends.append(name)
            else:
                ends.append(link(graph, end, end_type, ratio=ratio))
        if any(isinstance(e, tuple) and not e for e in ends):
            continue
        if all(isinstance(e, tuple) for e in ends):
            continue
        relation = t.get("relation") if t.get("relation") in relations else None
        kept.append({"head": ends[0], "relation": relation, "tail": ends[1]})
    variables.setdefault(target, None)
    # the target's component of the variable graph
    reach, changed = {target}, True
    while changed:
        changed = False
        for t in kept:
            vs = {e for e in (t["head"], t["tail"]) if isinstance(e, str)}
            if vs & reach and not vs <= reach:
                reach |= vs
                changed = True
    kept = [t for t in kept if {e for e in (t["head"], t["tail"]) if isinstance(e, str)} <= reach]
    return {v: variables[v] for v in reach}, kept
