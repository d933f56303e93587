"""`stark-pg index | import-embeddings | search`: build an SKB's indexes (or import vectors made
elsewhere), and query it with one retrieval method."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from stark_pg.cli.common import (WORKERS_HELP, concurrent_calls, err, fail, out, print_json, ray_options, reporter,
                                 state)
from stark_pg.retrieve.catalog import method_help


def register(app: typer.Typer) -> None:
    app.command()(index)
    app.command("import-embeddings")(import_embeddings)
    app.command()(search)


def index(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB to index."),
    lexical: bool = typer.Option(True, "--lexical/--no-lexical", help="BM25 postings (whole document, name, "
                                                                      "each text field)."),
    dense: bool = typer.Option(True, "--dense/--no-dense",
                               help="Embeddings with a vector index (HNSW, or DiskANN: --vector-index)."),
    graph: bool = typer.Option(True, "--graph/--no-graph",
                               help="The graph's typed-link summary (which node types each node has edges to) "
                                    "and whether every edge is also stored reversed, which speed up 4StepFocus's "
                                    "substitution and KAR's neighbours; built once per loaded version."),
    model: str = typer.Option(None, "--model", help="sentence-transformers model name or path "
                                                    "(default all-MiniLM-L6-v2, offline from its PyPI package), "
                                                    "or openai:MODEL for OpenAI or a compatible server "
                                                    "(STARK_PG_EMBED_BASE_URL), cached in stark.llm_cache."),
    multi_vector: bool = typer.Option(None, "--chunks/--no-chunks", "--multi-vector/--no-multi-vector",
                                      help="Also embed each node's fields and relations as chunks, several vectors a "
                                           "node, which only multivss, mfar's field scorers and fusion's field "
                                           "features read; several times the documents' time (--dry-run says how "
                                           "long). Default: as the last build, else no.", show_default=False),
    relation_fields: bool = typer.Option(False, "--relation-fields",
                                         help="Also BM25-index the type and, per relation, the neighbours' names "
                                              "(mFAR's fields; kept up to date by later builds)."),
    textsearch: bool = typer.Option(None, "--textsearch/--no-textsearch",
                                    help="BM25 indexes of pg_textsearch, which `bm25` searches by default "
                                         "[default: where the server has the extension]; --no-textsearch "
                                         "drops them (BM25 then runs as exact SQL).", show_default=False),
    device: str = typer.Option(None, "--device", help="Where to embed: auto (the first of cuda, mps, cpu), cpu, "
                                                      "cuda, cuda:N or mps. Default: STARK_PG_DEVICE, else auto."),
    half: bool = typer.Option(False, "--half", help="Embed in half precision (float16) on a GPU; ignored on "
                                                    "the CPU. Vectors are stored as float32 either way."),
    backend: str = typer.Option(None, "--backend", help="How a local model computes vectors: torch, onnx (ONNX "
                                                        "Runtime) or openvino, or auto (onnx on the CPU, torch on a "
                                                        "GPU). Exported once, cached under STARK_PG_HOME/models; "
                                                        "recorded with the vectors, and the SKB's queries are "
                                                        "embedded alike. Default: as the last build, else auto."),
    quantize: bool = typer.Option(None, "--quantize/--no-quantize",
                                  help="int8 weights (onnx or openvino): faster, vectors a little further from "
                                       "torch's. Default: as the last build, else no.", show_default=False),
    batch_size: int = typer.Option(32, "--batch-size", help="Texts per forward pass of the embedding model "
                                                            "(32 suits a CPU; a GPU takes hundreds), or per "
                                                            "request to an openai: model."),
    vector_index: str = typer.Option(None, "--vector-index", help="hnsw (pgvector) or diskann (pgvectorscale; "
                                                                  "HNSW with a notice where it is missing). "
                                                                  "Default: as the last build, else hnsw."),
    storage: str = typer.Option(None, "--storage", help="vector (single precision) or halfvec (a half-precision "
                                                        "HNSW index, half the size). Default: as the last build, "
                                                        "else vector."),
    hnsw_m: int = typer.Option(None, "--hnsw-m", help="HNSW links per node, 2-100. Default: as the last build, "
                                                      "else 16."),
    hnsw_ef_construction: int = typer.Option(None, "--hnsw-ef-construction",
                                             help="HNSW build candidate list, 4-1000 and at least 2 * m. Default: "
                                                  "as the last build, else 64."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Build nothing: print the documents and chunks there "
                                                          "are, how many need embedding, and an estimate of the "
                                                          "time (from embedding a sample here)."),
    workers: int = typer.Option(None, "--workers", help="An openai: model: embedding requests (of --batch-size "
                                                        "texts) at once. " + WORKERS_HELP, show_default=False),
    executor: str = typer.Option("local", "--executor",
                                 help="Who computes a local model's embeddings: local (this process) or ray (a "
                                      "pool of workers on a Ray cluster, each loading the model once; needs "
                                      "pip install 'stark-pg[ray]'). Vectors are written here as each batch "
                                      "comes back, so a stopped build resumes alike."),
    ray_address: str = typer.Option(None, "--ray-address",
                                    help="--executor ray: the cluster's head, HOST:PORT as `ray start --head` "
                                         "printed it (or ray://HOST:PORT). Default: RAY_ADDRESS, else a cluster "
                                         "started on this machine, else a new one on this machine for the build."),
    ray_workers: int = typer.Option(None, "--ray-workers",
                                    help="--executor ray: embedding workers (each takes an equal share of the "
                                         "cluster's CPUs). Default: one per GPU where the cluster has GPUs, "
                                         "else one per node.", show_default=False),
    gpus_per_worker: float = typer.Option(None, "--gpus-per-worker",
                                          help="--executor ray: GPUs each worker takes (0: embed on CPUs; a "
                                               "fraction shares one GPU). Default: 1 where the cluster has GPUs, "
                                               "else 0.", show_default=False),
    json_: bool = typer.Option(False, "--json", help="Print what was (re)built as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Build or refresh the lexical and dense indexes of an SKB, and its graph summary.

    Incremental and resumable: a re-run only indexes nodes that are new or whose text changed, and
    removes what belongs to nodes that are gone.
    """
    from stark_pg.options import OptionError

    if batch_size < 1:
        fail(f"--batch-size {batch_size}: must be at least 1")
    ray = _ray_options(executor, ray_address, ray_workers, gpus_per_worker, device, model, dense, dry_run)
    bound = concurrent_calls(workers)
    if dense:
        from stark_pg.embed import DeviceError, EncoderError, check_backend, requested_device

        try:
            requested_device(device, "--device")       # the form only: availability is known once torch loads
            check_backend(backend, "--backend")
        except (DeviceError, EncoderError) as exc:
            fail(str(exc))
    if dry_run:
        return _dry_run(ctx, name, model, multi_vector, device, half, batch_size, json_, backend, quantize)
    progress = reporter(quiet or json_)
    report: dict = {}
    if dense:
        from stark_pg.embed import EncoderError
        from stark_pg.index.dense import IndexSettings

        try:        # bad values fail before anything is built (a build resolves them against the last one)
            IndexSettings.resolve(None, index=vector_index, storage=storage, m=hnsw_m,
                                  ef_construction=hnsw_ef_construction)
            if backend and quantize:
                from stark_pg.embed import Encoder

                Encoder(backend if backend != "auto" else "onnx", True).checked()
        except (OptionError, EncoderError) as exc:
            fail(str(exc))
    with bound, state(ctx).connect() as conn:
        if lexical:
            from stark_pg.index.lexical import build_lexical, relation_scopes

            extra = relation_scopes(conn, name) if relation_fields else None
            report["lexical"] = build_lexical(conn, name, progress=progress, extra_scopes=extra,
                                              textsearch=textsearch)
        if graph:
            from stark_pg.index.graph import build_graph_summary

            report["graph"] = build_graph_summary(conn, name, progress=progress)
        if dense:
            from stark_pg.index.dense import BATCH_SIZE, build_dense
            from stark_pg.llm.concurrency import current

            try:
                report["dense"] = build_dense(conn, name, model=model, multi_vector=multi_vector, progress=progress,
                                              index=vector_index, storage=storage, m=hnsw_m,
                                              ef_construction=hnsw_ef_construction, device=device, half=half,
                                              encode_batch=batch_size, backend=backend, quantize=quantize,
                                              # enough texts per committed batch for every worker's request
                                              batch_size=max(BATCH_SIZE, batch_size * current()), ray=ray)
            except (OptionError, EncoderError) as exc:
                fail(str(exc))
            except RuntimeError as exc:
                from stark_pg.embed.ray_executor import RayUnavailable, RayWorkerLost

                if not isinstance(exc, (RayUnavailable, RayWorkerLost)):
                    raise
                fail(str(exc))
            for notice in report["dense"]["notices"]:
                err.print(f"notice: {notice}", highlight=False)
    if json_:
        print_json(report)
        return
    if "lexical" in report:
        done = report["lexical"]["reindexed"]
        if report["lexical"].get("notice"):
            out.print(f"notice: {report['lexical']['notice']}", highlight=False)
        engine = "pg_textsearch and SQL postings" if report["lexical"]["engine"] == "textsearch" else "SQL postings"
        out.print(f"lexical ({engine}): {len(done)} scopes, {sum(done.values()):,} documents (re)indexed "
                  f"in {report['lexical']['seconds']:.1f} s", highlight=False)
    if "graph" in report:
        summary = report["graph"]
        how = f"built in {summary['seconds']:.1f} s" if summary["built"] else "unchanged"
        both = ("every edge stored both ways" if summary["one_way_edges"] == 0
                else f"{summary['one_way_edges']:,} edges stored one way only")
        out.print(f"graph: typed-link summary, {summary['rows']:,} rows; {both} ({how})", highlight=False)
    if "dense" in report:
        dense_report = report["dense"]
        parts = [f"{kind} {c['embedded']:,} embedded, {c['skipped']:,} unchanged, {c['deleted']:,} deleted"
                 for kind, c in ((k, dense_report.get(k)) for k in ("documents", "chunks")) if c]
        encoding = dense_report["encoding"]
        if not encoding:
            how = ""
        elif "api" in encoding:          # an embedding API: no device or precision of ours
            how = f", {encoding['api']}"
        else:
            how = f", {encoding['device']}, {encoding['backend']}, {encoding['precision']}"
            if encoding.get("executor") == "ray":
                how += f", {encoding['workers']} Ray workers"
        settings = dense_report["index"]
        kind = (f"{settings['index'].upper()}" + (f" (m={settings['m']}, ef_construction={settings['ef_construction']}"
                                                  f", {settings['storage']})" if settings["index"] == "hnsw" else ""))
        out.print(f"dense ({dense_report['model']}{how}): {'; '.join(parts)}; "
                  f"{len(dense_report.get('indexes_built', []))} {kind} indexes built in {dense_report['seconds']:.1f} s",
                  highlight=False)
        if not dense_report["chunks"]["total"]:
            out.print(f"no chunk vectors: multivss and mfar's field scorers need `stark-pg index {name} --chunks`",
                      highlight=False, soft_wrap=True)
        api = dense_report.get("embedding_api")
        if api:
            cost = "unknown cost" if api["cost_usd"] is None else f"${api['cost_usd']:.4f}"
            out.print(f"embedding API: {api['calls']} requests, {api['cache_hits']:,} texts from the cache, "
                      f"{api['prompt_tokens']:,} tokens, {cost}", highlight=False)


