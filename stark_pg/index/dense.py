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
- The vector indexes are partial, one per (table, SKB), and created after the bulk embedding (building
  an index once is much faster than inserting thousands of vectors into one). A few changed vectors
  go into the existing index; when more than half of an SKB's vectors are to be (re)embedded, its
  index is dropped first and rebuilt at the end, since an HNSW graph that has had most of its
  vectors replaced answers worse than a fresh one (searches meanwhile are exact scans). Their names end in `__skb<id>`, so `stark.delete_skb_rows` (dropping or
  replacing an SKB) drops them along with the SKB's rows.
- Index settings (`IndexSettings`: HNSW or pgvectorscale's DiskANN, vector or halfvec storage, HNSW's m
  and ef_construction) are stored with the build (stark.embedding_build.settings); a build that is not
  given them reuses the last ones (a plain re-run, a refresh after a replacing load), and an index
  whose method, storage or settings differ from the wanted ones is dropped and rebuilt.
- The encoder (torch, or a compiled ONNX graph through ONNX Runtime or OpenVINO, optionally int8:
  `stark-pg index --backend --quantize`) is recorded with the build (settings -> 'encoder'), and the
  SKB's queries are embedded with it. Not given, a build reuses the last one's; a first build takes
  "auto" (onnx on the CPU). A build with another encoder than the last deletes the SKB's vectors of
  the model and embeds them all again: its texts are unchanged, so their md5 alone would keep the old
  encoder's vectors.
- Partial indexes per SKB rather than one index per table filtered by skb_id with pgvector 0.8's
  iterative scans: measured in benchmarks/vector_benchmark.py (README: Vector indexes).
- Who computes the vectors is the executor's business (stark_pg/embed/executor.py): this process, or a
  pool of Ray workers (`Encoding.ray`, `stark-pg index --executor ray`). The build reads each batch's
  texts in a transaction, hands them over, and writes each batch's vectors in a transaction of their
  own as they come back, so which documents are stale, what is stored and how a build resumes do not
  depend on where the vectors were computed.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace

import psycopg
from psycopg import sql as pgsql

from stark_pg import embed
from stark_pg.embed.executor import LocalExecutor
from stark_pg.embed.ray_executor import RayOptions
from stark_pg.options import OptionError
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


def vector_index_name(table: str, skb_id: int, method: str = "hnsw") -> str:
    """`<table>_hnsw__skb<id>` or `<table>_diskann__skb<id>` (stark.vector_index looks for both)."""
    return f"{table}_{method}__skb{skb_id}"


VECTOR_INDEXES = ("hnsw", "diskann")
# DiskANN's build settings: pgvectorscale's own defaults, written out so that the template states them
# (a build over millions of vectors with them is slow on few cores: docs/search.md).
DISKANN_BUILD = {"num_neighbors": 50, "search_list_size": 100}
STORAGES = ("vector", "halfvec")


