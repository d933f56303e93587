"""The dense index of an SKB: embeddings of whole documents (VSS) and of chunks (multi-VSS), with HNSW.

Why it is built this way:
- One pair of tables per embedding model (a pgvector column has one dimension), created the first
  time a model is used and listed in `stark.embedding_model`; every SKB shares them, keyed by skb_id.
- Incremental: each vector is stored with the md5 of the text it embeds. A build asks PostgreSQL which
  documents (`stark.render_document`) and chunks (`stark.render_chunks`) have no vector or a different
  text, embeds only those, and deletes the vectors of nodes and chunks that are gone. A re-run on
  unchanged data embeds nothing and does not even load the model.
- Resumable: embedding goes in batches, each committed on its own, so an interrupted build keeps what
  it finished. Because of that, `build_dense` commits: call it outside a transaction of your own.
- The HNSW indexes are partial, one per (table, SKB), and created after the bulk embedding (building
  an index once is much faster than inserting thousands of vectors into one). A few changed vectors
  go into the existing index; when more than half of an SKB's vectors are to be (re)embedded, its
  index is dropped first and rebuilt at the end, since an HNSW graph that has had most of its
  vectors replaced answers worse than a fresh one (searches meanwhile are exact scans). Their names end in `__skb<id>`, so `stark.delete_skb_rows` (dropping or
  replacing an SKB) drops them along with the SKB's rows.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import sql as pgsql

from stark_pg import embed
from stark_pg.progress import NullReporter, Reporter, rate_text
from stark_pg.resources import queries, template_sections
from stark_pg.skb.catalog import require_skb
from stark_pg.skb.locks import skb_name_locked

BATCH_SIZE = 256          # documents embedded and committed together
CHUNK_NODE_BATCH = 32     # nodes whose chunks are embedded and committed together (about 200-300 chunks)


@dataclass(frozen=True)
class ModelTables:
    """A registered embedding model and the tables holding its vectors (in schema `stark`)."""

    model_id: int
    name: str
    dim: int
    doc_table: str
    chunk_table: str


def statement(name: str, model: ModelTables, **literals) -> pgsql.Composed:
    """A template section with the model's table names (and any literals, e.g. skb) filled in."""
    values = {"doc": pgsql.Identifier("stark", model.doc_table),
              "chunk": pgsql.Identifier("stark", model.chunk_table),
              "dim": pgsql.Literal(model.dim)}
    for key, value in literals.items():
        values[key] = value if isinstance(value, pgsql.Composable) else pgsql.Literal(value)
    return pgsql.SQL(template_sections("dense.sql")[name]).format(**values)


def hnsw_index_name(table: str, skb_id: int) -> str:
    return f"{table}_hnsw__skb{skb_id}"


@contextmanager
def _committed(conn: psycopg.Connection):
    """One unit of work that is committed when the block ends (rolled back if it fails)."""
    if conn.autocommit:
        with conn.transaction():
            yield
        return
    try:
        yield
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


def find_model(conn: psycopg.Connection, model: str | None = None) -> ModelTables | None:
    """The registered model of this name (canonical name: the default's aliases collapse), or None."""
    name = embed.canonical_name(model)
    row = queries().find_model(conn, name=name)
    return ModelTables(row[0], name, *row[1:]) if row else None


def ensure_model(conn: psycopg.Connection, model: str | None = None) -> ModelTables:
    """The model's registry row and vector tables, registering it (and loading it, for its dimension) if new."""
    found = find_model(conn, model)
    if found:
        return found
    name = embed.canonical_name(model)
    dim = embed.dimension(name)                   # load before locking: it can take seconds
    with _committed(conn):
        queries().lock_model(conn, name=name)
        row = queries().find_model(conn, name=name) or queries().register_model(conn, name=name, dim=dim)
        tables = ModelTables(row[0], name, *row[1:])
        conn.execute(statement("create_tables", tables))
    return tables


@dataclass(frozen=True)
class Encoding:
    """How texts are embedded: on which device (None: STARK_PG_DEVICE, else the best available), in half
    precision or not (on a GPU only), how many texts per forward pass. None of it changes which texts are
    embedded (so it is not stored with a build), only how fast. The device is resolved when the first text
    is embedded: a build with nothing to embed does not even import torch."""

    device: str | None = None
    half: bool = False
    batch: int = embed.DEFAULT_BATCH

    def __post_init__(self):
        embed.requested_device(self.device)        # a misspelt device fails before any work
        if self.batch < 1:
            raise ValueError(f"embedding batch size {self.batch}: must be at least 1")

    def describe(self) -> dict:
        device = embed.resolve_device(self.device)
        return {"device": device, "precision": "float16" if self.half and device != "cpu" else "float32",
                "batch": self.batch}


