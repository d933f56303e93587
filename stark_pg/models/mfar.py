"""A trained mFAR model: which (field, scorer) pairs it scores, and how it weighs them for a query.

The model is stored in `stark.mfar_model` (sql/schema/0007_mfar.sql). Retrieval (stark_pg/retrieve/
mfar.py) and training (stark_pg/train/mfar.py) share this module so that the weights a query gets
at search time are computed exactly as they were while training: G(q) = softmax(W q + b) over the
pairs, times a per-pair scale gamma, with masked pairs set to zero afterwards (not renormalised, as
in the paper's masking study: a masked scorer's share of the score is simply gone).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import psycopg

from stark_pg.resources import queries as sql
from stark_pg.skb.records import LoadError

SCORERS = ("lexical", "dense")

# The paper's variants: which fields and scorers a model uses.
#   all       every field, both scorers           lexical  every field, BM25 only
#   dense     every field, dense only             2        the whole document, both scorers
#   1+n       the whole document by BM25, every other field by dense
VARIANTS = ("all", "lexical", "dense", "2", "1+n")


@dataclass(frozen=True)
class Pair:
    field: str
    scorer: str

    def __str__(self) -> str:
        return f"{self.field}:{self.scorer}"


@dataclass
class FieldInfo:
    field: str
    lexical: bool       # its BM25 scope is built
    dense: bool         # it has vectors of the embedding model


def skb_fields(conn: psycopg.Connection, skb: str, embed_model: str) -> list[FieldInfo]:
    """The SKB's fields (stark.mfar_fields): document, name, type, text fields, relations."""
    return [FieldInfo(f, bool(lex), bool(dense)) for f, lex, dense in sql().mfar_fields(conn, skb=skb,
                                                                                         model=embed_model)]


def variant_pairs(fields: list[FieldInfo], variant: str, exclude: tuple[str, ...] = ()) -> list[Pair]:
    """The (field, scorer) pairs of a variant over the fields that are indexed, minus excluded ones.

    `exclude` holds field names (every scorer of that field) or `field:scorer` entries. A pair whose
    index is missing is left out; a variant left with no pair is an error saying what to build.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown mFAR variant {variant!r} (known: {', '.join(VARIANTS)})")
    excluded = [parse_field_spec(e) for e in exclude]
    known = {f.field for f in fields}
    for name, _ in excluded:
        if name not in known:
            raise ValueError(f"--exclude {name!r}: not a field of this SKB (fields: {', '.join(sorted(known))})")
    pairs = []
    for f in fields:
        for scorer in SCORERS:
            wanted = {
                "all": True,
                "lexical": scorer == "lexical",
                "dense": scorer == "dense",
                "2": f.field == "document",
                "1+n": (f.field == "document") == (scorer == "lexical"),
            }[variant]
            available = f.lexical if scorer == "lexical" else f.dense
            if wanted and available and not any(n == f.field and s in (None, scorer) for n, s in excluded):
                pairs.append(Pair(f.field, scorer))
    if not pairs:
        raise ValueError(f"variant {variant!r} has no indexed (field, scorer) pair: run `stark-pg index SKB "
                         "--relation-fields` (BM25 per field) with --chunks (dense per field)")
    return pairs


def parse_field_spec(spec: str) -> tuple[str, str | None]:
    """'description:dense' -> ('description', 'dense'); 'relation:target' -> ('relation:target', None)."""
    spec = spec.strip()
    head, sep, tail = spec.rpartition(":")
    if sep and tail in SCORERS:
        return head, tail
    return spec, None


def parse_mask(mask: str | None) -> list[tuple[str, str | None]]:
    """Comma-separated FIELD[:lexical|dense] entries (relation names hold spaces and colons, not commas)."""
    return [parse_field_spec(part) for part in (mask or "").split(",") if part.strip()]


@dataclass
class MfarModel:
    name: str
    variant: str
    embed_model: str
    pairs: list[Pair]
    gate_weight: np.ndarray          # (pairs, dim)
    gate_bias: np.ndarray            # (pairs,)
    means: np.ndarray                # (pairs,) score statistics of the training candidates
    scales: np.ndarray
    gammas: np.ndarray               # learned per-pair scale (ones without batch normalisation)
    settings: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    trained_at: object = None

    def gate(self, query_vector: np.ndarray) -> np.ndarray:
        """G(q): softmax over the pairs of W q + b."""
        return gate_softmax(self.gate_weight, self.gate_bias, query_vector)

    def weights(self, query_vector: np.ndarray, mask: list[tuple[str, str | None]] = ()) -> np.ndarray:
        """The weight of each pair for this query: G(q) * gamma, zero where masked."""
        weights = self.gate(query_vector) * self.gammas
        for name, scorer in mask:
            hit = [i for i, p in enumerate(self.pairs) if p.field == name and scorer in (None, p.scorer)]
            if not hit:
                raise ValueError(f"mask {name}{':' + scorer if scorer else ''}: model {self.name!r} has no such "
                                 f"pair (pairs: {', '.join(map(str, self.pairs))})")
            weights[hit] = 0.0
        return weights


def gate_softmax(weight: np.ndarray, bias: np.ndarray, query_vector: np.ndarray) -> np.ndarray:
    """softmax(W q + b) over the pairs, in float64 (search and training compute the same weights)."""
    logits = weight @ np.asarray(query_vector, dtype=np.float64) + bias
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def save_model(conn: psycopg.Connection, skb_id: int, model: MfarModel) -> None:
    with conn.transaction():
        sql().save_mfar_model(
            conn, skb_id=skb_id, name=model.name, variant=model.variant, embed_model=model.embed_model,
            fields=[p.field for p in model.pairs], scorers=[p.scorer for p in model.pairs],
            gate_weight=model.gate_weight.tolist(), gate_bias=model.gate_bias.tolist(), means=model.means.tolist(),
            scales=model.scales.tolist(), gammas=model.gammas.tolist(), settings=json.dumps(model.settings),
            history=json.dumps(model.history), metrics=json.dumps(model.metrics))


def load_model(conn: psycopg.Connection, skb_id: int, skb_name: str, name: str) -> MfarModel:
    row = sql().load_mfar_model(conn, skb_id=skb_id, name=name)
    if row is None:
        trained = ", ".join(r[0] for r in sql().list_mfar_models(conn, skb_id=skb_id)) or "none"
        raise LoadError(f"no mFAR model {name!r} for SKB {skb_name!r} (trained: {trained}); "
                        f"run `stark-pg train mfar {skb_name} --variant {name if name in VARIANTS else 'all'}`")
    (name, variant, embed_model, fields, scorers, weight, bias, means, scales, gammas, settings, history, metrics,
     trained_at) = row
    return MfarModel(name, variant, embed_model, [Pair(f, s) for f, s in zip(fields, scorers)],
                     np.asarray(weight, dtype=np.float64).reshape(len(fields), -1), np.asarray(bias, dtype=np.float64),
                     np.asarray(means, dtype=np.float64), np.asarray(scales, dtype=np.float64),
                     np.asarray(gammas, dtype=np.float64), settings, history, metrics, trained_at)
