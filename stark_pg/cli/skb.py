"""`stark-pg load | info | drop`: getting knowledge bases in and out, and seeing what is there."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.table import Table

from stark_pg.cli.common import fail, out, print_json, reporter, state


def register(app: typer.Typer) -> None:
    app.command()(load)
    app.command()(info)
    app.command()(drop)


def load(
    ctx: typer.Context,
    source: str = typer.Argument(..., help="A directory (bundle, STaRK processed files, or STaRK QA files; the "
                                           "format is detected), a human-generated query CSV, `synthetic`, or "
                                           "stark-amazon | stark-mag | stark-prime (downloaded from Hugging Face)."),
    name: str = typer.Option(None, "--name", "-n", help="SKB name. Default: the directory's base name "
                                                         "(synthetic-N, stark-prime, ...)."),
    if_exists: str = typer.Option("replace", "--if-exists", help="When the name is taken: replace (atomically), "
                                                                 "skip, or fail."),
    drop_dangling: bool = typer.Option(False, "--drop-dangling", help="Drop edges whose endpoints are not nodes "
                                                                      "and queries whose answers are not nodes, and "
                                                                      "report how many, instead of failing."),
    skb: str = typer.Option(None, "--skb", help="For query files: the loaded SKB whose node ids they use."),
    nodes: int = typer.Option(10_000, "--nodes", help="synthetic: number of nodes."),
    seed: int = typer.Option(0, "--seed", help="synthetic: random seed (same seed, same SKB)."),
    edges_per_node: float = typer.Option(20.0, "--edges-per-node", help="synthetic: mean out-degree."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="stark-*: where downloads go "
                                                             "(default: STARK_PG_HOME/downloads)."),
    refresh: bool = typer.Option(True, "--refresh/--no-refresh",
                                 help="After a replace: bring the kept indexes up to date (only nodes whose "
                                      "text changed are re-done); after any load: embed and link new training "
                                      "questions for the SKB's fusion models. With --no-refresh, run `stark-pg "
                                      "index` (and `stark-pg train fusion`) later."),
    json_: bool = typer.Option(False, "--json", help="Print the load summary as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Load a knowledge base (or its queries) into PostgreSQL, in one transaction.

    A failed load leaves the database exactly as it was; loading a name that exists replaces it
    atomically: the new version is built beside the old one, which other sessions keep reading
    until the commit. What was derived from the old version is kept (lexical index, vectors,
    evaluation runs, trained models) and the indexes are refreshed for the nodes that changed.
    Bad input stops the load with the file and line at fault.
    """
    from stark_pg.loading import check_if_exists, load_opened, open_source

    check_if_exists(if_exists)        # before a download, not after it
    opened = open_source(source, nodes=nodes, seed=seed, edges_per_node=edges_per_node, cache_dir=cache_dir)
    progress = reporter(quiet or json_)
    with state(ctx).connect() as conn:
        outcome = load_opened(conn, opened, name, skb=skb, if_exists=if_exists, drop_dangling=drop_dangling,
                              refresh=refresh, progress=progress)
    summary, kinds, refreshed, prepared = outcome.summary, outcome.kept, outcome.refreshed, outcome.prepared
    if json_:
        print_json(outcome.to_dict())
        return
    _print_summary(summary)
    if summary.carried:
        kept = ", ".join(f"{table} {rows:,}" for table, rows in summary.carried.items())
        out.print(f"kept from the replaced version (rows): {kept}", highlight=False)
    for model, counts in ((m, c) for m, c in prepared.items() if any(c.values())):
        out.print(f"training questions for fusion models ({model}): {counts['embedded']:,} embedded, "
                  f"{counts['link_rows']:,} name matches stored", highlight=False)
    if refreshed:
        out.print(f"indexes refreshed for changed nodes: {', '.join(refreshed)}", highlight=False)
    elif kinds:
        out.print(f"[yellow]the kept {' and '.join(kinds)} indexes are not refreshed (--no-refresh): run "
                  f"stark-pg index {summary.name}[/]")


def _print_summary(summary) -> None:
    if summary.status == "skipped":
        out.print(f"SKB [bold]{summary.name}[/] exists; skipped (--if-exists skip)")
        return
    table = Table(title=f"{summary.name}: {summary.status} in {summary.seconds:.1f} s", show_header=True)
    table.add_column("what")
    table.add_column("kind")
    table.add_column("count", justify="right")
    for title, counts in (("nodes", summary.nodes_by_type), ("edges", summary.edges_by_relation),
                          ("queries", summary.queries_by_split)):
        for kind, count in counts.items():
            table.add_row(title, kind, f"{count:,}")
            title = ""
    out.print(table)
    out.print(f"{summary.nodes:,} nodes, {summary.edges:,} edges, {summary.queries:,} queries")
    if summary.dropped_edges or summary.dropped_queries:
        out.print(f"[yellow]dropped {summary.dropped_edges:,} dangling edges and {summary.dropped_queries:,} "
                  f"queries with answers outside the SKB (--drop-dangling)[/]")


def info(ctx: typer.Context,
         name: str = typer.Argument(None, help="SKB name; all SKBs when omitted."),
         json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Nodes, edges, queries by split, node types and relation types of loaded SKBs."""
    from stark_pg.skb.catalog import all_skb_names, skb_info

    with state(ctx).connect() as conn:
        names = [name] if name else all_skb_names(conn)
        infos = [skb_info(conn, n) for n in names]
    if json_:
        print_json(infos[0] if name else infos)
        return
    if not infos:
        out.print("no SKBs loaded yet: try `stark-pg load synthetic`")
    for item in infos:
        out.print(f"[bold]{item['name']}[/] ({item['format']}, from {item['source']}, loaded {item['loaded_at']})",
                  highlight=False)
        out.print(f"  {item['nodes']:,} nodes, {item['edges']:,} edges, {item['queries']:,} queries")
        for title, key in (("node types", "node_types"), ("relation types", "relation_types"),
                           ("queries by split", "queries_by_split"), ("text fields", "fields")):
            parts = ", ".join(f"{k} {v:,}" for k, v in item[key].items()) or "none"
            out.print(f"  {title}: {parts}", highlight=False)


def drop(ctx: typer.Context, name: str = typer.Argument(..., help="SKB to remove with all its rows."),
         yes: bool = typer.Option(False, "--yes", "-y", help="Drop without asking (needed when stdin is not a "
                                                             "terminal)."),
         json_: bool = typer.Option(False, "--json", help="Print {\"dropped\": NAME} as JSON.")) -> None:
    """Remove an SKB and everything stored for it, its evaluation runs included. Asks first, unless --yes."""
    from stark_pg.skb.catalog import drop_skb, drop_summary

    with state(ctx).connect() as conn:
        counts = drop_summary(conn, name)           # an unknown name fails here, before any question
        if not yes:
            if not sys.stdin.isatty():
                fail(f"drop {name}: stdin is not a terminal, so there is no one to ask; pass --yes to drop it")
            what = (f"{counts['nodes']:,} nodes, {counts['queries']:,} queries and "
                    f"{counts['runs']:,} stored evaluation runs")
            if not typer.confirm(f"Drop SKB {name!r} with its {what}?", default=False, err=True):
                fail(f"drop {name}: not confirmed, nothing dropped")
        drop_skb(conn, name)
    if json_:
        print_json({"dropped": name})
        return
    out.print(f"dropped {name}")
