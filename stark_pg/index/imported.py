"""Vectors computed elsewhere, stored as an embedding model: STaRK's published embeddings.

STaRK publishes, per dataset, the text-embedding-ada-002 vectors (1536 dimensions) of every node's
document (`candidate_emb_dict.pt`) and of every query (`query_emb_dict.pt`): what its own VSS rows
were computed from. Both are what `torch.save` writes for a dict of id -> float tensor, of shape
(dim,) or (1, dim) (STaRK's scripts have written both), keyed by node id and query id, the ids
stark-pg keeps when it loads STaRK. `import_embeddings` reads them through torch's restricted
unpickler (loaders.safe_pickle.load_tensor: a tampered file cannot run code) and stores them as a
model of their own (stark.embedding_model: one vector table, an HNSW index per SKB), so that
`vss -o model=NAME` reproduces STaRK's VSS without an API key: document vectors are the file's;
a query of the SKB with an imported vector is searched with it (matched by its text,
stark_pg/retrieve/vss.py), any other query by the import's `query_model` if one was named, else it
fails clearly.

The whole import is one transaction: a bad file (not a dict of tensors, mixed or wrong dimensions,
ids that are not the SKB's) or any failure leaves the database as it was. Importing again under
the same name replaces the SKB's vectors of that model. The build record carries
`{"imported": {...}}`: `stark-pg index` refuses to compute vectors into an imported model, and a
replacing load only drops the vectors of vanished nodes and rebuilds the index (`reindex_imported`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql as pgsql

from stark_pg import embed
from stark_pg.index.dense import IndexSettings, ModelTables, _build_indexes, statement
from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries
from stark_pg.skb.catalog import require_skb
from stark_pg.skb.locks import skb_name_locked
from stark_pg.skb.records import LoadError

DEFAULT_NAME = "stark-ada-002"
BATCH = 2000          # vectors per insert statement
_SHOWN = 5            # unknown ids quoted in an error


def read_vectors(path: Path, progress: Reporter | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) of a STaRK embedding file: int64 ids and a float32 matrix, one row per id; a
    LoadError naming the file (and the key) for anything else."""
    from loaders.safe_pickle import load_tensor
    import torch

    progress = progress or NullReporter()
    label = str(path)
    data = load_tensor(Path(path), label)
    if not isinstance(data, dict):
        raise LoadError(f"expected a dict of id -> tensor (what STaRK's torch.save writes), found {type(data).__name__}",
                        label)
    if not data:
        raise LoadError("holds no vectors (an empty dict)", label)
    ids = np.empty(len(data), dtype=np.int64)
    matrix = None
    with progress.stage(f"reading {Path(path).name}", total=len(data), unit="vectors") as stage:
        for row, (key, value) in enumerate(data.items()):
            ids[row] = _id(key, label)
            if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                raise LoadError(f"key {key!r}: expected a float tensor, found "
                                f"{type(value).__name__}{'' if not isinstance(value, torch.Tensor) else ' ' + str(value.dtype)}",
                                label)
            if value.dim() not in (1, 2) or (value.dim() == 2 and value.shape[0] != 1) or value.numel() == 0:
                raise LoadError(f"key {key!r}: a vector has shape (dim,) or (1, dim), not {tuple(value.shape)}", label)
            vector = value.detach().reshape(-1).to(torch.float32).numpy()
            if matrix is None:
                matrix = np.empty((len(data), vector.size), dtype=np.float32)
            elif vector.size != matrix.shape[1]:
                raise LoadError(f"key {key!r} has {vector.size} dimensions, the first key {_id(next(iter(data)), label)} "
                                f"has {matrix.shape[1]}: all vectors of a file must have one dimension", label)
            if not np.isfinite(vector).all():
                raise LoadError(f"key {key!r}: the vector holds NaN or infinite values", label)
            matrix[row] = vector
            if row % 1000 == 999:
                stage.advance(1000)
        stage.advance(len(data) % 1000)
    if len(np.unique(ids)) != len(ids):
        raise LoadError("holds the same id twice (as an int and as a tensor)", label)
    return ids, matrix


