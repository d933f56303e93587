"""VSS: nodes ranked by the cosine similarity of their document embedding to the query's.

Python embeds the query (`stark_pg.embed.encode_query`, cached); PostgreSQL does the rest in
`stark.vss` (sql/functions/dense.sql): through the SKB's partial HNSW (or DiskANN) index, or an exact
scan of its vectors on request. Build the vectors first with `stark-pg index` (stark_pg.index.dense).
`ef_search` sets the index's candidate list for the search: `stark.ef_search` with SET LOCAL in the
search's transaction, which stark.vss turns into hnsw.ef_search (or diskann.query_search_list_size).

A model whose vectors were imported (`stark-pg import-embeddings`, e.g. STaRK's published ada-002
vectors) embeds nothing itself: a query of the SKB with an imported vector is searched with that
vector, matched by the query's exact text; any other query is embedded by the import's
`--query-model` if it named one (e.g. openai:text-embedding-ada-002), else it fails with
MissingQueryVector. An embedding API model (`openai:MODEL`) reports its requests in the trace's
`llm` entry, which evaluation summaries add up.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import psycopg

from stark_pg.db.settings import local_setting
from stark_pg.embed import canonical_name, encode_query, is_api_model, query_embeddings, skb_encoder
from stark_pg.options import MethodOptions
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Hit, Ranking


NEEDS = ()  # nothing beyond the SKB and its indexes


class MissingQueryVector(LookupError):
    """A query without an imported vector, searched with an imported model that has no query model."""


@dataclass
class Options(MethodOptions):
    model: str | None = None     # embedding model (default all-MiniLM-L6-v2, openai:MODEL, or an imported one); as indexed
    exact: bool = False          # scan every vector instead of the HNSW index (the ground truth, slower)
    ef_search: int | None = None  # the index's candidate list (hnsw.ef_search); default max(k, 100)
    LIMITS = {"ef_search": (1, 1000)}


@contextmanager
def ef_search_set(conn: psycopg.Connection, ef_search: int | None):
    """A transaction in which the dense SQL functions search their index with this candidate list
    (`SET LOCAL stark.ef_search`; they set hnsw.ef_search from it). None: their defaults, no transaction."""
    if ef_search is None:
        yield
        return
    with local_setting(conn, "stark.ef_search", str(int(ef_search))):
        yield


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    options = options or Options()
    model = canonical_name(options.model)
    with query_embeddings() as spent:
        vector, source, usage = query_vector(conn, skb, query, model)
    embedded = time.perf_counter()
    with ef_search_set(conn, options.ef_search):
        rows = list(sql().vss_top(conn, skb=skb, embedding=vector, k=k, model=model, exact=options.exact))
    hits = [Hit(int(node_id), float(score)) for node_id, score in rows]
    return Ranking(hits, {"method": "vss", "sql": "stark.vss(skb, embedding, k, model, exact)", "model": model,
                          "exact": options.exact, "ef_search": options.ef_search, "query_vector": source,
                          **({"llm": usage} if usage else {}),
                          **spent.trace(),
                          "sql_ms": round((time.perf_counter() - embedded) * 1000, 3)})


def query_vector(conn: psycopg.Connection, skb: str, query: str, model: str) -> tuple[np.ndarray, str, dict | None]:
    """The query's vector for `model`, where it came from ("imported", "embedded by MODEL", "embedded"),
    and the embedding API usage it cost (None for a local model or an imported vector)."""
    imported = sql().imported_query_vector(conn, skb=skb, model=model, query=query)
    embed_with = model
    if imported is not None:
        query_model, vector = imported
        if vector is not None:
            vector = vector.to_numpy() if hasattr(vector, "to_numpy") else vector
            return np.asarray(vector, dtype=np.float32), "imported", None
        if not query_model:
            raise MissingQueryVector(
                f"model {model!r} holds imported vectors and the query {query[:80]!r} has none (only queries of "
                f"SKB {skb!r} whose vectors were imported, matched by exact text, can be searched with it): import "
                f"the query vectors, or re-import with --query-model (e.g. openai:text-embedding-ada-002) to embed "
                f"other queries")
        embed_with = query_model
    if not is_api_model(embed_with):
        encoder = skb_encoder(conn, skb, embed_with)
        return encode_query(query, embed_with, encoder), "embedded" if embed_with == model else f"embedded by {embed_with}", None
    from stark_pg.llm.embeddings import metered

    with metered(embed_with) as meter:
        vector = encode_query(query, embed_with)
    return vector, "embedded" if embed_with == model else f"embedded by {embed_with}", meter.as_dict()