def _ray_options(executor: str, address: str | None, workers: int | None, gpus: float | None, device: str | None,
                model: str | None, dense: bool, dry_run: bool):
    """`--executor ray` and its options checked (Ray installed, values in range), as RayOptions; None for
    the local executor, which takes none of them."""
    options = ray_options(executor, address, workers, gpus, check_installed=dense and not dry_run)
    if options is None:
        return None
    from stark_pg import embed

    if device:
        fail("--device is for --executor local: Ray workers embed on GPUs when they have them "
             "(--gpus-per-worker), else on their CPUs")
    if embed.is_api_model(model):
        fail(f"--executor ray runs local models on a cluster; {model!r} is embedded by its API "
             "(--workers sends it requests at once)")
    return options


def _dry_run(ctx, name: str, model: str | None, multi_vector: bool | None, device: str | None, half: bool,
             batch_size: int, json_: bool, backend: str | None = None, quantize: bool | None = None) -> None:
    """`index --dry-run`: what a build would embed and how long it would take, nothing written."""
    from stark_pg.embed import EncoderError
    from stark_pg.index.dense import plan_dense

    with state(ctx).connect() as conn:
        try:
            plan = plan_dense(conn, name, model=model, multi_vector=multi_vector, device=device, half=half,
                              encode_batch=batch_size, backend=backend, quantize=quantize)
        except EncoderError as exc:
            fail(str(exc))
    if json_:
        print_json(plan)
        return
    docs, chunks, estimate = plan["documents"], plan["chunks"], plan["estimate"]

    def took(seconds: float) -> str:
        return f"about {seconds / 60:.0f} min" if seconds >= 90 else f"about {seconds:.0f} s"

    out.print(f"dry run on {name}, model {plan['model']}: nothing built", highlight=False)
    out.print(f"documents: {docs['total']:,}, {docs['to_embed']:,} to embed"
              + (f", {took(estimate['documents_seconds'])}" if estimate else ""), highlight=False)
    asked = "this build embeds them" if plan["multi_vector"] else "not embedded unless --chunks"
    out.print(f"chunks: {chunks['total']:,}, {chunks['to_embed']:,} to embed"
              + (f", {took(estimate['chunks_seconds'])}" if estimate else "") + f" ({asked})", highlight=False)
    if estimate:
        out.print(f"estimate from embedding {estimate['sample']['documents']} documents and "
                  f"{estimate['sample']['chunks']} chunks here ({estimate['encoding']['device']}, "
                  f"{estimate['encoding']['backend']}, {estimate['encoding']['precision']}); the vector "
                  "indexes' build comes on top", highlight=False, soft_wrap=True)
    else:
        out.print("no time estimate for an embedding API (texts already cached cost nothing)", highlight=False)


