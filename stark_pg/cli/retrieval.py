"""`stark-pg index | search`: build an SKB's indexes, and query it with one retrieval method."""

from __future__ import annotations

import typer
from rich.table import Table

from stark_pg.cli.common import err, fail, out, print_json, reporter, state
from stark_pg.retrieve import METHODS


def register(app: typer.Typer) -> None:
    app.command()(index)
    app.command()(search)


def index(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB to index."),
    lexical: bool = typer.Option(True, "--lexical/--no-lexical", help="BM25 postings (whole document, name, "
                                                                      "each text field)."),
    dense: bool = typer.Option(True, "--dense/--no-dense",
                               help="Embeddings with a vector index (HNSW, or DiskANN: --vector-index)."),
    model: str = typer.Option(None, "--model", help="sentence-transformers model name or path "
                                                    "(default all-MiniLM-L6-v2, offline from its PyPI package)."),
    multi_vector: bool = typer.Option(True, "--multi-vector/--no-multi-vector",
                                      help="Also embed fields and relation chunks (for multivss and mfar)."),
    relation_fields: bool = typer.Option(False, "--relation-fields",
                                         help="Also BM25-index the type and, per relation, the neighbours' names "
                                              "(mFAR's fields; kept up to date by later builds)."),
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
    json_: bool = typer.Option(False, "--json", help="Print what was (re)built as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Build or refresh the lexical and dense indexes of an SKB.

    Incremental and resumable: a re-run only indexes nodes that are new or whose text changed, and
    removes what belongs to nodes that are gone.
    """
    from stark_pg.options import OptionError

    progress = reporter(quiet or json_)
    report: dict = {}
    if dense:
        from stark_pg.index.dense import IndexSettings

        try:        # bad values fail before anything is built (a build resolves them against the last one)
            IndexSettings.resolve(None, index=vector_index, storage=storage, m=hnsw_m,
                                  ef_construction=hnsw_ef_construction)
        except OptionError as exc:
            fail(str(exc))
    with state(ctx).connect() as conn:
        if lexical:
            from stark_pg.index.lexical import build_lexical, relation_scopes

            extra = relation_scopes(conn, name) if relation_fields else None
            report["lexical"] = build_lexical(conn, name, progress=progress, extra_scopes=extra)
        if dense:
            from stark_pg.index.dense import build_dense

            try:
                report["dense"] = build_dense(conn, name, model=model, multi_vector=multi_vector, progress=progress,
                                              index=vector_index, storage=storage, m=hnsw_m,
                                              ef_construction=hnsw_ef_construction)
            except OptionError as exc:
                fail(str(exc))
            for notice in report["dense"]["notices"]:
                err.print(f"notice: {notice}", highlight=False)
    if json_:
        print_json(report)
        return
    if "lexical" in report:
        done = report["lexical"]["reindexed"]
        out.print(f"lexical: {len(done)} scopes, {sum(done.values()):,} documents (re)indexed "
                  f"in {report['lexical']['seconds']:.1f} s", highlight=False)
    if "dense" in report:
        dense_report = report["dense"]
        parts = [f"{kind} {c['embedded']:,} embedded, {c['skipped']:,} unchanged, {c['deleted']:,} deleted"
                 for kind, c in ((k, dense_report.get(k)) for k in ("documents", "chunks")) if c]
        settings = dense_report["index"]
        kind = (f"{settings['index'].upper()}" + (f" (m={settings['m']}, ef_construction={settings['ef_construction']}"
                                                  f", {settings['storage']})" if settings["index"] == "hnsw" else ""))
        out.print(f"dense ({dense_report['model']}): {'; '.join(parts)}; "
                  f"{len(dense_report.get('indexes_built', []))} {kind} indexes built in {dense_report['seconds']:.1f} s",
                  highlight=False)


def search(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The SKB to search."),
    query: str = typer.Argument(..., help="The question, in natural language."),
    method: str = typer.Option("hybrid", "--method", "-m", help=" | ".join(METHODS) + " (README: Methods)."),
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
) -> None:
    """Rank the nodes of an SKB for a query: id, type, name and score of each result."""
    from stark_pg.options import OptionError, describe, parse_options
    from stark_pg.resources import queries as sql
    from stark_pg.retrieve import UnknownMethod, get_method
    from stark_pg.skb.catalog import require_skb

    if k < 1:
        fail(f"-k {k}: the number of results must be at least 1")
    try:
        module = get_method(method)
        options = parse_options(module.Options, list(option or []) + ([f"mask={','.join(mask)}"] if mask else []))
        if explain and hasattr(options, "explain"):
            options.explain = True      # methods whose explanation costs extra work compute it only when asked
    except (UnknownMethod, OptionError) as exc:
        fail(str(exc) + (f"; {method} settings: {describe(module.Options)}" if isinstance(exc, OptionError) else ""))
    with state(ctx).connect() as conn:
        ranking = module.search(conn, name, query, k, options)
        about = {row[0]: row[1:] for row in sql().describe_nodes(conn, skb_id=require_skb(conn, name),
                                                                 node_ids=ranking.node_ids)}
    results = [{"rank": i, "node_id": h.node_id, "type": about[h.node_id][0], "name": about[h.node_id][1],
                "score": h.score} for i, h in enumerate(ranking.hits, start=1)]
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
