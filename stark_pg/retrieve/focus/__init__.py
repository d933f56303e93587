"""4StepFocus (Boer, Koch, Kramer 2024): LLM triplets, graph substitution, VSS, optional LLM rerank.

1. Triplets (triplets.py): the LLM writes the question as (head, relation, tail) triplets over the
   SKB's node types and relations, with typed unknowns ?x1, ?x2 and the target unknown.
2. Prepare (link.py, the paper's Algorithm 3) links the named entities to nodes and keeps the usable
   triplets; Substitute (substitute.py, Algorithm 2) narrows every unknown's candidates over
   stark.edge in one SQL function call, round after round until no set changes.
3. The target's candidates are ranked by vector similarity, ahead of every other node (the first
   k_max are the paper's candidate list; the rest keep evaluation depth). When nothing narrowed the
   target, there are no candidates and only the next rule orders the nodes.
   The other nodes are ranked by cosine similarity plus `type_weight` times the probability that
   their node type is the answer's (answer_type.py): the LLM's target type mixed with the vote of
   the nearest training queries. The paper ranks every node of the LLM's type first instead; that
   is `type_weight=2 llm_type_share=1`. A soft, mixed type is what makes this method beat VSS on
   the STaRK-Prime slice with a small LLM (README, 4StepFocus).
4. With `rerank`, the LLM scores the top k_max (stark_pg/retrieve/rerank.py).
The trace holds every step (`explain`, printed by `stark-pg search --explain`), the SQL that ran,
the LLM usage and the figures an evaluation aggregates (`linked`, `candidate_count`, `llm`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import psycopg

from stark_pg.embed import canonical_name, skb_query_vector
from stark_pg.llm import client_from_options
from stark_pg.options import LLMOptions, OptionError
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, Ranking
from stark_pg.retrieve.focus import answer_type, link, triplets
from stark_pg.retrieve.focus.substitute import MAX_COST, substitute
from stark_pg.retrieve.rerank import DOC_CHARS, SIM_WEIGHT, check_rerank, rerank
from stark_pg.skb.catalog import require_skb


NEEDS = ("llm",)  # an LLM at query time (see README: LLMs)


@dataclass
class Options(LLMOptions):
    respect_relations: bool = False   # substitution follows only the triplet's relation (the paper: any)
    directed: bool = False            # edges only head -> tail (default: either direction)
    max_cost: int = MAX_COST          # a revision estimated to read more index entries is left out (0: no bound)
    k_max: int = 20                   # the candidate list: filtered first, padded by VSS; reranked with rerank
    examples: int = 3                 # few-shot examples in the triplet prompt (built from the SKB)
    link_pool: int = 20               # BM25 name matches considered when linking a constant
    link_ratio: float = 0.8           # string similarity (difflib ratio) that links a constant
    link_cosine: float = 0.85         # or name-embedding cosine similarity
    grounding: float = 0.5            # share of a constant's words the question must contain (0: no check)
    type_weight: float = 0.15         # weight of the answer-type probability added to cosine (0: none)
    llm_type_share: float = 0.5       # the LLM's share of that probability; the rest is the training vote
    type_split: str = "train"         # the queries whose answers vote for the type
    type_k: int = 10                  # how many of them (the nearest by embedding)
    model: str | None = None          # embedding model (default all-MiniLM-L6-v2)
    rerank: bool = False              # step 4: the LLM scores the top k_max
    doc_chars: int = DOC_CHARS        # characters of each document shown to the reranker
    batch: bool = False               # rerank all k_max candidates in one prompt
    sim_weight: float = SIM_WEIGHT    # weight of the step-3 order added to the LLM's score (STaRK: 0.1)

    def check(self) -> None:
        super().check()
        if self.k_max <= 0:
            raise OptionError(f"4stepfocus k_max must be positive, not {self.k_max}")
        if self.max_cost < 0:
            raise OptionError(f"4stepfocus max_cost must be 0 (no bound) or more, not {self.max_cost}")
        if self.examples < 0:
            raise OptionError(f"4stepfocus examples must be 0 or more, not {self.examples}")
        if self.type_weight < 0 or self.type_k <= 0:
            raise OptionError(f"4stepfocus type_weight must be 0 or more and type_k positive, not {self.type_weight}, "
                              f"{self.type_k}")
        answer_type.check_share(self.llm_type_share)
        check_rerank(self.doc_chars, self.sim_weight)


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    o = options or Options()
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
                                link.LinkSettings(o.link_pool, o.link_ratio, o.link_cosine, model, o.grounding),
                                question=query)
        vector = skb_query_vector(conn, skb, query, model)
        voted = [] if o.llm_type_share == 1.0 or o.type_weight == 0 else \
            answer_type.votes(conn, skb, query, vector, split=o.type_split, k=o.type_k, model=model)
        belief = answer_type.belief(prepared.target_type, voted, o.llm_type_share)
        trace["target_type"] = belief.as_json()
        prepared = prepared.with_target_type(belief.best)
        substituted_at = time.perf_counter()
        trace["links"] = [x.as_json() for x in prepared.links]
        trace["dropped"] = prepared.dropped
        trace["linked"] = prepared.linked
        trace["target"] = {"variable": prepared.target, "node_type": prepared.target_type}
        candidates, target_set = None, None
        if prepared.problem is not None:
            result = substitute(conn, skb, prepared.problem, respect_relations=o.respect_relations,
                                directed=o.directed, max_cost=o.max_cost or None)
            target_set = result.sets[prepared.target]
            trace["problem"] = prepared.problem.as_json()
            trace["sql"] = result.sql
            trace["substitution"] = {"rounds": result.rounds, "sql_ms": result.ms,
                                     "sizes": {v: s.size for v, s in result.sets.items()},
                                     "unconstrained": [v for v, s in result.sets.items() if s.unconstrained],
                                     "cut": result.cut}
            if not target_set.unconstrained and target_set.size > 0:
                candidates = target_set.node_ids
        trace["candidate_count"] = None if target_set is None else target_set.size
        types = sorted(belief.probabilities) if o.type_weight > 0 else []
        trace["filter"] = ", then ".join(
            (["candidates"] if candidates is not None else [])
            + ([f"type bonus {o.type_weight} x P(type)"] if types else [])) or "none (plain VSS)"
        # 3. VSS within the candidates, then the rest
        ranked_at = time.perf_counter()
        rows = list(sql().focus_rank(conn, skb=skb, embedding=vector, candidates=candidates, type_names=types,
                                     type_probs=[belief.probabilities[t] for t in types], type_weight=o.type_weight,
                                     k=max(k, o.k_max), model=model))
        hits = [Hit(int(n), float(s)) for n, s, _ in rows]
        filtered_in_top = sum(1 for _, _, f in rows[:o.k_max] if f)
        trace["filtered_in_top"] = filtered_in_top
        # 4. optional LLM rerank of the top k_max
        reranked_at = time.perf_counter()
        if o.rerank:
            head, rest = hits[:o.k_max], hits[o.k_max:]
            reranked = rerank(conn, skb, query, [h.node_id for h in head], client, doc_chars=o.doc_chars,
                              batch=o.batch, sim_weight=o.sim_weight, trace=trace)
            base = 1.0 + max((h.score for h in rest), default=0.0)       # reranked scores stay above the rest
            hits = [Hit(h.node_id, base + h.score) for h in reranked] + rest
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
        elif not x.get("grounded", True):
            lines.append(f"{x['constant']!r} -> not linked: the question does not name it")
        else:
            lines.append(f"{x['constant']!r} -> not linked")
    for d in trace["dropped"]:
        lines.append(f"dropped {d['head']} -[{d.get('relation')}]-> {d['tail']}: {d['reason']}")
    kept = len(trace.get("problem", {}).get("triplets", []))
    lines.append(f"{kept} triplets kept for substitution")
    belief = trace["target_type"]
    shown = ", ".join(f"{t} {p:.0%}" for t, p in list(belief["probabilities"].items())[:3]) or "unknown"
    votes = ", ".join(f"{t} {share:.0%}" for t, share in belief["votes"][:3]) or "none"
    lines.append(f"answer type: {shown} (the LLM said {belief['llm_type'] or 'nothing'}; "
                 f"nearest training queries: {votes})")
    steps["2. prepare (link constants)"] = lines
    if "substitution" in trace:
        s = trace["substitution"]
        lines = [f"?{v}: {n} candidates" + (" (all of its type)" if v in s["unconstrained"] else "")
                 for v, n in s["sizes"].items()]
        lines.append(f"{s['rounds']} rounds, {s['sql_ms']} ms; relations {'respected' if o.respect_relations else 'ignored'}, "
                     f"edges {'directed' if o.directed else 'either way'}")
        if s.get("cut"):
            lines.append(f"{s['cut']} revisions left out over max_cost {o.max_cost} (between large sets): "
                         f"the sets are supersets of the exact ones")
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
