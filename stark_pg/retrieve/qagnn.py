"""QA-GNN (STaRK's graph baseline): a graph network re-ranks the first stage's top candidates over their subgraph.

The first stage (`vss` or `hybrid`, as the model was trained) ranks; its top `candidates` nodes, the
nodes named by the query's words and the edges among them and one hop out come from PostgreSQL in one
statement (`qagnn_subgraph`, sql/queries/qagnn.sql); the node features are the stored document
vectors; the trained network (stark_pg/models/qagnn.py) scores the candidates in torch and they
are re-ranked by it. Everything the first stage ranked beyond them keeps its order, after them.
Train a model first: `stark-pg train qagnn SKB`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg

from stark_pg.embed import skb_query_vector
from stark_pg.options import MethodOptions, OptionError
from stark_pg.retrieve import Hit, Ranking, get_method
from stark_pg.skb.catalog import require_skb
from stark_pg.models.qagnn import graph_for_query, load_model, rerank, score_graph

FIRST_STAGES = ("vss", "hybrid")

NEEDS = ("training",)  # a model trained on the SKB's train split first (`stark-pg train qagnn SKB`)


@dataclass
class Options(MethodOptions):
    name: str = "default"            # the trained model (`stark-pg train qagnn SKB --name NAME`)
    first_stage: str | None = None   # vss | hybrid; default: the one the model was trained with
    candidates: int | None = None    # how many of the first stage's nodes are re-ranked; default: as trained
    LIMITS = {"candidates": (1, 10_000)}

    def check(self) -> None:
        if self.first_stage is not None and self.first_stage not in FIRST_STAGES:
            raise OptionError(f"qagnn first_stage must be one of {', '.join(FIRST_STAGES)}, not {self.first_stage!r}")


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    skb_id = require_skb(conn, skb)
    model = load_model(conn, skb_id, skb, options.name)
    stage = options.first_stage or model.config["first_stage"]
    n = options.candidates or model.config["candidates"]
    started = time.perf_counter()
    ids, scores, stage_trace = first_stage(conn, skb, query, max(k, n), stage, model.embed_model)
    fetched = time.perf_counter()
    head_ids, head_scores = ids[:n], scores[:n]
    vector = skb_query_vector(conn, skb, query, model.embed_model)
    graph, subgraph, table = graph_for_query(conn, skb_id, query, vector, head_ids, head_scores, model.embed_model,
                                             model.vocab, model.config)
    built = time.perf_counter()
    reranked = rerank(graph.candidate_ids, score_graph(model.network, graph, table)) if len(graph.candidate_ids) else []
    scored = time.perf_counter()
    seen = {node for node, _ in reranked}
    floor = min((s for _, s in reranked), default=0.0)
    tail = [node for node in ids if node not in seen]
    hits = [Hit(node, score) for node, score in reranked]
    hits += [Hit(int(node), floor - 1.0 - i) for i, node in enumerate(tail)]   # below every re-ranked one, in order
    trace = {"method": "qagnn", "model": model.name, "first_stage": stage, "candidates": n,
             "first_stage_trace": stage_trace, "reranked": len(reranked),
             "sql": "qagnn_subgraph(skb_id, candidates, grams, max_linked, fanout) (sql/queries/qagnn.sql)",
             "subgraph": subgraph.size,
             "first_stage_ms": round((fetched - started) * 1000, 3),
             "subgraph_ms": round((built - fetched) * 1000, 3),
             "gnn_ms": round((scored - built) * 1000, 3)}
    return Ranking(hits[:k], trace)


def first_stage(conn: psycopg.Connection, skb: str, query: str, k: int, method: str, embed_model: str):
    """The first stage's ranking (its node ids, scores and trace): `vss` or `hybrid` with their defaults.
    Here, not with the network (stark_pg/models/qagnn.py), because it runs other retrieval methods;
    training (stark_pg/train/qagnn.py) ranks its questions' candidates with it too."""
    if method not in FIRST_STAGES:
        raise ValueError(f"QA-GNN's first stage must be one of {', '.join(FIRST_STAGES)}, not {method!r}")
    module = get_method(method)
    ranking = module.search(conn, skb, query, k, module.Options(model=embed_model))
    return [h.node_id for h in ranking.hits], [h.score for h in ranking.hits], ranking.trace
