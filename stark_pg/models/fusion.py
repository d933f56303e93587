"""A learned-fusion model: LightGBM's gradient-boosted trees, kept as LightGBM text and compiled to SQL.

Why trees compiled to SQL: the ranking then happens where the features are computed, in one
statement (sql/templates/fusion.sql), with no round trip of the candidates to Python. Each tree
becomes nested `CASE WHEN fI <= threshold THEN ... ELSE ... END` (the comparison LightGBM makes;
the features are never NULL or NaN: stark.fusion_features gives 0 for a missing score), and the
model is their sum. The expression reads feature I as the column `fI` (feature_columns names them from
the feature array): a column costs the interpreter less than an array subscript, which it evaluates
again at every split (600 trees a candidate in the default bag; since migration 0038). A bag (`train
fusion --bag N`) is N such models fitted with N seeds; it scores by their mean, in SQL the sum of all
their trees divided by N. tests/test_fusion.py checks that the SQL equals the models' own mean
prediction on the same feature vectors.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, fields

import numpy as np
import psycopg

from stark_pg.embed import encode_query
from stark_pg.resources import queries as sql
from stark_pg.skb.records import MissingIndex


@dataclass
class FusionSettings:
    """How a fusion model is trained (`stark-pg train fusion`'s options); stored with the model."""
    name: str = "default"
    model: str | None = None          # embedding model of the features (default: all-MiniLM-L6-v2)
    pool: int = 100                   # shortlist per (field, scorer), as mFAR's
    knn: int = 10                     # nearest training queries for type_share and knn_answer
    link: int = 5                     # name matches taken as the entities the question names
    rounds: list[int] = field(default_factory=lambda: [100, 200, 400])   # chosen among by cross-validation
    folds: int = 5
    repeats: int = 1                  # cross-validation repeated over this many draws of the folds, averaged
    leaves: list[int] = field(default_factory=lambda: [7, 15])  # leaves per tree, chosen among with the rounds
    learning_rate: float = 0.05
    min_data_in_leaf: list[int] = field(default_factory=lambda: [20])  # chosen among with the rounds
    seed: int = 1
    bag: int = 3                      # models fitted with seeds seed..seed+bag-1, scoring by their mean
                                      # (3: the smallest on the plateau of 24 held-out draws, docs/fusion.md)
    limit: int | None = None          # only the first N training queries of each split (a quick run)
    dense: str | None = None          # cross-fitted dense models NAME-fold<k>of<n> (`train dense --fold k/n`)
    dense_folds: int = 2              # n: how many of them
    extra_train: str | None = None    # a STaRK QA directory: also fit on its training questions the SKB lacks
    extra_min_share: float = 0.0      # of those, only questions with at least this share of answers inside
    splits: list[str] = field(default_factory=lambda: ["train"])  # questions fitted on, and the pool the
                                      # nearest-question features read (`--splits train,synthetic`)
    synthetic_weight: list[float] = field(default_factory=lambda: [1.0])  # each row's weight in the fit for
                                      # questions of splits other than train, chosen among by cross-validation;
                                      # 0: they join the nearest-question pool only, never fitted on


# the tree settings cross-validation chooses among (each a list in FusionSettings), with the rounds
TREE_SETTINGS = ("leaves", "min_data_in_leaf")


def tree_grid(settings: FusionSettings) -> list[dict]:
    """Every combination of the tree settings' candidate values, simplest first (fewest leaves, then
    the most data per leaf): cross-validation fits each and keeps the best, ties to the simpler."""
    return [{"leaves": leaves, "min_data_in_leaf": data} for leaves in sorted(set(settings.leaves))
            for data in sorted(set(settings.min_data_in_leaf), reverse=True)]


def chosen_trees(stored: dict) -> dict:
    """The tree settings a stored model was fitted with: cross-validation's choice (`chosen_<setting>`),
    or for a model trained before they were lists, the one value it had."""
    return {name: stored.get(f"chosen_{name}", stored.get(name)) for name in TREE_SETTINGS}


def option(setting: str) -> str:
    """`stark-pg train fusion`'s option for a setting: every setting has one, `--<setting, - for _>`
    (tests/test_fusion.py checks each exists)."""
    return "--" + setting.replace("_", "-")


def train_command(skb: str, settings: dict) -> str:
    """The `stark-pg train fusion` command that trains a model again with its stored settings: every
    option whose value is not the default (a model trained with --dense needs it again, or its
    trained_dense feature would be missing)."""
    defaults = FusionSettings()
    words = ["stark-pg", "train", "fusion", shlex.quote(skb)]
    for f in fields(FusionSettings):
        value = settings.get(f.name, getattr(defaults, f.name))
        if f.name in TREE_SETTINGS and not isinstance(value, list):
            value = [value]                   # stored before the tree settings were chosen among
        if value != getattr(defaults, f.name):
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            words += [option(f.name), shlex.quote(text)]
    return " ".join(words)


@dataclass
class FusionModel:
    name: str
    embed_model: str
    features: list[str]
    booster_texts: list[str]          # LightGBM's text of each model of the bag (one without --bag)
    score_sql: str
    settings: dict
    metrics: dict
    importance: dict

    def boosters(self) -> list:
        import lightgbm

        return [lightgbm.Booster(model_str=text) for text in self.booster_texts]

    def predict(self, X) -> np.ndarray:
        """The score search ranks by: the mean of the bag's raw scores (what score_sql computes)."""
        return bag_predict(self.boosters(), X)

    def contributions(self, X) -> np.ndarray:
        """Per row, each feature's SHAP value and the bias last (LightGBM's pred_contrib), averaged over
        the bag: they add up to `predict`, as each model's add up to its own score."""
        return np.mean([b.predict(X, pred_contrib=True) for b in self.boosters()], axis=0)


def fit_bag(params: dict, train_set, rounds: int, size: int) -> list:
    """A bag: `size` LightGBM models fitted on the same rows, with the seeds params["seed"],
    params["seed"] + 1, ... (the first is the model a bag of one fits)."""
    import lightgbm

    return [lightgbm.train(params | {"seed": params["seed"] + b}, train_set, num_boost_round=rounds)
            for b in range(size)]


def bag_predict(boosters: list, X) -> np.ndarray:
    """A bag's score: the mean of its models' raw scores."""
    return np.mean([b.predict(X) for b in boosters], axis=0)


def compile_sql(boosters: list) -> str:
    """The bag's mean raw score as one SQL expression over the columns f1, f2, ... (feature_columns):
    every tree of every model summed, divided by their number (a single model's sum is left undivided)."""
    trees = [t for b in boosters for t in b.dump_model()["tree_info"]]
    if not trees:
        return "0"
    total = "(" + "\n + ".join(_node_sql(t["tree_structure"]) for t in trees) + ")"
    return total if len(boosters) == 1 else f"({total} / {len(boosters)}::float8)"


def _node_sql(node: dict) -> str:
    if "leaf_value" in node:
        return _number(node["leaf_value"])
    if node.get("decision_type", "<=") != "<=":
        raise ValueError(f"cannot compile a {node['decision_type']!r} split (numerical <= splits only)")
    feature = int(node["split_feature"]) + 1                      # f1 is the array's f[1]
    return (f"case when f{feature} <= {_number(node['threshold'])} then {_node_sql(node['left_child'])} "
            f"else {_node_sql(node['right_child'])} end")


def feature_columns(count: int) -> str:
    """The select list that turns a row's feature array `x.f` into the columns a compiled score reads:
    `x.f[1] as f1, ..., x.f[count] as fcount` (a model older than the last features reads the first only)."""
    return ", ".join(f"x.f[{i}] as f{i}" for i in range(1, count + 1))


def feature_pairs(features: list[str]) -> tuple[list[str], list[str]]:
    """The (field, scorer) pairs a model's features were computed from, in their order, as the two arrays
    stark.fusion_features takes (`pair_fields`, `pair_scorers`): each feature named `field|lexical` or
    `field|dense` (a lexical pair's `|norm` feature comes with it)."""
    pairs = [name.rsplit("|", 1) for name in features if name.endswith(("|lexical", "|dense"))]
    return [field for field, _ in pairs], [scorer for _, scorer in pairs]


def _number(value: float) -> str:
    """A double precision literal that reads back as exactly `value` (repr is the shortest round trip)."""
    text = repr(float(value))
    if text in ("inf", "-inf", "nan"):
        return f"'{text}'::float8"
    return f"{text}::float8"


def save(conn: psycopg.Connection, skb_id: int, model: FusionModel) -> None:
    with conn.transaction():
        sql().save_fusion_model(conn, skb_id=skb_id, name=model.name, embed_model=model.embed_model,
                                features=model.features, boosters=model.booster_texts, score_sql=model.score_sql,
                                settings=json.dumps(model.settings), metrics=json.dumps(model.metrics),
                                importance=json.dumps(model.importance))


def load(conn: psycopg.Connection, skb_id: int, skb: str, name: str) -> FusionModel:
    """The stored model, read once per version of its row in this process: the row holds the bag's
    texts and compiled SQL (large: fetching and decoding them would cost every search a noticeable share
    of its time), and a search needs them unchanged. Its features are checked against those computed now
    when it is read."""
    version = sql().fusion_model_version(conn, skb_id=skb_id, name=name)
    if version is None:
        trained = ", ".join(r[0] for r in sql().fusion_model_names(conn, skb_id=skb_id)) or "none"
        raise MissingIndex(f"no fusion model {name!r} for SKB {skb!r} (trained: {trained}); "
                           f"run `{train_command(skb, {'name': name})}`")
    key = (conn.info.dsn, skb_id, name, *version)
    if key in _LOADED:
        return _LOADED[key]
    row = sql().load_fusion_model(conn, skb_id=skb_id, name=name)
    model = FusionModel(row[0], row[1], list(row[2]), list(row[3]), row[4], row[5], row[6], row[7])
    check_features(model, list(sql().fusion_feature_names(conn, skb=skb, model=model.embed_model,
                                                          trained_dense=bool(model.settings.get("dense")))), skb)
    if len(_LOADED) >= 8:
        _LOADED.pop(next(iter(_LOADED)))
    _LOADED[key] = model
    return model


# (database, SKB, model, row version) -> the model read from that version and found usable; a row version
# (the writing transaction's id and the tuple's place) has one content for good, so no entry goes stale
_LOADED: dict[tuple, FusionModel] = {}


def check_features(model: FusionModel, computed: list[str], skb: str) -> None:
    """A model ranks by `fI`, the places its features had when it was trained: they must still be the
    first of the features stark.fusion_features computes. New features are appended for that reason (a
    model trained before them keeps ranking and ignores them); any other change needs a retrained model."""
    if computed[: len(model.features)] != model.features:
        changed = next(i for i, name in enumerate(model.features) if i >= len(computed) or computed[i] != name)
        raise MissingIndex(
            f"fusion model {model.name!r} of SKB {skb!r} was trained on {len(model.features)} features, and "
            f"feature {changed + 1} ({model.features[changed]}) "
            f"is now computed as {computed[changed] if changed < len(computed) else 'none'}; retrain it: "
            f"`{train_command(skb, model.settings | {'name': model.name})}`")


@dataclass
class CrossFitted:
    """The fine-tuned dense models one query's trained_dense feature averages, and its vector under each."""
    models: list[str]
    vectors: list


def fold_models(name: str, folds: int) -> list[str]:
    """The names `train dense --fold k/n` models go by here: model k was trained without fold k."""
    return [f"{name}-fold{k}of{folds}" for k in range(folds)]


def dense_arguments(dense: CrossFitted | None) -> dict:
    """stark.fusion_features' `dense_models` and `dense_qvecs` (NULL without trained_dense)."""
    return {"dense_models": dense.models if dense else None, "dense_qvecs": dense.vectors if dense else None}


def search_dense(text: str, models: list[str]) -> CrossFitted:
    """A new query (never trained on): every fold's model, whose cosines the feature averages."""
    return CrossFitted(models, [encode_query(text, m) for m in models])


def query_features(conn: psycopg.Connection, skb: str, body: str, vector, settings: FusionSettings, model: str,
                   dense: "CrossFitted | None" = None, pairs: tuple[list[str], list[str]] | None = None,
                   engine: str = "auto"):
    """(node ids, feature matrix) of one query's candidates, exactly as search computes them; `dense`
    (the trained_dense feature) is the fine-tuned models and the query's vector under each. `pairs`:
    the (field, scorer) pairs as feature_pairs gives them from the feature names (None: the SKB's, read
    by stark.fusion_pairs on every call, a scan whose cost grows with the SKB; the same features).
    `engine`: the BM25 engine of the lexical shortlists (auto, textsearch, sql; the same features)."""
    fields, scorers = pairs if pairs is not None else (None, None)
    rows = list(sql().fusion_features(conn, skb=skb, query=body, embedding=vector, model=model,
                                      pool=settings.pool, knn=settings.knn, link=settings.link,
                                      pool_splits=list(settings.splits), pair_fields=fields, pair_scorers=scorers,
                                      engine=engine, **dense_arguments(dense)))
    return [int(r[0]) for r in rows], np.array([r[1] for r in rows], dtype=np.float64).reshape(len(rows), -1)
