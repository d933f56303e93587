"""4StepFocus (Boer, Koch, Kramer 2024): LLM triplets, graph substitution, VSS, optional LLM rerank.

1. Triplets (triplets.py): the LLM writes the question as (head, relation, tail) triplets over the
   SKB's node types and relations, with typed unknowns ?x1, ?x2 and the target unknown.
2. Prepare (link.py, the paper's Algorithm 3) links the named entities to nodes and keeps the usable
   triplets; Substitute (substitute.py, Algorithm 2) narrows every unknown's candidates over
   stark.edge in one SQL function call, round after round until no set changes.
3. The target's candidates are ranked by vector similarity, ahead of the best other nodes by VSS
   (the first k_max are the paper's candidate list; the rest keep evaluation depth).
4. With `rerank`, the LLM scores the top k_max (stark_pg/retrieve/rerank.py).
When no triplet survives Prepare, the target's node type still filters (setting `type_filter`);
when the substitution leaves no candidate, the ranking is plain VSS (as the paper falls back).
The trace holds every step (`explain`, printed by `stark-pg search --explain`), the SQL that ran,
the LLM usage and the figures an evaluation aggregates (`linked`, `candidate_count`, `llm`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import psycopg

from stark_pg.embed import canonical_name, encode_query
from stark_pg.llm import client_from_options
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, Ranking
from stark_pg.retrieve.focus import link, triplets
from stark_pg.retrieve.focus.substitute import substitute
from stark_pg.retrieve.rerank import DOC_CHARS, rerank
from stark_pg.skb.catalog import require_skb


@dataclass
class Options:
    llm: str | None = None            # PROVIDER:MODEL, e.g. openai:gpt-4o-mini (None: STARK_PG_LLM)
    base_url: str | None = None       # OpenAI/Anthropic-compatible server (None: STARK_PG_LLM_BASE_URL)
    cache: str | None = None          # use | only | refresh (None: STARK_PG_LLM_CACHE, else use)
    respect_relations: bool = False   # substitution follows only the triplet's relation (the paper: any)
    directed: bool = False            # edges only head -> tail (default: either direction)
    k_max: int = 20                   # the candidate list: filtered first, padded by VSS; reranked with rerank
    examples: int = 3                 # few-shot examples in the triplet prompt (built from the SKB)
    type_filter: bool = True          # a target nothing narrowed keeps the nodes of its type first
    link_pool: int = 20               # BM25 name matches considered when linking a constant
    link_ratio: float = 0.8           # string similarity (difflib ratio) that links a constant
    link_cosine: float = 0.85         # or name-embedding cosine similarity
    model: str | None = None          # embedding model (default all-MiniLM-L6-v2)
    rerank: bool = False              # step 4: the LLM scores the top k_max
    doc_chars: int = DOC_CHARS        # characters of each document shown to the reranker
    batch: bool = False               # rerank all k_max candidates in one prompt


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    o = options or Options()
    if o.k_max <= 0:
        raise ValueError(f"4stepfocus k_max must be positive, not {o.k_max}")
    if o.examples < 0:
        raise ValueError(f"4stepfocus examples must be 0 or more, not {o.examples}")
    skb_id = require_skb(conn, skb)
    model = canonical_name(o.model)
    client = client_from_options(conn, llm=o.llm, base_url=o.base_url, cache=o.cache)
    trace: dict = {"method": "4stepfocus", "options": {key: value for key, value in asdict(o).items()
                                                       if key not in ("llm", "base_url", "cache")}}
    with client.metered() as total:
        # 1. triplets
        started = time.perf_counter()
        with client.metered() as meter:
            reply = triplets.extract(conn, skb_id, query, client, n_examples=o.examples)
        trace["triplets"] = reply.as_json()
        trace["llm_triplets"] = meter.as_dict()
        # 2. prepare + substitute
        linked_at = time.perf_counter()
        prepared = link.prepare(conn, skb, reply, triplets.schema(conn, skb_id),
                                link.LinkSettings(o.link_pool, o.link_ratio, o.link_cosine, model))
        substituted_at = time.perf_counter()
        trace["links"] = [x.as_json() for x in prepared.links]
        trace["dropped"] = prepared.dropped
        trace["linked"] = prepared.linked
        trace["target"] = {"variable": prepared.target, "node_type": prepared.target_type}
        candidates, candidate_type, target_set = None, None, None
        if prepared.problem is not None:
            result = substitute(conn, skb, prepared.problem, respect_relations=o.respect_relations,
                                directed=o.directed)
            target_set = result.sets[prepared.target]
            trace["problem"] = prepared.problem.as_json()
            trace["sql"] = result.sql
            trace["substitution"] = {"rounds": result.rounds, "sql_ms": result.ms,
                                     "sizes": {v: s.size for v, s in result.sets.items()},
                                     "unconstrained": [v for v, s in result.sets.items() if s.unconstrained]}
            if target_set.unconstrained:
                candidate_type = target_set.node_type if o.type_filter else None
            elif target_set.size > 0:
                candidates = target_set.node_ids
        elif o.type_filter:
            candidate_type = prepared.target_type
        trace["candidate_count"] = None if target_set is None else target_set.size
        trace["filter"] = ("candidates" if candidates is not None else f"type {candidate_type}" if candidate_type
                           else "none (plain VSS)")
        # 3. VSS within the candidates, then the rest
        ranked_at = time.perf_counter()
        vector = encode_query(query, model)
        rows = list(sql().focus_rank(conn, skb=skb, embedding=vector, candidates=candidates,
                                     candidate_type=candidate_type, k=max(k, o.k_max), model=model))
        hits = [Hit(int(n), float(s)) for n, s, _ in rows]
        filtered_in_top = sum(1 for _, _, f in rows[:o.k_max] if f)
        trace["filtered_in_top"] = filtered_in_top
        # 4. optional LLM rerank of the top k_max
        reranked_at = time.perf_counter()
        if o.rerank:
            head, rest = hits[:o.k_max], hits[o.k_max:]
            reranked = rerank(conn, skb, query, [h.node_id for h in head], client, doc_chars=o.doc_chars,
                              batch=o.batch, trace=trace)
            hits = [Hit(h.node_id, 4.0 + h.score) for h in reranked] + rest
        done_at = time.perf_counter()
    trace["llm"] = total.as_dict()
    trace["ms"] = {"triplets": _ms(started, linked_at), "prepare": _ms(linked_at, substituted_at),
                   "substitute": trace.get("substitution", {}).get("sql_ms"),
                   "rank": _ms(ranked_at, reranked_at), "rerank": _ms(reranked_at, done_at) if o.rerank else None}
    trace["explain"] = explain(trace, o, rows)
    return Ranking(hits[:k], trace)


def _ms(a: float, b: float) -> float:
    return round((b - a) * 1000, 3)


def explain(trace: dict, o: Options, rows) -> dict:
    """The trace as readable lines per step (for `stark-pg search --explain`)."""
    reply = trace["triplets"]
    steps: dict = {}
    lines = [f"target {reply['target']}" + (f" ({reply['target_type']})" if reply.get("target_type") else "")]
    for t in reply["triplets"]:
        lines.append(f"{t['head']} ({t.get('head_type') or '?'}) -[{t.get('relation') or '?'}]-> "
                     f"{t['tail']} ({t.get('tail_type') or '?'})")
    llm = trace["llm_triplets"]
    lines.append(f"{len(reply['triplets'])} triplets; LLM {llm['calls']} calls ({llm['cache_hits']} from cache), "
                 f"{llm['seconds']} s")
    steps["1. triplets"] = lines
    lines = []
    for x in trace["links"]:
        if x["how"]:
            lines.append(f"{x['constant']!r} -> " + ", ".join(f"{n} {name!r}" for n, name in
                                                               zip(x["node_ids"], x["names"]))
                         + f" [{x['how']}, {x['score']}]")
        else:
            lines.append(f"{x['constant']!r} -> not linked")
    for d in trace["dropped"]:
        lines.append(f"dropped {d['head']} -[{d.get('relation')}]-> {d['tail']}: {d['reason']}")
    kept = len(trace.get("problem", {}).get("triplets", []))
    lines.append(f"{kept} triplets kept for substitution")
    steps["2. prepare (link constants)"] = lines
    if "substitution" in trace:
        s = trace["substitution"]
        lines = [f"?{v}: {n} candidates" + (" (all of its type)" if v in s["unconstrained"] else "")
                 for v, n in s["sizes"].items()]
        lines.append(f"{s['rounds']} rounds, {s['sql_ms']} ms; relations {'respected' if o.respect_relations else 'ignored'}, "
                     f"edges {'directed' if o.directed else 'either way'}")
        steps["3. substitute"] = lines
        steps["   SQL"] = trace["sql"]
    else:
        steps["3. substitute"] = ["skipped: no triplet left"]
    steps["4. rank"] = [f"filter: {trace['filter']}",
                        f"top {o.k_max}: {trace['filtered_in_top']} filtered candidates, "
                        f"{min(o.k_max, len(rows)) - trace['filtered_in_top']} by VSS from outside"]
    if o.rerank and "rerank" in trace:
        r = trace["rerank"]
        steps["5. rerank (LLM)"] = [f"{len(r['scores'])} candidates scored, {len(r['invalid'])} invalid replies"]
    return steps