def import_embeddings(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB the vectors belong to (its node and query ids key them)."),
    candidates: Path = typer.Option(..., "--candidates", help="Document vectors: STaRK's candidate_emb_dict.pt "
                                                              "(a torch.save'd dict of node id -> tensor).",
                                    dir_okay=False),
    queries: Path = typer.Option(None, "--queries", help="Query vectors: STaRK's query_emb_dict.pt (query id -> "
                                                         "tensor).", dir_okay=False),
    model_name: str = typer.Option("stark-ada-002", "--name", help="The stored model's name, for "
                                                                   "`-m vss -o model=NAME`."),
    query_model: str = typer.Option(None, "--query-model", help="Embed queries without an imported vector with "
                                                                "this model (e.g. openai:text-embedding-ada-002, "
                                                                "which needs OPENAI_API_KEY); default: such a "
                                                                "query fails with a clear error."),
    skip_unknown: bool = typer.Option(False, "--skip-unknown", help="Leave out vectors whose ids are not the SKB's "
                                                                    "(files of a whole dataset, SKB of a slice) "
                                                                    "instead of failing."),
    json_: bool = typer.Option(False, "--json", help="Print what was imported as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Import vectors computed elsewhere (STaRK's published text-embedding-ada-002 embeddings) as a stored
    model, so that `search -m vss -o model=NAME` and `eval` reproduce STaRK's VSS without an API key.

    Files are read through torch's restricted unpickler; a wrong format, mixed or mismatched dimensions or
    ids that are not the SKB's stop the import with the file at fault. One transaction: a failed import
    leaves the database unchanged; importing again under the same name replaces the SKB's vectors.
    """
    from stark_pg.index.imported import import_embeddings as run_import

    with state(ctx).connect() as conn:
        report = run_import(conn, name, candidates, queries, model_name, query_model=query_model,
                            skip_unknown=skip_unknown, progress=reporter(quiet or json_))
    if json_:
        print_json(report)
        return
    skipped = report["skipped_unknown"]
    out.print(f"imported into {report['skb']} as model {report['model']} ({report['dim']} dimensions): "
              f"{report['documents']:,} document vectors, {report['queries']:,} query vectors"
              + (f"; skipped {skipped['nodes']:,} node ids and {skipped['queries']:,} query ids not in the SKB"
                 if skipped["nodes"] or skipped["queries"] else "")
              + f"; HNSW index built; {report['seconds']:.1f} s", highlight=False, soft_wrap=True)
    if report["nodes_without_vector"] or report["queries_without_vector"]:
        fallback = (f"are embedded by {report['query_model']}" if report["query_model"] else
                    "cannot be searched with it (--query-model to embed them)")
        out.print(f"[yellow]{report['nodes_without_vector']:,} nodes have no vector (vss never returns them); "
                  f"{report['queries_without_vector']:,} queries have none and {fallback}[/]", highlight=False,
                  soft_wrap=True)
    out.print(f"search with: stark-pg search {report['skb']} QUERY -m vss -o model={report['model']}", highlight=False,
              soft_wrap=True)


def search(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB to search."),
    query: str = typer.Argument(..., help="The question, in natural language."),
    method: str = typer.Option("hybrid", "--method", "-m", help=method_help(" | ") + "."),
    k: int = typer.Option(10, "-k", help="Number of results."),
    option: list[str] = typer.Option(None, "--option", "-o", help="A method setting KEY=VALUE, repeatable; e.g. "
                                                                  "-o field=description (bm25), -o exact=true (vss), "
                                                                  "-o fusion=weighted -o weight=0.7 (hybrid)."),
    json_: bool = typer.Option(False, "--json", help="Results and trace as JSON."),
    explain: bool = typer.Option(False, "--explain", help="Also show how the method got there, step by step "
                                                          "(e.g. 4stepfocus: triplets, links, candidate counts, "
                                                          "the SQL); with --json as the key \"explain\"."),
    mask: list[str] = typer.Option(None, "--mask", help="mfar: zero the weight of a field, or of one scorer of it "
                                                        "(FIELD or FIELD:lexical|dense), repeatable; the same as "
                                                        "-o mask=FIELD,..."),
    workers: int = typer.Option(None, "--workers", help="An LLM method's requests for this query at once (e.g. "
                                                        "vss+rerank's one per candidate). " + WORKERS_HELP,
                                show_default=False),
) -> None:
    """Rank the nodes of an SKB for a query: id, type, name and score of each result."""
    from stark_pg.options import OptionError
    from stark_pg.retrieve import UnknownMethod
    from stark_pg.retrieve.results import check_k, configure, search_described

    try:
        check_k(k)
        module, options = configure(method, list(option or []) + ([f"mask={','.join(mask)}"] if mask else []),
                                    explain=explain)
    except (UnknownMethod, OptionError) as exc:
        fail(str(exc))
    with concurrent_calls(workers), state(ctx).connect(read=True) as conn:     # a standby where the DSN names one
        hits, ranking = search_described(conn, name, query, module, options, k)
    results = [hit.to_dict() for hit in hits]
    if json_:
        document = {"skb": name, "query": query, "method": method, "results": results, "trace": ranking.trace}
        if explain:
            document["explain"] = ranking.trace.get("explain")
        print_json(document)
        return
    table = Table(title=f"{method} on {name}: {query}", title_justify="left")
    for column, justify in (("#", "right"), ("node id", "right"), ("type", "left"), ("name", "left"),
                            ("score", "right")):
        table.add_column(column, justify=justify)
    for r in results:
        table.add_row(str(r["rank"]), str(r["node_id"]), r["type"], r["name"] or "", f"{r['score']:.4f}")
    out.print(table)
    if explain:
        print_explanation(method, ranking.trace)


def print_explanation(method: str, trace: dict) -> None:
    """A trace's `explain` entry as text: a string as it is, a mapping as headed sections (each a string
    or a list of lines), anything else as JSON. Methods without one get their whole trace as JSON."""
    import json

    explanation = trace.get("explain")
    if explanation is None:
        out.print(f"\n{method} gives no step-by-step explanation; its trace:", highlight=False)
        out.print(json.dumps(trace, indent=2, default=str), highlight=False, markup=False)
        return
    if isinstance(explanation, str):
        out.print("\n" + explanation, highlight=False, markup=False)
        return
    if not isinstance(explanation, dict):
        out.print(json.dumps(explanation, indent=2, default=str), highlight=False, markup=False)
        return
    for title, body in explanation.items():
        out.print(f"\n[bold]{title}[/bold]", highlight=False)
        lines = body if isinstance(body, list) else [body if isinstance(body, str) else json.dumps(body, default=str)]
        for line in lines:
            out.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