def build_dense(conn: psycopg.Connection, skb_name: str, model: str | None = None, with_relations: bool = True,
                multi_vector: bool = True, progress: Reporter | None = None, *, max_neighbors: int = 25,
                chunk_chars: int = 512, batch_size: int = BATCH_SIZE, m: int = 16,
                ef_construction: int = 64, device: str | None = None, half: bool = False,
                encode_batch: int = embed.DEFAULT_BATCH) -> dict:
    """Bring the SKB's document vectors (and chunk vectors, with `multi_vector`) up to date; build HNSW.

    `with_relations` and `max_neighbors` shape the documents (see stark.render_document) and the
    relation chunks; `chunk_chars` the length of field pieces. Changing any of them changes the texts,
    so the next build re-embeds what they affect. `batch_size` documents are committed together;
    `device`, `half` and `encode_batch` (texts per forward pass) only change the speed (`Encoding`).
    Returns counts per kind, the encoding used and the seconds taken.
    Holds the SKB name's lock throughout: builds and loads of one name queue.
    """
    encoding = Encoding(device, half, encode_batch)
    with skb_name_locked(conn, skb_name):
        return _build_dense(conn, skb_name, model, with_relations, multi_vector, progress, max_neighbors,
                            chunk_chars, batch_size, m, ef_construction, encoding)


