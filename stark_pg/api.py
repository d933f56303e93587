"""stark-pg from Python: the command line's load, info, index, search and eval as objects.

    import stark_pg

    with stark_pg.connect() as db:                  # the embedded server, like the CLI (or dsn=...)
        skb = db.skb("synthetic-1000")
        hits = skb.search("...", method="hybrid", k=10, fusion="weighted")
        result = skb.evaluate(["bm25", "vss", "hybrid"], split="val")

Not a second implementation: every call goes through the functions the CLI commands call
(stark_pg.loading, stark_pg.index, stark_pg.retrieve.results, stark_pg.eval.session), so a search
here ranks exactly as `stark-pg search` does and an evaluation stores the same runs as `stark-pg
eval`. Errors are the CLI's expected errors as exceptions (LoadError for an unknown SKB,
UnknownMethod, OptionError, MissingIndex, DeviceError), with the messages the CLI prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from stark_pg.embed import DeviceError
from stark_pg.options import OptionError
from stark_pg.retrieve import MissingIndex, UnknownMethod, get_method
from stark_pg.retrieve.results import SearchHit
from stark_pg.skb.records import LoadError

__all__ = ["connect", "load", "Database", "SKB", "SearchHit", "Hits", "Evaluation",
           "LoadError", "UnknownMethod", "OptionError", "MissingIndex", "DeviceError"]

DEFAULT_METHODS = ("bm25", "vss", "hybrid")     # `stark-pg eval`'s default: no LLM, no training


def connect(dsn: str | None = None) -> "Database":
    """A connection to stark-pg's database: `dsn`, else STARK_PG_DSN, else the embedded server (started
    if it is not running). The schema is brought up to date on first use, as the CLI does."""
    return Database(dsn)


def load(source: str | Path, name: str | None = None, *, dsn: str | None = None, **options) -> dict:
    """`stark-pg load SOURCE` from Python, on its own connection: returns the load summary (the dict
    `stark-pg load --json` prints). Options as Database.load's."""
    with connect(dsn) as db:
        return db.load_summary(source, name, **options)


def _reporter(progress: bool):
    from stark_pg.progress import NullReporter, RichReporter

    return RichReporter() if progress else NullReporter()


class Database:
    """One open connection (and, on a DSN with standbys, one more for searches); use it as a context manager
    (or call close()). Not for several threads at once."""

    def __init__(self, dsn: str | None = None):
        from stark_pg.db import connect as open_connection

        self.dsn = dsn
        self.conn = open_connection(dsn)
        self._read_conn = None

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._read_conn is not None:
            self._read_conn.close()
        self.conn.close()

    @property
    def read_conn(self):
        """Where searches run: a standby's connection, opened on first use, when the DSN names a primary and
        standbys (as `stark-pg search` reads there); else the one connection."""
        reads = self._read_opener
        if reads is None:
            return self.conn
        if self._read_conn is None or self._read_conn.closed:
            self._read_conn = reads()
        return self._read_conn

    @cached_property
    def _read_opener(self):
        """Opens a read connection on a standby when the DSN names a primary and standbys (where searches
        and an evaluation's searches go, as the CLI's do), else None: they read on this connection.
        Worked out once: resolving the DSN may ask the embedded server whether it runs."""
        from stark_pg.db import connect as open_connection
        from stark_pg.db.connection import resolve_dsn, several_hosts

        url = resolve_dsn(self.dsn)
        return (lambda: open_connection(url, read=True)) if several_hosts(url) else None

    @property
    def closed(self) -> bool:
        return self.conn.closed

    def skbs(self) -> list[str]:
        """Names of the loaded SKBs."""
        from stark_pg.skb.catalog import all_skb_names

        return all_skb_names(self.conn)

    def skb(self, name: str) -> "SKB":
        """The loaded SKB `name`; LoadError naming the known ones if there is none."""
        from stark_pg.skb.catalog import require_skb

        require_skb(self.conn, name)
        return SKB(self, name)

    def load(self, source: str | Path, name: str | None = None, **options) -> "SKB":
        """Load `source` as `stark-pg load` does (a directory, a query CSV, "synthetic", "stark-prime", ...)
        and return the SKB (for query files: the SKB `skb=` they went into). See load_summary for options."""
        summary = self.load_summary(source, name, **options)
        return SKB(self, summary["name"])

    def load_summary(self, source: str | Path, name: str | None = None, *, skb: str | None = None,
                     if_exists: str = "replace", drop_dangling: bool = False, refresh: bool = True,
                     nodes: int = 10_000, seed: int = 0, edges_per_node: float = 20.0,
                     cache_dir: str | Path | None = None, progress: bool = False) -> dict:
        """Load and return the summary `stark-pg load --json` prints. The options are the command's:
        `skb` (query files: the SKB they belong to), `if_exists` (replace | skip | fail), `drop_dangling`,
        `refresh` (bring kept indexes up to date after a replace), and for "synthetic" `nodes`, `seed`,
        `edges_per_node`; `progress` shows progress bars on stderr."""
        from stark_pg.loading import check_if_exists, load_opened, open_source

        check_if_exists(if_exists, "if_exists")
        opened = open_source(source, nodes=nodes, seed=seed, edges_per_node=edges_per_node,
                             cache_dir=Path(cache_dir) if cache_dir else None)
        outcome = load_opened(self.conn, opened, name, skb=skb, if_exists=if_exists, drop_dangling=drop_dangling,
                              refresh=refresh, progress=_reporter(progress), skb_setting="skb=NAME")
        return outcome.to_dict()

    def drop(self, name: str) -> None:
        """Remove an SKB and everything stored for it (`stark-pg drop`)."""
        from stark_pg.skb.catalog import drop_skb

        drop_skb(self.conn, name)


