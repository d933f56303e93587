"""Learned fusion: a LightGBM ranker over every score stark-pg computes, evaluated inside PostgreSQL.

Python embeds the query; one statement (sql/templates/fusion.sql) computes the candidates' features
(stark.fusion_features) and orders them by the model compiled to SQL. Train a model first:
`stark-pg train fusion SKB` (stark_pg/train/fusion.py). `--explain` adds each feature's contribution
to the top results' scores (LightGBM's SHAP values from the stored model; a bag's mean).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql as pgsql

from stark_pg.db.settings import local_setting
from stark_pg.embed import query_embeddings, skb_query_vector
from stark_pg.options import MethodOptions
from stark_pg.resources import template_sections
from stark_pg.retrieve import Hit, Ranking
from stark_pg.skb.catalog import require_skb
from stark_pg.models.fusion import (FusionModel, FusionSettings, chosen_trees, dense_arguments, feature_columns,
                                   feature_pairs, fold_models, load, query_features, search_dense)

EXPLAINED_RESULTS = 5


NEEDS = ("training",)  # a model trained on the SKB's train split first


@dataclass
class Options(MethodOptions):
    name: str = "default"        # the trained model (`stark-pg train fusion SKB --name ...`)
    explain: bool = False        # per-result contributions of every feature in the trace


def template(name: str, model: FusionModel) -> pgsql.Composed:
    """A section of sql/templates/fusion.sql with the model's compiled score in place of {score} and the
    columns it reads in place of {columns}."""
    return pgsql.SQL(template_sections("fusion.sql")[name]).format(
        score=pgsql.SQL(model.score_sql), columns=pgsql.SQL(feature_columns(len(model.features))))


def rank_params(skb: str, query: str, vector, model: FusionModel, k: int, dense=None, engine: str = "auto") -> dict:
    """The parameters of sql/templates/fusion.sql's `rank` (and `features`) for a query and its embedding
    under this model: its settings, its (field, scorer) pairs, and its trained_dense vectors if any.
    `engine`: the BM25 engine of the lexical shortlists ('auto': pg_textsearch where indexed; the same
    features, and so the same ranking, on either engine)."""
    s = model.settings
    fields, scorers = feature_pairs(model.features)
    return {"skb": skb, "query": query, "embedding": vector, "model": model.embed_model, "pool": s["pool"],
            "knn": s["knn"], "link": s["link"], "k": k, "pair_fields": fields, "pair_scorers": scorers,
            "pool_splits": s.get("splits") or ["train"], "engine": engine} | dense_arguments(dense)


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    skb_id = require_skb(conn, skb)
    model = load(conn, skb_id, skb, options.name)
    with query_embeddings() as spent:
        vector = skb_query_vector(conn, skb, query, model.embed_model)
        dense = trained_dense(query, model)
    embedded = time.perf_counter()
    with generic_plan(conn):
        rows = conn.execute(template("rank", model), rank_params(skb, query, vector, model, k, dense)).fetchall()
    hits = [Hit(int(node_id), float(score)) for node_id, score in rows]
    trace = {"method": "fusion", "model": model.name, "features": len(model.features),
             "trees": model.settings.get("chosen_rounds"), "bag": len(model.booster_texts),
             "leaves": chosen_trees(model.settings)["leaves"],
             "sql": "compiled trees over stark.fusion_features(skb, query, embedding, model, pool, knn, link"
                    + (", dense_models, dense_qvecs" if dense else "") + ", pair_fields, pair_scorers)",
             "dense_models": dense.models if dense else None,
             **spent.trace(),
             "sql_ms": round((time.perf_counter() - embedded) * 1000, 3)}
    if options.explain and hits:
        shown = contributions(conn, skb, query, vector, model, [h.node_id for h in hits[:EXPLAINED_RESULTS]], dense)
        trace["contributions"] = shown
        trace["explain"] = {f"node {node} (score {hit.score:.3f}): feature contributions": [
            f"{feature}: {value:+.4f}" for feature, value in shown[str(node)].items()]
            for hit in hits[:EXPLAINED_RESULTS] for node in [hit.node_id] if str(node) in shown}
    return Ranking(hits, trace)


@contextmanager
def generic_plan(conn: psycopg.Connection):
    """A transaction in which PostgreSQL plans the ranking statement once for any parameters
    (`plan_cache_mode = force_generic_plan`, SET LOCAL). The statement holds the compiled trees (100 a
    model, 3 models in a default bag) and, inlined, stark.fusion_features' whole query; by default the
    server plans all of it afresh for each question's values. Generic, and once psycopg has prepared the
    statement (its fifth run on a connection), the plan is reused and that planning is saved on every
    search after (docs/fusion.md, "Latency", has the figures)."""
    with local_setting(conn, "plan_cache_mode", "force_generic_plan"):
        yield


def trained_dense(query: str, model: FusionModel):
    """The query under every fold model of a model trained with `--dense` (else None)."""
    name = model.settings.get("dense")
    return search_dense(query, fold_models(name, model.settings["dense_folds"])) if name else None


def contributions(conn, skb: str, query: str, vector, model: FusionModel, node_ids: list[int], dense=None) -> dict:
    """{node: {feature: contribution}} (the largest ten by size, and the bias), from the stored models."""
    s = model.settings
    settings = FusionSettings(pool=s["pool"], knn=s["knn"], link=s["link"], splits=s.get("splits") or ["train"])
    ids, X = query_features(conn, skb, query, vector, settings, model.embed_model, dense)
    position = {n: i for i, n in enumerate(ids)}
    shown = [n for n in node_ids if n in position]
    rows = X[[position[n] for n in shown]][:, : len(model.features)]     # a model older than the last features
    values = model.contributions(rows)
    out = {}
    for node, row in zip(shown, np.atleast_2d(values)):
        top = sorted(zip(model.features, row[:-1]), key=lambda x: -abs(x[1]))[:10]
        out[str(node)] = {name: round(float(v), 4) for name, v in top} | {"(bias)": round(float(row[-1]), 4)}
    return out
