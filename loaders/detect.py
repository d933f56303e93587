"""From what the user typed after `stark-pg load` to a loader: a directory's format is detected."""

from __future__ import annotations

from pathlib import Path

from stark_pg.skb.records import LoadError

STARK_DATASETS = {"stark-amazon": "amazon", "stark-mag": "mag", "stark-prime": "prime"}
FORMATS = ("bundle", "stark-processed", "stark-qa", "synthetic", *STARK_DATASETS)


def detect_format(source: str) -> str:
    if source == "synthetic" or source in STARK_DATASETS:
        return source
    path = Path(source)
    if not path.exists():
        raise LoadError(f"{source}: no such file or directory (nor one of: synthetic, {', '.join(STARK_DATASETS)})")
    from loaders.bundle import is_bundle
    from loaders.stark_qa import find_qa_csv, is_human_csv

    if is_bundle(path):
        return "bundle"
    if path.is_dir() and ((path / "node_info.pkl").is_file() or (path / "processed" / "node_info.pkl").is_file()):
        return "stark-processed"
    if (path.is_dir() and find_qa_csv(path)) or is_human_csv(path) or (path.is_file() and path.suffix == ".csv"):
        return "stark-qa"
    raise LoadError(f"{source}: not a format stark-pg reads. Expected a bundle directory (nodes.jsonl, edges.tsv"
                    "[, queries.csv]), STaRK processed files (node_info.pkl, edge_index.pt, ...), or STaRK QA "
                    "files (stark_qa.csv with split/*.index, or a human-generated CSV)")


def is_query_only(fmt: str) -> bool:
    return fmt == "stark-qa"


def open_source(source: str, fmt: str, **options):
    """The SkbSource (or QuerySource for QA files) reading `source` in format `fmt`."""
    if fmt == "bundle":
        from loaders.bundle import BundleSource

        return BundleSource(Path(source))
    if fmt == "stark-processed":
        from loaders.stark_processed import StarkProcessedSource

        return StarkProcessedSource(Path(source))
    if fmt == "stark-qa":
        from loaders.stark_qa import StarkQaSource

        return StarkQaSource(Path(source))
    if fmt == "synthetic":
        from loaders.synthetic import SyntheticSource

        return SyntheticSource(nodes=options.get("nodes", 10_000), seed=options.get("seed", 0),
                               edges_per_node=options.get("edges_per_node", 20.0))
    if fmt in STARK_DATASETS:
        from loaders.stark_download import download_processed
        from loaders.stark_processed import StarkProcessedSource

        dataset = STARK_DATASETS[fmt]
        return StarkProcessedSource(download_processed(dataset, options["cache_dir"]), dataset)
    raise LoadError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