class Hits(list):
    """A list of SearchHit, best first, with the method's trace (SQL, candidate counts, explanation)."""

    def __init__(self, hits, trace: dict):
        super().__init__(hits)
        self.trace = trace

    @property
    def node_ids(self) -> list[int]:
        return [hit.node_id for hit in self]


class SKB:
    """A loaded SKB on an open Database: what the CLI commands taking an SKB name do."""

    def __init__(self, db: Database, name: str):
        self.db = db
        self.name = name

    def __repr__(self) -> str:
        return f"SKB({self.name!r})"

    def info(self) -> dict:
        """Nodes, edges, queries by split, node and relation types, text fields (`stark-pg info NAME --json`)."""
        from stark_pg.skb.catalog import skb_info

        return skb_info(self.db.conn, self.name)

    def index(self, *, lexical: bool = True, dense: bool = True, model: str | None = None,
              multi_vector: bool | None = None,
              relation_fields: bool = False, device: str | None = None, half: bool = False, batch_size: int = 32,
              progress: bool = False, graph: bool = True) -> dict:
        """Build or refresh the indexes (`stark-pg index`): returns what was (re)built, as `--json` prints it.
        Incremental: only new or changed nodes are (re)indexed. `multi_vector` is `--chunks` (None: as the
        last build, else no)."""
        from stark_pg.embed import requested_device
        from stark_pg.index.dense import BATCH_SIZE, build_dense
        from stark_pg.index.lexical import build_lexical, relation_scopes

        if dense:
            requested_device(device, "device")
        reporter, conn, report = _reporter(progress), self.db.conn, {}
        if lexical:
            extra = relation_scopes(conn, self.name) if relation_fields else None
            report["lexical"] = build_lexical(conn, self.name, progress=reporter, extra_scopes=extra)
        if graph:
            from stark_pg.index.graph import build_graph_summary

            report["graph"] = build_graph_summary(conn, self.name, progress=reporter)
        if dense:
            report["dense"] = build_dense(conn, self.name, model=model, multi_vector=multi_vector, progress=reporter,
                                          device=device, half=half, encode_batch=batch_size,
                                          batch_size=max(BATCH_SIZE, batch_size))
        return report

    def search(self, query: str, method: str = "hybrid", k: int = 10, **options) -> Hits:
        """The top `k` nodes for `query` by `method`, with the method's settings as keywords (what `-o KEY=VALUE`
        sets on the command line, e.g. `fusion="weighted", weight=0.6` for hybrid; `explain=True` where a
        method offers it, the explanation then in `.trace["explain"]`)."""
        from stark_pg.retrieve.results import check_k, configure, search_described

        check_k(k, "k")
        module, settings = configure(method, values=options)
        hits, ranking = search_described(self.db.read_conn, self.name, query, module, settings, k)
        return Hits(hits, ranking.trace)

    def evaluate(self, methods=DEFAULT_METHODS, split: str = "val", *, limit: int | None = None,
                 queries: str | Path | None = None, options: dict | None = None, depth: int = 1000,
                 stored_k: int = 100, out: str | Path | None = None, progress: bool = False,
                 workers: int | None = None) -> "Evaluation":
        """`stark-pg eval`: every query of `split` (or of the CSV `queries`) through every method, stored as
        runs (an interrupted evaluation resumes). `options` are the methods' settings: {key: value} for every
        method that has the key, or {method: {key: value}}. `out` writes the report files there. `workers`
        is `--workers`: questions of an LLM method searched at once (None: STARK_PG_WORKERS, else 1)."""
        from stark_pg.eval.report import write_report
        from stark_pg.eval.session import choose_queries, method_options, run_methods
        from stark_pg.llm import concurrency
        from stark_pg.skb.catalog import require_skb

        from stark_pg.retrieve.results import check_k

        check_k(depth, "depth")
        names = [methods] if isinstance(methods, str) else list(methods)
        settings = method_options(names, values=options or {}, resolve=get_method)
        conn = self.db.conn
        skb_id = require_skb(conn, self.name)
        chosen = choose_queries(conn, skb_id, self.name, split, queries, limit)
        with concurrency.workers(concurrency.resolve_workers(workers, "workers")):
            outcomes = run_methods(conn, skb_id, self.name, settings, chosen, resolve=get_method, depth=depth,
                                   stored_k=stored_k, progress=_reporter(progress), reads=self.db._read_opener)
        report = None
        if out:
            from stark_pg.eval.session import guess_dataset

            report = write_report(conn, skb_id, self.name, split, outcomes, Path(out), guess_dataset(self.name))
        return Evaluation.collect(conn, skb_id, self.name, chosen, outcomes, report)