def _build_dense(conn, skb_name, model, with_relations, multi_vector, progress, max_neighbors, chunk_chars,
                 batch_size, m, ef_construction, encoding: Encoding) -> dict:
    progress = progress or NullReporter()
    started = time.perf_counter()
    skb_id = require_skb(conn, skb_name)
    tables = ensure_model(conn, model)
    shape = {"skb_id": skb_id, "with_relations": with_relations, "max_neighbors": max_neighbors}

    documents = _refresh_documents(conn, tables, shape, batch_size, progress, encoding)
    chunks = {"embedded": 0, "deleted": 0}
    if multi_vector:
        chunks = _refresh_chunks(conn, tables, shape | {"chunk_chars": chunk_chars},
                                 max(1, batch_size // 8), progress, encoding)

    built = _build_indexes(conn, tables, skb_id, multi_vector, m, ef_construction, progress)
    with _committed(conn):
        changed = [t for t, c in ((tables.doc_table, documents), (tables.chunk_table, chunks))
                   if c["embedded"] or c["deleted"]]
        for table in changed:
            conn.execute(pgsql.SQL("analyze {}").format(pgsql.Identifier("stark", table)))
        n_docs, n_chunks = conn.execute(statement("count_vectors", tables), {"skb_id": skb_id}).fetchone()
        settings = {"with_relations": with_relations, "max_neighbors": max_neighbors, "chunk_chars": chunk_chars,
                    "multi_vector": multi_vector}
        queries().record_build(conn, skb_id=skb_id, model_id=tables.model_id, settings=json.dumps(settings),
                               documents=n_docs, chunks=n_chunks)
    documents |= {"skipped": n_docs - documents["embedded"], "total": n_docs}
    chunks |= {"skipped": n_chunks - chunks["embedded"], "total": n_chunks}
    return {"model": tables.name, "documents": documents, "chunks": chunks, "indexes_built": built,
            "encoding": encoding.describe() if documents["embedded"] or chunks["embedded"] else None,
            "seconds": round(time.perf_counter() - started, 3)}


def _refresh_documents(conn, tables: ModelTables, shape: dict, batch_size: int, progress: Reporter,
                       encoding: Encoding) -> dict:
    """Delete vectors of vanished nodes, then embed every stale document in committed batches."""
    with _committed(conn):
        deleted = conn.execute(statement("delete_gone_documents", tables), shape).rowcount
        stale = [row[0] for row in conn.execute(statement("stale_documents", tables), shape)]
    _drop_index_if_mostly_stale(conn, tables, tables.doc_table, shape["skb_id"], len(stale), "count_document_nodes")
    embedded = 0
    with progress.stage("documents", total=len(stale), unit="documents") as stage:
        for start in range(0, len(stale), batch_size):
            ids = stale[start:start + batch_size]
            with _committed(conn):
                rows = conn.execute(statement("render_documents", tables), shape | {"node_ids": ids}).fetchall()
                if rows:
                    vectors = _encode([r[1] for r in rows], tables, encoding)
                    conn.execute(statement("upsert_documents", tables),
                                 shape | {"node_ids": [r[0] for r in rows], "hashes": [r[2] for r in rows],
                                          "vecs": list(vectors)})
            embedded += len(rows)
            stage.advance(len(ids))
    return {"embedded": embedded, "deleted": deleted}


def _refresh_chunks(conn, tables: ModelTables, shape: dict, node_batch: int, progress: Reporter,
                    encoding: Encoding) -> dict:
    """Per batch of nodes with any new, changed or vanished chunk: embed what changed, delete what is gone."""
    with _committed(conn):
        stale = [row[0] for row in conn.execute(statement("stale_chunk_nodes", tables), shape)]
    _drop_index_if_mostly_stale(conn, tables, tables.chunk_table, shape["skb_id"], len(stale), "count_chunk_nodes")
    embedded = deleted = 0
    started = time.perf_counter()
    with progress.stage("chunks (nodes)", total=len(stale)) as stage:
        for start in range(0, len(stale), node_batch):
            ids = stale[start:start + node_batch]
            params = shape | {"node_ids": ids}
            with _committed(conn):
                rendered = conn.execute(statement("render_chunks", tables), params).fetchall()
                stored = {(n, c): (kind, h) for n, c, kind, h in
                          conn.execute(statement("stored_chunks", tables), params)}
                todo = [r for r in rendered if stored.get((r[0], r[1])) != (r[2], r[4])]
                gone = set(stored) - {(r[0], r[1]) for r in rendered}
                if todo:
                    vectors = _encode([r[3] for r in todo], tables, encoding)
                    conn.execute(statement("upsert_chunks", tables),
                                 shape | {"node_ids": [r[0] for r in todo], "chunk_nos": [r[1] for r in todo],
                                          "kinds": [r[2] for r in todo], "hashes": [r[4] for r in todo],
                                          "vecs": list(vectors)})
                if gone:
                    conn.execute(statement("delete_chunks", tables),
                                 shape | {"node_ids": [n for n, _ in gone], "chunk_nos": [c for _, c in gone]})
            embedded += len(todo)
            deleted += len(gone)
            stage.describe(rate_text(embedded / max(time.perf_counter() - started, 1e-9), "chunks"))
            stage.advance(len(ids))
    return {"embedded": embedded, "deleted": deleted}


def _drop_index_if_mostly_stale(conn, tables: ModelTables, table: str, skb_id: int, n_stale: int,
                                count_statement: str) -> None:
    """Drop the SKB's HNSW index on `table` when more than half of its nodes are about to be re-embedded."""
    if not n_stale:
        return
    with _committed(conn):
        n_nodes = conn.execute(statement(count_statement, tables), {"skb_id": skb_id}).fetchone()[0]
        if 2 * n_stale > n_nodes:
            conn.execute(pgsql.SQL("drop index if exists {}").format(
                pgsql.Identifier("stark", hnsw_index_name(table, skb_id))))


def _encode(texts: list[str], tables: ModelTables, encoding: Encoding = Encoding()):
    vectors = embed.encode(texts, tables.name, encoding.batch, device=encoding.device, half=encoding.half)
    if vectors.shape[1] != tables.dim:
        raise ValueError(f"model {tables.name!r} made {vectors.shape[1]}-dimensional vectors, but its tables hold "
                         f"{tables.dim} dimensions")
    return vectors


def _build_indexes(conn, tables: ModelTables, skb_id: int, multi_vector: bool, m: int, ef_construction: int,
                   progress: Reporter) -> list[str]:
    """The SKB's partial HNSW indexes (cosine) that do not exist yet; returns the names of those built."""
    wanted = [tables.doc_table] + ([tables.chunk_table] if multi_vector else [])
    existing = {row[0] for row in queries().existing_indexes(conn, names=[hnsw_index_name(t, skb_id)
                                                                            for t in wanted])}
    built = []
    with progress.stage("HNSW index", total=len(wanted)) as stage:
        for table in wanted:
            name = hnsw_index_name(table, skb_id)
            if name not in existing:
                with _committed(conn):
                    conn.execute(statement("create_hnsw_index", tables, index=pgsql.Identifier(name),
                                           table=pgsql.Identifier("stark", table), skb=skb_id, m=m,
                                           ef_construction=ef_construction))
                built.append(name)
            stage.advance()
    return built