def _id(key, label: str) -> int:
    import torch

    if isinstance(key, torch.Tensor) and key.dim() == 0 and not key.is_floating_point() and key.dtype != torch.bool:
        key = key.item()
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        return int(key)
    raise LoadError(f"key {key!r} is not an integer id (STaRK's files are keyed by node id or query id)", label)


def import_embeddings(conn: psycopg.Connection, skb_name: str, candidates: Path, queries_file: Path | None = None,
                      name: str = DEFAULT_NAME, *, query_model: str | None = None, skip_unknown: bool = False,
                      progress: Reporter | None = None) -> dict:
    """Store the files' vectors as model `name` for the SKB, with an HNSW index (see the module's doc).

    `skip_unknown` imports the vectors of the SKB's nodes and queries and leaves the others out
    (a slice of a STaRK dataset, whose files cover the whole of it); without it an id that is not
    the SKB's fails the import. Returns counts, the model's dimension and the seconds taken.
    """
    progress = progress or NullReporter()
    started = time.perf_counter()
    name = _checked_name(name)
    if query_model is not None and not query_model.strip():
        raise LoadError("--query-model is empty: name a model (e.g. openai:text-embedding-ada-002) or leave it out")
    skb_id = require_skb(conn, skb_name)
    node_ids, doc_vectors = read_vectors(candidates, progress)
    query_ids = query_vectors = None
    if queries_file is not None:
        query_ids, query_vectors = read_vectors(queries_file, progress)
        if query_vectors.shape[1] != doc_vectors.shape[1]:
            raise LoadError(f"{query_vectors.shape[1]}-dimensional query vectors, but {candidates} holds "
                            f"{doc_vectors.shape[1]}-dimensional ones: both files must come from one model",
                            str(queries_file))
    dim = doc_vectors.shape[1]
    skipped = {"nodes": 0, "queries": 0}
    with skb_name_locked(conn, skb_name), conn.transaction():
        node_ids, doc_vectors, skipped["nodes"] = _known(
            node_ids, doc_vectors, {r[0] for r in queries().known_node_ids(conn, skb_id=skb_id, node_ids=node_ids.tolist())},
            "node", skb_name, candidates, skip_unknown)
        if query_ids is not None:
            query_ids, query_vectors, skipped["queries"] = _known(
                query_ids, query_vectors,
                {r[0] for r in queries().known_query_ids(conn, skb_id=skb_id, query_ids=query_ids.tolist())},
                "query", skb_name, queries_file, skip_unknown)
        tables = _register(conn, name, dim, skb_name, candidates)
        conn.execute(statement("delete_skb_documents", tables), {"skb_id": skb_id})
        queries().delete_query_vectors(conn, skb_id=skb_id, model=name)
        for method in ("hnsw", "diskann"):
            conn.execute(pgsql.SQL("drop index if exists {}").format(
                pgsql.Identifier("stark", f"{tables.doc_table}_{method}__skb{skb_id}")))
        with progress.stage("document vectors", total=len(node_ids), unit="vectors") as stage:
            for start in range(0, len(node_ids), BATCH):
                ids = node_ids[start:start + BATCH]
                conn.execute(statement("upsert_documents", tables),
                             {"skb_id": skb_id, "node_ids": ids.tolist(), "hashes": ["imported"] * len(ids),
                              "vecs": list(doc_vectors[start:start + BATCH])})
                stage.advance(len(ids))
        if query_ids is not None:
            with progress.stage("query vectors", total=len(query_ids), unit="vectors") as stage:
                for start in range(0, len(query_ids), BATCH):
                    ids = query_ids[start:start + BATCH]
                    queries().import_query_vectors(conn, skb_id=skb_id, model=name, query_ids=ids.tolist(),
                                                   vecs=list(query_vectors[start:start + BATCH]))
                    stage.advance(len(ids))
        settings = IndexSettings()
        built = _build_indexes(conn, tables, skb_id, False, settings, progress)
        conn.execute(pgsql.SQL("analyze {}").format(pgsql.Identifier("stark", tables.doc_table)))
        imported = {"candidates": str(Path(candidates).resolve()),
                    "queries": str(Path(queries_file).resolve()) if queries_file else None,
                    "query_model": query_model}
        queries().record_build(conn, skb_id=skb_id, model_id=tables.model_id, documents=len(node_ids), chunks=0,
                               settings=json.dumps({"imported": imported, "multi_vector": False} | asdict(settings)))
        n_nodes, n_queries, with_vector = queries().vector_coverage(conn, skb_id=skb_id, model=name)
    return {"skb": skb_name, "model": name, "dim": dim, "documents": len(node_ids),
            "queries": 0 if query_ids is None else len(query_ids), "skipped_unknown": skipped,
            "nodes_without_vector": n_nodes - len(node_ids), "queries_without_vector": n_queries - with_vector,
            "query_model": query_model, "indexes_built": built, "seconds": round(time.perf_counter() - started, 3)}