@dataclass(frozen=True)
class IndexSettings:
    """How an SKB's vectors are indexed: `stark-pg index --vector-index --storage --hnsw-m --hnsw-ef-construction`.

    index: 'hnsw' (pgvector) or 'diskann' (pgvectorscale; its own defaults, m and ef_construction unused).
    storage: 'vector' (single precision) or 'halfvec' (the HNSW index holds half-precision copies of
    the vectors, half the size; the table keeps single precision, so scores stay exact).
    m, ef_construction: HNSW's graph degree and build candidate list (pgvector: m 2-100,
    ef_construction 4-1000 and at least 2 * m).
    """

    index: str = "hnsw"
    storage: str = "vector"
    m: int = 16
    ef_construction: int = 64

    def checked(self) -> "IndexSettings":
        if self.index not in VECTOR_INDEXES:
            raise OptionError(f"vector index {self.index!r}: expected one of {', '.join(VECTOR_INDEXES)}")
        if self.storage not in STORAGES:
            raise OptionError(f"storage {self.storage!r}: expected one of {', '.join(STORAGES)}")
        if self.index == "diskann" and self.storage == "halfvec":
            raise OptionError("storage halfvec: DiskANN indexes single-precision vectors only "
                              "(it compresses them itself); use --vector-index hnsw or --storage vector")
        for name, low, high in (("m", 2, 100), ("ef_construction", 4, 1000)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise OptionError(f"HNSW {name} {value!r}: must be an integer from {low} to {high}")
        if self.ef_construction < 2 * self.m:
            raise OptionError(f"HNSW ef_construction {self.ef_construction} must be at least 2 * m ({2 * self.m})")
        return self

    @classmethod
    def resolve(cls, stored: dict | None, **given) -> "IndexSettings":
        """The given settings, the rest from the last build's (`stored`), the rest defaults; checked."""
        stored = stored or {}
        values = {f.name: given[f.name] if given.get(f.name) is not None else stored.get(f.name, f.default)
                  for f in fields(cls)}
        if given.get("index") == "diskann" and given.get("storage") is None:
            values["storage"] = "vector"              # a halfvec HNSW before: DiskANN takes single precision
        if given.get("m") is not None and given.get("ef_construction") is None and isinstance(values["m"], int):
            values["ef_construction"] = max(values["ef_construction"], 2 * values["m"])   # a larger m alone
        return cls(**values).checked()


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
    precision or not (on a GPU only), how many texts per forward pass, and by which encoder (backend and
    int8 or not; None until the build resolves it against the SKB's last build). Device, precision and
    batch change only the speed and are not stored; the encoder changes the vectors and is stored with the
    build. The device is resolved when the first text is embedded: a build with nothing to embed does not
    even import torch."""

    device: str | None = None
    half: bool = False
    batch: int = embed.DEFAULT_BATCH
    encoder: embed.Encoder | None = None
    ray: RayOptions | None = None         # embed on a Ray cluster's workers rather than here

    def __post_init__(self):
        embed.requested_device(self.device)        # a misspelt device fails before any work
        if self.batch < 1:
            raise ValueError(f"embedding batch size {self.batch}: must be at least 1")

    def describe(self, executor=None) -> dict:
        if executor is not None and executor.name == "ray":
            encoder = self.encoder or embed.Encoder()
            precision = "int8" if encoder.quantize else "float16" if self.half and executor.gpus else "float32"
            return {"device": executor.device, "backend": encoder.backend, "precision": precision,
                    "batch": self.batch} | executor.describe()
        device = embed.resolve_device(self.device)
        encoder = self.encoder or embed.Encoder()
        precision = "int8" if encoder.quantize else "float16" if self.half and device != "cpu" else "float32"
        return {"device": device, "backend": encoder.backend, "precision": precision, "batch": self.batch}


def build_dense(conn: psycopg.Connection, skb_name: str, model: str | None = None, with_relations: bool = True,
                multi_vector: bool | None = True, progress: Reporter | None = None, *, max_neighbors: int = 25,
                chunk_chars: int = 512, batch_size: int = BATCH_SIZE, m: int | None = None,
                ef_construction: int | None = None, index: str | None = None, storage: str | None = None,
                device: str | None = None, half: bool = False, encode_batch: int = embed.DEFAULT_BATCH,
                backend: str | None = None, quantize: bool | None = None, ray: RayOptions | None = None) -> dict:
    """Bring the SKB's document vectors (and chunk vectors, with `multi_vector`) up to date; build HNSW.

    `with_relations` and `max_neighbors` shape the documents (see stark.render_document) and the
    relation chunks; `chunk_chars` the length of field pieces. Changing any of them changes the texts,
    so the next build re-embeds what they affect. `index`, `storage`, `m` and `ef_construction` shape
    the vector indexes (IndexSettings; None: as the last build of this SKB and model, else defaults);
    bad values raise OptionError before any vector is embedded. `batch_size` documents are committed
    together; `device`, `half` and `encode_batch` (texts per forward pass) only change the speed
    (`Encoding`); `backend` (auto, torch, onnx, openvino) and `quantize` (int8) choose the encoder (None:
    as the last build, else auto), which is recorded. `ray` (RayOptions): embed on a Ray cluster's workers
    instead of in this process (stark_pg/embed/ray_executor.py), a local model only. Returns counts per kind, the encoding used, the index settings, notices (e.g. DiskANN
    asked for where vectorscale is missing) and the seconds taken.
    Holds the SKB name's lock throughout: builds and loads of one name queue.
    """
    encoding = Encoding(device, half, encode_batch, ray=ray)
    embed.check_backend(backend)                   # a misspelt backend fails before any work
    if embed.is_api_model(model) and (backend not in (None, "auto") or quantize):
        raise embed.EncoderError(f"--backend and --quantize are for local models; {model!r} is embedded by its API")
    if embed.is_api_model(model) and ray is not None:
        raise embed.EncoderError(f"--executor ray runs local models on a cluster; {model!r} is embedded by its API "
                                 "(--workers sends it requests at once)")
    given_encoder = {"backend": backend, "quantize": quantize}
    with skb_name_locked(conn, skb_name), embedding_api_metered(conn, model) as meter:
        report = _build_dense(conn, skb_name, model, with_relations, multi_vector, progress, max_neighbors,
                              chunk_chars, batch_size, dict(index=index, storage=storage, m=m,
                                                            ef_construction=ef_construction), encoding,
                              given_encoder)
    if meter is not None:
        report["embedding_api"] = meter.as_dict()
        if report["encoding"]:
            report["encoding"] = {"api": embedding_api_server(model), "batch": encoding.batch}
    return report


@contextmanager
def embedding_api_metered(conn: psycopg.Connection, model: str | None):
    """For an embedding API model (`openai:MODEL`): its requests cached in `conn`'s database and counted
    by the Meter yielded; for a local model, nothing (None)."""
    if not embed.is_api_model(model):
        yield None
        return
    from stark_pg.llm import embeddings

    with embeddings.cache_in(conn), embeddings.metered(model) as meter:
        yield meter


def embedding_api_server(model: str) -> str:
    from stark_pg.llm import embeddings

    return embeddings.settings_for(model).base_url or "api.openai.com"


def _build_dense(conn, skb_name, model, with_relations, multi_vector, progress, max_neighbors, chunk_chars,
                 batch_size, given: dict, encoding: Encoding, given_encoder: dict | None = None) -> dict:
    progress = progress or NullReporter()
    started = time.perf_counter()
    skb_id = require_skb(conn, skb_name)
    found = find_model(conn, model)
    stored = queries().build_settings(conn, skb_id=skb_id, model_id=found.model_id) if found else None
    if stored and stored.get("imported"):
        raise OptionError(f"model {found.name!r} holds vectors imported into {skb_name!r} (stark-pg import-embeddings), "
                          "not ones stark-pg computes: import again to change them, or index with another --model")
    tables = found or ensure_model(conn, model)
    if multi_vector is None:          # as the last build of this SKB with this model, else documents only
        multi_vector = bool(stored and stored.get("multi_vector"))
    wanted = IndexSettings.resolve(stored, **given)
    notices = []
    if wanted.index == "diskann" and not _vectorscale_ready(conn):
        notices.append("vectorscale (pgvectorscale) is not available on this server: built HNSW instead of DiskANN")
        wanted = replace(wanted, index="hnsw")
    shape = {"skb_id": skb_id, "with_relations": with_relations, "max_neighbors": max_neighbors}
    with _executor(tables, encoding, progress) as executor:
        return _build_with(conn, tables, skb_id, model, stored, multi_vector, wanted, notices, shape, chunk_chars,
                           batch_size, progress, encoding, given_encoder or {}, executor, started)


@contextmanager
def _executor(tables: ModelTables, encoding: Encoding, progress: Reporter):
    """The executor that computes this build's vectors (its encoder is set once the build has chosen it)."""
    if encoding.ray is None:
        executor = LocalExecutor(tables.name, encoding.batch, device=encoding.device, half=encoding.half)
    else:
        from stark_pg.embed.ray_executor import RayExecutor

        executor = RayExecutor(encoding.ray, tables.name, encoding.batch, half=encoding.half, progress=progress)
    try:
        yield executor
    finally:
        executor.close()


def _build_with(conn, tables, skb_id, model, stored, multi_vector, wanted, notices, shape, chunk_chars, batch_size,
                progress, encoding, given_encoder, executor, started) -> dict:
    encoding, notice = _choose_encoder(conn, tables, skb_id, model, stored, encoding, given_encoder, executor)
    executor.encoder = encoding.encoder
    notices += [notice] if notice else []

    documents = _refresh_documents(conn, tables, shape, batch_size, progress, executor)
    chunks = {"embedded": 0, "deleted": 0}
    if multi_vector:
        chunks = _refresh_chunks(conn, tables, shape | {"chunk_chars": chunk_chars},
                                 max(1, batch_size // 8), progress, executor)

    built = _build_indexes(conn, tables, skb_id, multi_vector, wanted, progress)
    with _committed(conn):
        changed = [t for t, c in ((tables.doc_table, documents), (tables.chunk_table, chunks))
                   if c["embedded"] or c["deleted"]]
        for table in changed:
            conn.execute(pgsql.SQL("analyze {}").format(pgsql.Identifier("stark", table)))
        n_docs, n_chunks = conn.execute(statement("count_vectors", tables), {"skb_id": skb_id}).fetchone()
        settings = {"with_relations": shape["with_relations"], "max_neighbors": shape["max_neighbors"],
                    "chunk_chars": chunk_chars,
                    "multi_vector": multi_vector} | asdict(wanted)
        if encoding.encoder is not None:
            settings["encoder"] = encoding.encoder.as_dict()
        queries().record_build(conn, skb_id=skb_id, model_id=tables.model_id, settings=json.dumps(settings),
                               documents=n_docs, chunks=n_chunks)
    documents |= {"skipped": n_docs - documents["embedded"], "total": n_docs}
    chunks |= {"skipped": n_chunks - chunks["embedded"], "total": n_chunks}
    return {"model": tables.name, "documents": documents, "chunks": chunks, "indexes_built": built,
            "encoding": encoding.describe(executor) if documents["embedded"] or chunks["embedded"] else None,
            "index": asdict(wanted), "notices": notices, "seconds": round(time.perf_counter() - started, 3)}


def _choose_encoder(conn, tables: ModelTables, skb_id: int, model: str | None, stored: dict | None,
                    encoding: Encoding, given: dict, executor=None) -> tuple[Encoding, str | None]:
    """The encoding with the build's encoder resolved (given, else the last build's, else auto); when it
    differs from the last build's, the SKB's vectors of the model are deleted (all are embedded again)
    and the new encoder recorded at once. An API model has no encoder (None). On a Ray cluster the
    encoder is chosen for the workers' device, not this machine's: auto is onnx on CPU workers and torch
    on GPU workers."""
    if embed.is_api_model(model):
        return encoding, None
    previous = embed.Encoder.from_record(stored.get("encoder")) if stored else None
    backend, device = given.get("backend"), encoding.device
    if executor is not None and executor.name == "ray":
        device = "cpu"                       # resolved for the workers, whatever this machine has
        if executor.device != "cpu":
            if backend not in (None, "auto", "torch"):
                raise embed.EncoderError(f"embedding backend {backend!r} runs on the CPU; the Ray workers embed on "
                                         "GPUs: use --backend torch, or --gpus-per-worker 0")
            backend = "torch"
    encoder = embed.resolve_encoder(backend, given.get("quantize"), device, previous)
    notice = None
    if previous is not None and encoder != previous:
        with _committed(conn):
            deleted = conn.execute(statement("delete_skb_documents", tables), {"skb_id": skb_id}).rowcount
            deleted += conn.execute(statement("delete_skb_chunks", tables), {"skb_id": skb_id}).rowcount
            queries().set_build_encoder(conn, skb_id=skb_id, model_id=tables.model_id,
                                        encoder=json.dumps(encoder.as_dict()))
        if deleted:
            notice = (f"encoder changed from {previous.label} to {encoder.label}: {deleted} vectors of "
                      f"{tables.name!r} deleted and embedded again")
    return replace(encoding, encoder=encoder), notice


def plan_dense(conn: psycopg.Connection, skb_name: str, model: str | None = None, multi_vector: bool | None = None,
               *, with_relations: bool = True, max_neighbors: int = 25, chunk_chars: int = 512,
               device: str | None = None, half: bool = False, encode_batch: int = embed.DEFAULT_BATCH,
               sample: int = 32, backend: str | None = None, quantize: bool | None = None) -> dict:
    """What `build_dense` would embed, without embedding or writing anything (`stark-pg index --dry-run`):
    the documents and multi-vector chunks there are and how many are new or changed, and an estimate of
    the time to embed them, from embedding a sample of `sample` texts of each kind here and now (a local
    model only: an API's time and price are not guessed). Chunks are counted whether or not this build
    would embed them (`multi_vector`, None: as the last build), so that the cost of asking is known."""
    skb_id = require_skb(conn, skb_name)
    found = find_model(conn, model)
    stored = queries().build_settings(conn, skb_id=skb_id, model_id=found.model_id) if found else None
    if multi_vector is None:
        multi_vector = bool(stored and stored.get("multi_vector"))
    shape = {"skb_id": skb_id, "with_relations": with_relations, "max_neighbors": max_neighbors,
             "chunk_chars": chunk_chars}
    with _committed(conn):
        nodes = queries().plan_node_count(conn, skb_id=skb_id)
        if found:
            stale_docs = [row[0] for row in conn.execute(statement("stale_documents", found), shape)]
            chunks, chunks_new = conn.execute(statement("count_chunks_to_embed", found), shape).fetchone()
        else:
            stale_docs = [row[0] for row in queries().plan_all_nodes(conn, skb_id=skb_id)]
            chunks = chunks_new = queries().plan_chunk_count(conn, skb_id=skb_id, with_relations=with_relations,
                                                             max_neighbors=max_neighbors, chunk_chars=chunk_chars)
        sampled_nodes = [row[0] for row in queries().plan_sample_nodes(conn, skb_id=skb_id, sample=sample)]
        documents_sample = [row[0] for row in queries().plan_sample_documents(
            conn, skb_id=skb_id, node_ids=sampled_nodes, with_relations=with_relations,
            max_neighbors=max_neighbors) if row[0]]
        chunks_sample = [row[0] for row in queries().plan_sample_chunks(
            conn, skb_id=skb_id, node_ids=sampled_nodes, with_relations=with_relations, max_neighbors=max_neighbors,
            chunk_chars=chunk_chars, n=sample)]
    plan = {"skb": skb_name, "model": found.name if found else embed.canonical_name(model), "multi_vector": multi_vector,
            "documents": {"total": nodes, "to_embed": len(stale_docs)},
            "chunks": {"total": chunks, "to_embed": chunks_new}, "estimate": None}
    if embed.is_api_model(model) or not (documents_sample or chunks_sample):
        return plan
    previous = embed.Encoder.from_record(stored.get("encoder")) if stored else None
    encoder = embed.resolve_encoder(backend, quantize, device, previous)
    if previous is not None and encoder != previous:        # every vector would be embedded again
        plan["documents"]["to_embed"], plan["chunks"]["to_embed"] = nodes, chunks
    encoding = Encoding(device, half, encode_batch, encoder)
    name = plan["model"]
    embed.encode((documents_sample or chunks_sample)[:1], name, 1, device=device, half=half, role="document",
                 encoder=encoder)  # load
    per_text = {}
    for kind, texts in (("documents", documents_sample), ("chunks", chunks_sample)):
        started = time.perf_counter()
        if texts:
            embed.encode(texts, name, encoding.batch, device=device, half=half, role="document", encoder=encoder)
        per_text[kind] = (time.perf_counter() - started) / max(len(texts), 1)
    plan["estimate"] = {
        "documents_seconds": round(per_text["documents"] * plan["documents"]["to_embed"], 1),
        "chunks_seconds": round(per_text["chunks"] * plan["chunks"]["to_embed"], 1),
        "sample": {"documents": len(documents_sample), "chunks": len(chunks_sample)},
        "encoding": encoding.describe(),
    }
    return plan


def _vectorscale_ready(conn) -> bool:
    """Whether DiskANN can be built here: pgvectorscale created in this database, or created now."""
    from stark_pg.db.extensions import extensions

    (ext,) = extensions(conn, ("vectorscale",))
    if ext.installed:
        return True
    if not ext.usable:
        return False
    try:
        with _committed(conn):
            conn.execute("create extension if not exists vectorscale cascade")
    except psycopg.Error:
        return False
    return True


def _refresh_documents(conn, tables: ModelTables, shape: dict, batch_size: int, progress: Reporter,
                       executor) -> dict:
    """Delete vectors of vanished nodes, then embed every stale document in committed batches: each batch's
    texts are read in one transaction and its vectors written in another, when the executor returns them."""
    with _committed(conn):
        deleted = conn.execute(statement("delete_gone_documents", tables), shape).rowcount
        stale = [row[0] for row in conn.execute(statement("stale_documents", tables), shape)]
    _drop_index_if_mostly_stale(conn, tables, tables.doc_table, shape["skb_id"], len(stale), "count_document_nodes")

    def batches():
        for start in range(0, len(stale), batch_size):
            ids = stale[start:start + batch_size]
            with _committed(conn):
                rows = conn.execute(statement("render_documents", tables), shape | {"node_ids": ids}).fetchall()
            yield (len(ids), rows), [r[1] for r in rows]

    embedded = 0
    with progress.stage("documents", total=len(stale), unit="documents") as stage:
        for (n_ids, rows), vectors in executor.embed_batches(batches()):
            if rows:
                _check_dimension(vectors, tables)
                with _committed(conn):
                    conn.execute(statement("upsert_documents", tables),
                                 shape | {"node_ids": [r[0] for r in rows], "hashes": [r[2] for r in rows],
                                          "vecs": list(vectors)})
            embedded += len(rows)
            stage.advance(n_ids)
    return {"embedded": embedded, "deleted": deleted}


def _refresh_chunks(conn, tables: ModelTables, shape: dict, node_batch: int, progress: Reporter,
                    executor) -> dict:
    """Per batch of nodes with any new, changed or vanished chunk: embed what changed, delete what is gone
    (read in one transaction, written in another when the executor returns the batch's vectors)."""
    with _committed(conn):
        stale = [row[0] for row in conn.execute(statement("stale_chunk_nodes", tables), shape)]
    _drop_index_if_mostly_stale(conn, tables, tables.chunk_table, shape["skb_id"], len(stale), "count_chunk_nodes")

    def batches():
        for start in range(0, len(stale), node_batch):
            ids = stale[start:start + node_batch]
            params = shape | {"node_ids": ids}
            with _committed(conn):
                rendered = conn.execute(statement("render_chunks", tables), params).fetchall()
                stored = {(n, c): (kind, h) for n, c, kind, h in
                          conn.execute(statement("stored_chunks", tables), params)}
            todo = [r for r in rendered if stored.get((r[0], r[1])) != (r[2], r[4])]
            gone = set(stored) - {(r[0], r[1]) for r in rendered}
            yield (len(ids), todo, gone), [r[3] for r in todo]

    embedded = deleted = 0
    started = time.perf_counter()
    with progress.stage("chunks (nodes)", total=len(stale)) as stage:
        for (n_ids, todo, gone), vectors in executor.embed_batches(batches()):
            with _committed(conn):
                if todo:
                    _check_dimension(vectors, tables)
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
            stage.advance(n_ids)
    return {"embedded": embedded, "deleted": deleted}


def _drop_index_if_mostly_stale(conn, tables: ModelTables, table: str, skb_id: int, n_stale: int,
                                count_statement: str) -> None:
    """Drop the SKB's vector index on `table` when more than half of its nodes are about to be re-embedded."""
    if not n_stale:
        return
    with _committed(conn):
        n_nodes = conn.execute(statement(count_statement, tables), {"skb_id": skb_id}).fetchone()[0]
        if 2 * n_stale > n_nodes:
            for method in VECTOR_INDEXES:
                conn.execute(pgsql.SQL("drop index if exists {}").format(
                    pgsql.Identifier("stark", vector_index_name(table, skb_id, method))))


def _check_dimension(vectors, tables: ModelTables):
    if vectors.shape[1] != tables.dim:
        raise ValueError(f"model {tables.name!r} made {vectors.shape[1]}-dimensional vectors, but its tables hold "
                         f"{tables.dim} dimensions")
    return vectors


def _build_indexes(conn, tables: ModelTables, skb_id: int, multi_vector: bool, wanted: IndexSettings,
                   progress: Reporter) -> list[str]:
    """The SKB's partial vector indexes (cosine) as `wanted`: an index that exists with other settings
    (method, storage, m, ef_construction) is dropped and rebuilt. Returns the names of those built."""
    targets = [tables.doc_table] + ([tables.chunk_table] if multi_vector else [])
    names = [vector_index_name(t, skb_id, method) for t in targets for method in VECTOR_INDEXES]
    existing = {row[0]: row[1:] for row in queries().vector_indexes(conn, names=names)}
    built = []
    with progress.stage(f"{wanted.index.upper()} index", total=len(targets)) as stage:
        for table in targets:
            name = vector_index_name(table, skb_id, wanted.index)
            have = existing.get(name)
            if have and _matches(have, wanted) and not any(
                    n in existing for n in (vector_index_name(table, skb_id, m) for m in VECTOR_INDEXES) if n != name):
                stage.advance()
                continue
            with _committed(conn):
                for method in VECTOR_INDEXES:
                    conn.execute(pgsql.SQL("drop index if exists {}").format(
                        pgsql.Identifier("stark", vector_index_name(table, skb_id, method))))
                section = ("create_diskann_index" if wanted.index == "diskann" else
                           "create_hnsw_halfvec_index" if wanted.storage == "halfvec" else "create_hnsw_index")
                conn.execute(statement(section, tables, index=pgsql.Identifier(name),
                                       table=pgsql.Identifier("stark", table), skb=skb_id, m=wanted.m,
                                       ef_construction=wanted.ef_construction, **DISKANN_BUILD))
            built.append(name)
            stage.advance()
    return built


def _matches(have: tuple, wanted: IndexSettings) -> bool:
    """Whether an existing index (access method, storage, m, ef_construction) is the one wanted."""
    method, storage, m, ef_construction = have
    if method != wanted.index or storage != wanted.storage:
        return False
    return method == "diskann" or ((m or 16), (ef_construction or 64)) == (wanted.m, wanted.ef_construction)