def _frame(rows: list[dict]):
    """A pandas DataFrame when pandas is importable, the list of dicts otherwise."""
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows)


@dataclass
class Evaluation:
    """What an evaluation measured.

    `summary`: {method: {metric: mean}} (plain dicts always); `metrics`: one row per method (run id,
    query count, failures, latency p50/p95 in ms, every metric); `results`: one row per method and query
    (query id and text, answer ids, the stored top ranked ids, the best answer's rank or None, latency,
    error, every metric). `metrics` and `results` are pandas DataFrames when pandas is importable, lists
    of dicts otherwise. `runs` are the runner's outcomes; `report` the report.md written with `out=`."""

    skb: str
    query_set: str
    summary: dict
    metrics: object
    results: object
    runs: list = field(repr=False, default_factory=list)
    report: Path | None = None

    @classmethod
    def collect(cls, conn, skb_id: int, skb_name: str, query_set, outcomes, report=None) -> "Evaluation":
        from stark_pg.resources import queries as sql

        bodies = {q.query_id: q.body for q in query_set.queries}
        metric_rows, result_rows = [], []
        for o in outcomes:
            metric_rows.append({"method": o.method, "run_id": o.run_id, "queries": o.summary["queries"],
                                "failed": o.summary["failed"], "p50_ms": o.summary["latency_ms"]["p50"],
                                "p95_ms": o.summary["latency_ms"]["p95"], **o.summary["metrics"]})
            for query_id, ranked, _scores, answers, ranks, values, latency, error in sql().run_results(
                    conn, skb_id=skb_id, run_id=o.run_id):
                found = [r for r in ranks if r]
                result_rows.append({"method": o.method, "run_id": o.run_id, "query_id": query_id,
                                    "query": bodies.get(query_id), "answer_ids": list(answers),
                                    "ranked_ids": list(ranked), "best_answer_rank": min(found) if found else None,
                                    "latency_ms": latency, "error": error, **values})
        return cls(skb_name, query_set.label, {o.method: dict(o.summary["metrics"]) for o in outcomes},
                   _frame(metric_rows), _frame(result_rows), list(outcomes), report)
