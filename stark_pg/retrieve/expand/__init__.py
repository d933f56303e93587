"""Query expansion: KAR and the baselines its paper compares with (PRF, HyDE, RAR, AGR).

Every method here rewrites the query as the query plus some expansion texts, then retrieves that
with a final retriever (`retriever=vss`, the KAR paper's main setting, or `bm25`, its section 6.5,
or `hybrid`). The methods differ only in where the expansions come from:

    prf   the text of the first retrieval's top documents (no LLM)
    hyde  an LLM-written document that would answer the query
    rar   the same, with the first retrieval's top documents in the prompt
    agr   keywords, an analysis, candidate documents, one refined document (four LLM calls)
    kar   entities -> nodes -> their neighbours over the graph, filtered by the query (SQL) -> the
          LLM writes expansions from those document triples

This module holds what they share: the options of the final retriever, retrieval of an expanded
query, the SKB's document structures for prompts (read from the database), the documents of
nodes, and `run`, which meters the LLM, falls back to the plain retriever when the LLM's reply stays
invalid after its repair (the reason goes into the trace), and assembles trace and explanation.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import psycopg
from pydantic import BaseModel, ConfigDict, model_validator

from stark_pg.embed import Encoder, canonical_name, encode, encode_query, skb_encoder
from stark_pg.llm import LLMClient, LLMInvalidOutput, client_from_options
from stark_pg.options import LLM_SETTINGS, LLMOptions, MethodOptions, OptionError
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, Ranking
from stark_pg.retrieve.hybrid import Options as HybridOptions
from stark_pg.skb.catalog import require_skb

RETRIEVERS = ("vss", "bm25", "hybrid")
COMBINES = ("concat", "mean")
SYSTEM = "You help a search engine over a knowledge base. You reply with JSON only."


@dataclass
class RetrieverOptions(MethodOptions):
    retriever: str = "vss"        # vss | bm25 | hybrid: retrieves the expanded query (and any first pass)
    combine: str = "concat"       # vss/hybrid: embed query + expansions as one text (concat) or average vectors (mean)
    model: str | None = None      # embedding model (default all-MiniLM-L6-v2)
    query_weight: float = 0.0     # vss/hybrid: share of the plain query's embedding mixed in (0: the papers')

    def check(self) -> None:
        super().check()
        if self.retriever not in RETRIEVERS:
            raise OptionError(f"retriever must be one of {', '.join(RETRIEVERS)}, not {self.retriever!r}")
        if self.combine not in COMBINES:
            raise OptionError(f"combine must be one of {', '.join(COMBINES)}, not {self.combine!r}")
        if not 0.0 <= self.query_weight <= 1.0:
            raise OptionError(f"query_weight must be between 0 and 1, not {self.query_weight}")


# ------------------------------------------------------------------------------------------------
# Retrieval of a query with expansions

def expanded_text(query: str, expansions: list[str]) -> str:
    return "\n".join([query, *[e for e in expansions if e.strip()]])


def query_vector(query: str, expansions: list[str], o: RetrieverOptions, encoder: Encoder | None = None) -> np.ndarray:
    """`concat`: the embedding of query and expansions as one text (what the KAR paper embeds);
    `mean`: the normalised mean of their separate embeddings (HyDE's way; no truncation of long texts).
    `query_weight` w > 0 mixes in the plain query's embedding: normalise(w q + (1 - w) expanded), so
    that expansions naming the wrong entities cannot pull the query all the way to them."""
    model = canonical_name(o.model)
    if not expansions:
        return encode_query(query, model, encoder)
    if o.combine == "concat":
        expanded = encode([expanded_text(query, expansions)], model, encoder=encoder)[0]
    else:
        expanded = _unit(encode([query, *expansions], model, encoder=encoder).mean(axis=0))
    if o.query_weight == 0:
        return expanded
    return _unit(o.query_weight * encode_query(query, model, encoder) + (1 - o.query_weight) * expanded)


def _unit(vector: np.ndarray) -> np.ndarray:
    return (vector / max(float(np.linalg.norm(vector)), 1e-12)).astype(np.float32)


def retrieve(conn: psycopg.Connection, skb: str, query: str, expansions: list[str], o: RetrieverOptions,
             k: int) -> tuple[list[Hit], dict]:
    """The top k for the query plus its expansions by the chosen retriever, and a trace of that step
    (its `ms` covers the statement: the rows are fetched before the clock stops).
    With no expansions this is exactly the plain retriever on the query."""
    started = time.perf_counter()
    model = canonical_name(o.model)
    text = expanded_text(query, expansions)
    trace: dict = {"retriever": o.retriever, "chars": len(text)}
    if o.retriever == "bm25":
        rows = list(sql().bm25_top(conn, skb_id=require_skb(conn, skb), scope="*", query=text, k1=1.2, b=0.75,
                                   k=k, engine="auto"))
        trace["sql"] = "stark.bm25_top(skb_id, '*', query_and_expansions, k, 1.2, 0.75, 'auto')"
    else:
        vector = query_vector(query, expansions, o, skb_encoder(conn, skb, canonical_name(o.model)))
        trace["combine"], trace["query_weight"] = o.combine, o.query_weight
        if o.retriever == "vss":
            rows = list(sql().vss_top(conn, skb=skb, embedding=vector, k=k, model=model, exact=False))
            trace["sql"] = "stark.vss(skb, embedding_of_query_and_expansions, k, model)"
        else:
            h = HybridOptions()
            rows = list(sql().hybrid_top(conn, skb=skb, query=text, embedding=vector, k=k, fusion=h.fusion,
                                         weight=h.weight, pool=h.pool, rrf_k=h.rrf_k, model=model))
            trace["sql"] = "stark.hybrid(skb, query_and_expansions, embedding, k, 'rrf', 0.5, 100, 60, model)"
    trace["ms"] = round((time.perf_counter() - started) * 1000, 3)
    return [Hit(int(n), float(s)) for n, s in rows], trace


# ------------------------------------------------------------------------------------------------
# What prompts show: document structures and documents

@dataclass(frozen=True)
class Structure:
    """The SKB's document structures: node types with their fields, relations with the types they join."""

    types: tuple[tuple[str, int, tuple[str, ...]], ...]     # (type, nodes, text fields)
    relations: tuple[tuple[str, str, str], ...]             # (relation, head type, tail type)

    @property
    def type_names(self) -> set[str]:
        return {t for t, _, _ in self.types}

    def text(self, with_relations: bool = True) -> str:
        lines = ["Documents in the knowledge base (one per entity) look like:",
                 *(f"- {t}: name: ..., type: {t}" + "".join(f", {f}: ..." for f in fields)
                   for t, _, fields in self.types)]
        if with_relations and self.relations:
            seen, shown = set(), []
            for r, h, t in self.relations:
                if (r, t, h) not in seen:
                    seen.add((r, h, t))
                    shown.append(f"{r} ({h} - {t})")
            lines.append("Relations between entities: " + "; ".join(shown))
        return "\n".join(lines)


_STRUCTURES: dict[tuple, Structure] = {}


def structure(conn: psycopg.Connection, skb_id: int) -> Structure:
    """The structures of one SKB, read once per load (cached in-process by the SKB's load time)."""
    key = (conn.info.dsn, skb_id, sql().focus_skb_version(conn, skb_id=skb_id))
    if key not in _STRUCTURES:
        types = tuple((t, int(n), tuple(fields)) for t, n, fields in sql().expand_type_fields(conn, skb_id=skb_id))
        relations = tuple((r, h, t) for r, h, t, _ in sql().focus_relation_types(conn, skb_id=skb_id))
        _STRUCTURES[key] = Structure(types, relations)
    return _STRUCTURES[key]


@dataclass(frozen=True)
class Document:
    node_id: int
    name: str | None
    type: str
    text: str


def documents(conn: psycopg.Connection, skb: str, node_ids: list[int]) -> dict[int, Document]:
    rows = sql().expand_documents(conn, skb=skb, node_ids=list(node_ids))
    return {int(n): Document(int(n), name, type_, text or "") for n, name, type_, text in rows}


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters at a word boundary, an ellipsis marking the cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut + " ..."


def listing(docs: list[Document], doc_chars: int) -> str:
    return "\n".join(f"[{i}] {clip(d.text, doc_chars)}" for i, d in enumerate(docs, 1))


# ------------------------------------------------------------------------------------------------
# Lenient reply models (small models stray from the format)

def as_text(value) -> str:
    """A reply value as text: strings as they are, objects as 'key: value' lines, lists joined."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        return "\n".join(f"{k}: {as_text(v)}" for k, v in value.items() if as_text(v))
    if isinstance(value, (list, tuple)):
        return ", ".join(t for t in (as_text(v) for v in value) if t)
    if value is None:
        return ""
    return str(value)


class TextReply(BaseModel):
    """`{"document": "..."}`; a bare string, `{"text": ...}` or a document written as an object are accepted."""

    model_config = ConfigDict(extra="ignore")
    document: str

    @model_validator(mode="before")
    @classmethod
    def _lenient(cls, data):
        if isinstance(data, str):
            data = {"document": data}
        elif isinstance(data, dict) and "document" not in data:
            for key in ("text", "passage", "answer", "analysis"):
                if key in data:
                    data = {"document": data[key]}
                    break
            else:
                data = {"document": data}
        if isinstance(data, dict) and not isinstance(data.get("document"), str):
            data = {"document": as_text(data.get("document"))}
        if isinstance(data, dict) and not data["document"].strip():
            raise ValueError("the document is empty")
        return data


class TextsReply(BaseModel):
    """`{"<key>": ["...", ...]}` for the given key; a bare list or objects in the list are accepted."""

    model_config = ConfigDict(extra="ignore")
    items: list[str]

    @model_validator(mode="before")
    @classmethod
    def _lenient(cls, data):
        if isinstance(data, dict):
            lists = [v for v in data.values() if isinstance(v, list)]
            data = lists[0] if lists else [v for v in data.values() if isinstance(v, str)]
        if not isinstance(data, list):
            raise ValueError("expected a JSON list of texts")
        items = [t for t in (as_text(v) for v in data) if t]
        if not items:
            raise ValueError("the list is empty")
        return {"items": items}


def ask_text(client: LLMClient, prompt: str, max_tokens: int) -> str:
    value, _ = client.chat_json([{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                                TextReply, max_tokens=max_tokens)
    return value.document


def ask_texts(client: LLMClient, prompt: str, max_tokens: int) -> list[str]:
    value, _ = client.chat_json([{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                                TextsReply, max_tokens=max_tokens)
    return value.items


# ------------------------------------------------------------------------------------------------
# The run shared by every method

@dataclass
class Context:
    """What an expansion step gets: the connection, the SKB, the query, the LLM client (None for
    PRF), the options, and a trace/explanation to fill."""

    conn: psycopg.Connection
    skb: str
    skb_id: int
    query: str
    options: RetrieverOptions
    client: LLMClient | None
    trace: dict = field(default_factory=dict)
    explain: dict = field(default_factory=dict)

    def first_pass(self, n: int) -> list[Document]:
        """The plain retriever's top n documents for the query, in rank order (traced once)."""
        hits, step = retrieve(self.conn, self.skb, self.query, [], self.options, n)
        self.trace["first_pass"] = {"node_ids": [h.node_id for h in hits], **step}
        docs = documents(self.conn, self.skb, [h.node_id for h in hits])
        ordered = [docs[h.node_id] for h in hits if h.node_id in docs]
        self.explain["first pass"] = [f"{i}. {d.node_id} {d.name!r} ({d.type})" for i, d in enumerate(ordered, 1)]
        return ordered

    def structure(self) -> Structure:
        return structure(self.conn, self.skb_id)


Expander = Callable[[Context], list[str]]


def run(conn: psycopg.Connection, skb: str, query: str, k: int, o: RetrieverOptions, method: str,
        expander: Expander) -> Ranking:
    """Expand the query with `expander`, retrieve the query plus its expansions, trace both.

    An LLM reply that stays invalid after its repair (LLMInvalidOutput) makes the query fall back to
    the plain retriever, with `trace["fallback"]` saying why; a failed call (timeout, HTTP error, a
    cache miss under cache=only) raises, so an evaluation records the query as failed.
    """
    skb_id = require_skb(conn, skb)
    client = None
    if isinstance(o, LLMOptions):
        client = client_from_options(conn, llm=o.llm, base_url=o.base_url, cache=o.cache)
    ctx = Context(conn, skb, skb_id, query, o, client)
    ctx.trace.update({"method": method, "options": {key: value for key, value in asdict(o).items()
                                                    if key not in LLM_SETTINGS}})
    started = time.perf_counter()
    expansions: list[str] = []
    if client is None:
        expansions = expander(ctx)
    else:
        with client.metered() as meter:
            try:
                expansions = expander(ctx)
            except LLMInvalidOutput as exc:
                ctx.trace["fallback"] = f"plain {o.retriever}: {exc}"
        ctx.trace["llm"] = meter.as_dict()
    expanded_at = time.perf_counter()
    hits, step = retrieve(conn, skb, query, expansions, o, k)
    ctx.trace["expansions"] = expansions
    ctx.trace["final"] = step
    ctx.trace["ms"] = {"expand": round((expanded_at - started) * 1000, 3), "retrieve": step["ms"]}
    ctx.explain["expansions"] = ([f"{i}. {e}" for i, e in enumerate(expansions, 1)] if expansions else
                                 [f"none: {ctx.trace['fallback']}" if "fallback" in ctx.trace else "none"])
    if client is not None:
        llm = ctx.trace["llm"]
        ctx.explain["expansions"].append(f"LLM {llm['calls']} calls ({llm['cache_hits']} from cache), "
                                         f"{llm['seconds']} s")
    ctx.explain["retrieve"] = [f"{o.retriever} over the query and {len(expansions)} expansions "
                               f"({step['chars']} characters" + (f", vectors combined by {o.combine}"
                                                                 if o.retriever != "bm25" else "") + ")",
                               step["sql"]]
    ctx.trace["explain"] = ctx.explain
    return Ranking(hits, ctx.trace)
