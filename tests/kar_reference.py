"""A plain-Python breadth-first reference of `stark.kar_neighbours` (sql/functions/kar.sql), written
from the function's documented rules, for the comparison tests:

- from each anchor, hop by hop: the nodes one edge away from the previous hop's kept nodes that this
  anchor has not reached before (the anchor and every node discovered at an earlier hop, kept or not);
- a node reached from several kept nodes takes its path through the smallest predecessor id, then
  the alphabetically first relation;
- similarity is the cosine of the node's vector to the query (None without either);
- per anchor and hop, only the `cap` best (similarity descending, None last, then node id) are kept
  and expanded;
- per anchor, the `k` best over all hops (similarity descending, None last, then hop, then node id).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def adjacency(edges, directed: bool) -> dict[int, list[tuple[int, str]]]:
    """node -> [(neighbour, relation)] for edges (src, relation, dst)."""
    out: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for src, relation, dst in edges:
        out[src].append((dst, relation))
        if not directed:
            out[dst].append((src, relation))
    return out


def _sort_key(similarity):
    return (0, -similarity) if similarity is not None else (1, 0.0)


def cosines(vectors: dict[int, np.ndarray], query: np.ndarray | None) -> dict[int, float]:
    """node -> cosine similarity of its vector to the query (empty without a query)."""
    if query is None:
        return {}
    q = np.asarray(query, dtype=np.float64)
    return {n: float(np.dot(v, q) / (np.linalg.norm(v) * np.linalg.norm(q))) for n, v in vectors.items()}


def hop_frontiers(adj, similarities: dict[int, float], anchor: int, hops: int, cap: int | None) -> list[list[tuple]]:
    """Per hop from `anchor`, every node first reached there (before the cap) as (node, relations,
    path, similarity), sorted the cap's way; the next hop expands the first `cap` of them."""
    seen = {anchor}
    frontier = [(anchor, (), ())]                     # (node, relations, path)
    out = []
    for _hop in range(1, hops + 1):
        best: dict[int, tuple] = {}
        for node, relations, path in frontier:
            for other, relation in adj.get(node, ()):
                if other in seen:
                    continue
                key = (node, relation)
                if other not in best or key < best[other][0]:
                    best[other] = (key, relations + (relation,), path + (other,))
        seen |= set(best)
        scored = sorted(((other, rel, path, similarities.get(other)) for other, (_, rel, path) in best.items()),
                        key=lambda r: (*_sort_key(r[3]), r[0]))
        out.append(scored)
        frontier = [(other, rel, path) for other, rel, path, _ in (scored if cap is None else scored[:cap])]
        if not frontier:
            break
    return out


def kar_neighbours(edges, similarities: dict[int, float], anchors, hops: int, k: int | None, cap: int | None,
                   directed: bool = False) -> list[tuple]:
    """Rows (anchor, hop, relations, path, neighbour, similarity, rank), ordered by anchor and rank.
    `similarities` maps a node to its similarity to the query (a node missing has none)."""
    adj = adjacency(edges, directed)
    rows = []
    for anchor in sorted({a for a in anchors if a is not None}):
        found = []
        for hop, scored in enumerate(hop_frontiers(adj, similarities, anchor, hops, cap), 1):
            kept = scored if cap is None else scored[:cap]
            found.extend((hop, rel, path, other, sim) for other, rel, path, sim in kept)
        ranked = sorted(found, key=lambda r: (*_sort_key(r[4]), r[0], r[3]))
        if k is not None:
            ranked = ranked[:k]
        rows.extend((anchor, hop, list(rel), list(path), other, sim, i)
                    for i, (hop, rel, path, other, sim) in enumerate(ranked, 1))
    return rows
