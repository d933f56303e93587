"""From a source name or path to a loaded SKB: what `stark-pg load` and `stark_pg.load` both do.

The format is detected, the source opened (a download happens here, before any connection is
held), then the SKB (or a query file, into a loaded SKB) is loaded in one transaction, and a replace
that carried indexes over refreshes them for the nodes whose text changed. One place for that order,
so that the command line and the Python API cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from stark_pg.options import OptionError
from stark_pg.progress import Reporter
from stark_pg.skb.records import LoadError

IF_EXISTS = ("replace", "skip", "fail")


@dataclass
class OpenedSource:
    """A source ready to load: what the user named, its detected format and the loader reading it."""

    label: str
    format: str
    reader: object

    @property
    def query_only(self) -> bool:
        from loaders.detect import is_query_only

        return is_query_only(self.format)


@dataclass
class LoadOutcome:
    summary: object                               # stark_pg.skb.store.LoadSummary
    kept: list[str] = field(default_factory=list)         # index kinds carried over from a replaced version
    refreshed: dict = field(default_factory=dict)         # what refresh_indexes rebuilt (empty with refresh off)
    prepared: dict = field(default_factory=dict)          # prepare_fusion_questions' counts per query encoder

    def to_dict(self) -> dict:
        return self.summary.to_dict() | ({"refreshed": self.refreshed} if self.refreshed else {}) | (
            {"fusion_questions": self.prepared} if self.prepared else {})


def check_if_exists(value: str, setting: str = "--if-exists") -> str:
    if value not in IF_EXISTS:
        raise OptionError(f"{setting} must be replace, skip or fail, not {value!r}")
    return value


def open_source(source: str | Path, *, nodes: int = 10_000, seed: int = 0, edges_per_node: float = 20.0,
                cache_dir: Path | None = None) -> OpenedSource:
    """Detect the format of `source` (a path, `synthetic` or `stark-amazon|mag|prime`) and open it; the
    synthetic options shape a generated SKB, `cache_dir` is where downloads go (STARK_PG_HOME/downloads)."""
    from loaders import detect
    from stark_pg.config import home_dir

    label = str(source)
    fmt = detect.detect_format(label)
    reader = detect.open_source(label, fmt, nodes=nodes, seed=seed, edges_per_node=edges_per_node,
                                cache_dir=cache_dir or home_dir() / "downloads")
    return OpenedSource(label, fmt, reader)


def load_opened(conn: psycopg.Connection, opened: OpenedSource, name: str | None = None, *, skb: str | None = None,
                if_exists: str = "replace", drop_dangling: bool = False, refresh: bool = True,
                progress: Reporter | None = None, skb_setting: str = "--skb NAME") -> LoadOutcome:
    """Load an opened source: an SKB as `name` (default: the source's own name), or query files into the
    loaded SKB `skb`; then, unless `refresh` is off, refresh the indexes a replace carried over and
    prepare the training questions for the SKB's fusion models (stark_pg.train.fusion)."""
    from stark_pg.index.refresh import carried_indexes, refresh_indexes
    from stark_pg.skb.store import load_queries, load_skb
    from stark_pg.train.fusion import prepare_fusion_questions

    check_if_exists(if_exists)
    if opened.query_only:
        if not skb:
            raise LoadError(f"{opened.label} holds queries only: name the SKB they belong to with {skb_setting}")
        summary = load_queries(conn, skb, opened.reader, drop_dangling=drop_dangling, progress=progress)
    else:
        summary = load_skb(conn, opened.reader, name, if_exists=if_exists, drop_dangling=drop_dangling,
                           progress=progress)
    kinds = carried_indexes(summary.carried)
    refreshed = refresh_indexes(conn, summary.name, kinds, progress) if kinds and refresh else {}
    prepared = prepare_fusion_questions(conn, summary.name, progress) if refresh and summary.status != "skipped" else {}
    return LoadOutcome(summary, kinds, refreshed, prepared)
