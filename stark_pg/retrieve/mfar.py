"""mFAR (Li et al., Multi-Field Adaptive Retrieval): per-field BM25 and dense scores, weighed per query.

Python embeds the query and turns it into one weight per (field, scorer) pair with the trained gate
(stark_pg/models/mfar.py); `stark.mfar` (sql/functions/mfar.sql) then unites each pair's
shortlist and computes the weighted score of every candidate in one statement, the weights bound as
parameters. Train a model first: `stark-pg train mfar SKB --variant all`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg

from stark_pg.embed import Encoder, encode_query, query_embeddings, skb_encoder
from stark_pg.options import MethodOptions
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, Ranking
from stark_pg.skb.catalog import require_skb
from stark_pg.skb.records import LoadError
from stark_pg.models.mfar import MfarModel, load_model, parse_mask

EXPLAINED_RESULTS = 10


NEEDS = ("training",)  # a model trained on the SKB's train split first


@dataclass
class Options(MethodOptions):
    name: str = "all"            # the trained model (by default models are named after their variant)
    mask: str | None = None      # comma-separated FIELD[:lexical|dense] whose weights are zeroed
    pool: int = 100              # shortlist size of each (field, scorer) pair
    explain: bool = False        # per-result contributions of every pair in the trace (one more query)
    k1: float = 1.2
    b: float = 0.75
    engine: str = "auto"         # lexical fields' BM25: auto (a field's pg_textsearch index when built), textsearch, sql
    LIMITS = {"k1": (0.0, 1000.0), "b": (0.0, 1.0)}    # beyond them BM25's arithmetic overflows to NaN
    CHOICES = {"engine": ("auto", "textsearch", "sql")}


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    skb_id = require_skb(conn, skb)
    model = load_model(conn, skb_id, skb, options.name)
    with query_embeddings() as spent:
        vector = encode_query(query, query_encoder(model), query_backend(conn, skb, model))
    started = time.perf_counter()
    weights = model.weights(vector, parse_mask(options.mask))
    embedded = time.perf_counter()
    rows = sql().mfar_top(conn, skb=skb, query=query, embedding=vector, model=model.embed_model,
                          fields=[p.field for p in model.pairs], scorers=[p.scorer for p in model.pairs],
                          weights=weights.tolist(), means=model.means.tolist(), scales=model.scales.tolist(),
                          k=k, pool=options.pool, k1=options.k1, b=options.b, engine=options.engine)
    hits = [Hit(int(node_id), float(score)) for node_id, score in rows]
    trace = {"method": "mfar", "model": model.name, "variant": model.variant, "mask": options.mask,
             "engine": options.engine,
             "sql": "stark.mfar(skb, query, embedding, model, fields, scorers, weights, means, scales, k, pool, "
                    "k1, b, engine)",
             "weights": {str(p): round(float(w), 6) for p, w in zip(model.pairs, weights)},
             **spent.trace(), "gate_ms": round((embedded - started) * 1000, 3),
             "sql_ms": round((time.perf_counter() - embedded) * 1000, 3)}
    if options.explain:
        shown = hits[:EXPLAINED_RESULTS]
        trace["contributions"] = contributions(conn, skb, query, vector, model, weights, [h.node_id for h in shown],
                                               options)
        trace["explain"] = explain_text(model, weights, shown, trace["contributions"])
    return Ranking(hits, trace)


def query_encoder(model: MfarModel) -> str:
    """The encoder of the query: a fine-tuned copy when the model was trained with one, else the SKB's model."""
    path = model.settings.get("query_encoder")
    if path is None:
        return model.embed_model
    if not Path(path).is_dir():
        raise LoadError(f"mFAR model {model.name!r} needs its fine-tuned query encoder at {path}, which is not on "
                        "this machine: train it here, or copy that directory")
    return path


def query_backend(conn: psycopg.Connection, skb: str, model: MfarModel) -> Encoder:
    """The encoder of the query: the SKB's recorded one for its model; torch for a fine-tuned query encoder."""
    if model.settings.get("query_encoder") is not None:
        return Encoder()
    return skb_encoder(conn, skb, model.embed_model)


def contributions(conn: psycopg.Connection, skb: str, query: str, vector: np.ndarray, model: MfarModel,
                  weights: np.ndarray, node_ids: list[int], options: Options) -> dict[int, dict[str, float]]:
    """Per node: each pair's share of its score, weight * (score - mean) / scale (missing scores are 0)."""
    active = [i for i, w in enumerate(weights) if w != 0]
    rows = sql().mfar_field_scores(
        conn, skb=skb, query=query, embedding=vector, model=model.embed_model,
        lexical=[model.pairs[i].field for i in active if model.pairs[i].scorer == "lexical"],
        dense=[model.pairs[i].field for i in active if model.pairs[i].scorer == "dense"],
        pool=0, include=node_ids, k1=options.k1, b=options.b, engine=options.engine)
    raw = {(int(n), f, s): float(v) for n, f, s, v in rows}
    out = {}
    for node in node_ids:
        out[node] = {str(model.pairs[i]): round(float(weights[i] * (raw.get((node, model.pairs[i].field,
                                                                               model.pairs[i].scorer), 0.0)
                                                                      - model.means[i]) / model.scales[i]), 6)
                     for i in active}
    return out


def explain_text(model: MfarModel, weights: np.ndarray, hits: list[Hit], parts: dict[int, dict[str, float]]) -> str:
    """The query's weights per field and scorer, then each result's largest contributions, as readable text."""
    lines = [f"mFAR model {model.name!r} (variant {model.variant}), weights for this query:"]
    by_field: dict[str, dict[str, float]] = {}
    for pair, weight in zip(model.pairs, weights):
        by_field.setdefault(pair.field, {})[pair.scorer] = float(weight)
    width = max(len(f) for f in by_field)
    lines.append(f"  {'field':<{width}}  {'lexical':>8}  {'dense':>8}")
    for name, scorers in sorted(by_field.items(), key=lambda item: -sum(item[1].values())):
        cells = [f"{scorers[s]:8.4f}" if s in scorers else f"{'-':>8}" for s in ("lexical", "dense")]
        lines.append(f"  {name:<{width}}  {'  '.join(cells)}")
    lines.append("contributions to each result's score (weight * standardised score), largest first:")
    for rank, hit in enumerate(hits, start=1):
        top = sorted(parts.get(hit.node_id, {}).items(), key=lambda item: -abs(item[1]))[:4]
        lines.append(f"  {rank:>2}. node {hit.node_id} score {hit.score:.3f}: "
                     + ", ".join(f"{pair} {value:+.3f}" for pair, value in top))
    return "\n".join(lines)