def _checked_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise LoadError("--name is empty: name the imported model (e.g. stark-ada-002)")
    if embed.canonical_name(name) == embed.DEFAULT_MODEL or embed.is_api_model(name):
        raise LoadError(f"--name {name!r} is a model stark-pg computes vectors with: imported vectors need a name "
                        f"of their own (e.g. {DEFAULT_NAME})")
    return name


def _known(ids: np.ndarray, vectors: np.ndarray, known: set[int], what: str, skb_name: str, path: Path,
           skip_unknown: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """The ids (and their vectors) that are the SKB's; the others fail the import unless skipped."""
    keep = np.fromiter((i in known for i in ids.tolist()), dtype=bool, count=len(ids))
    unknown = int((~keep).sum())
    if unknown and not skip_unknown:
        shown = ", ".join(str(i) for i in ids[~keep][:_SHOWN].tolist())
        raise LoadError(f"{unknown:,} of {len(ids):,} {what} ids are not {what} ids of SKB {skb_name!r} (e.g. {shown}): "
                        f"is this the right SKB and file? --skip-unknown imports the rest", str(path))
    if not keep.any():
        raise LoadError(f"none of its {len(ids):,} {what} ids is a {what} id of SKB {skb_name!r}", str(path))
    return ids[keep], vectors[keep], unknown


def _register(conn: psycopg.Connection, name: str, dim: int, skb_name: str, path: Path) -> ModelTables:
    """The model's registry row and tables (created if new); an existing model must be an imported one of
    this dimension (a model whose vectors `stark-pg index` computed is never overwritten)."""
    queries().lock_model(conn, name=name)
    row = queries().find_model(conn, name=name)
    if row:
        tables = ModelTables(row[0], name, *row[1:])
        if tables.dim != dim:
            raise LoadError(f"{dim}-dimensional vectors, but model {name!r} already holds {tables.dim}-dimensional "
                            f"ones: import under another --name", str(path))
        computed = [skb for skb, settings in queries().model_builds(conn, model_id=tables.model_id)
                    if not (settings or {}).get("imported")]
        if computed:
            raise LoadError(f"model {name!r} holds vectors stark-pg computed (`stark-pg index` of "
                            f"{', '.join(sorted(computed))}): import under another --name")
        return tables
    row = queries().register_model(conn, name=name, dim=dim)
    tables = ModelTables(row[0], name, *row[1:])
    conn.execute(statement("create_tables", tables))
    return tables


def reindex_imported(conn: psycopg.Connection, skb_name: str, model: str, progress: Reporter | None = None) -> dict:
    """After a replacing load: drop the vectors of nodes that are gone and rebuild the SKB's index (the
    vectors of changed nodes stay as imported: there is nothing to recompute them with)."""
    skb_id = require_skb(conn, skb_name)
    row = queries().find_model(conn, name=model)
    tables = ModelTables(row[0], model, *row[1:])
    stored = queries().build_settings(conn, skb_id=skb_id, model_id=tables.model_id) or {}
    with conn.transaction():
        deleted = conn.execute(statement("delete_gone_documents", tables), {"skb_id": skb_id}).rowcount
    settings = IndexSettings.resolve(stored)
    built = _build_indexes(conn, tables, skb_id, False, settings, progress or NullReporter())
    with conn.transaction():
        documents = conn.execute(statement("count_document_nodes", tables), {"skb_id": skb_id}).fetchone()[0]
        queries().record_build(conn, skb_id=skb_id, model_id=tables.model_id, settings=json.dumps(stored),
                               documents=documents, chunks=0)
    return {"model": model, "imported": True, "documents": {"deleted": deleted, "total": documents},
            "indexes_built": built}
