"""Storing an SKB: validate while streaming, bulk-load with COPY, all in one transaction.

A load either commits completely or leaves the database exactly as it was. Replacing an SKB builds
the new version beside the old one, under a new skb_id, while the old one stays fully readable; at
the end, in the same transaction, the old one's derived data (lexical postings, vectors, eval runs,
trained models: `stark.carry_over_skb`) moves to the new one, the old one is deleted and the new one
takes its name. The locks that block other SKBs' readers (dropping the old version's per-SKB HNSW
indexes) are taken only in that last step, moments before the commit. Its edge partition is emptied
row by row (a query whose snapshot predates the commit must still find the old version's edges, and
dropping a table is not MVCC-safe) and dropped after the next load. The carried postings and
vectors keep the hash of the text they were made from, so the next index build (`stark-pg load`
runs it: stark_pg.index.refresh) redoes only the nodes whose text changed.
Memory stays flat as inputs grow: nodes and edges stream into COPY; only the set of node ids is
kept (to check edge endpoints and answer ids), and node text is spooled to a temporary file while
the node rows stream, then copied into `node_field`. Edges go into a new partition of `stark.edge`
that gets its indexes in bulk afterwards (far cheaper than maintaining two btrees row by row).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Literal

import psycopg
from psycopg import sql as pgsql

from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.skb import copy_text
from stark_pg.skb.copy_text import CopyWriter
from stark_pg.skb.locks import lock_skb_name
from stark_pg.skb.records import LoadError, QuerySource, SkbSource, check_int8

IfExists = Literal["replace", "skip", "fail"]
_BATCH = 10_000


@dataclass
class LoadSummary:
    name: str
    skb_id: int | None
    status: str                                     # loaded, replaced, skipped, queries-loaded
    nodes_by_type: dict[str, int] = field(default_factory=dict)
    edges_by_relation: dict[str, int] = field(default_factory=dict)
    queries_by_split: dict[str, int] = field(default_factory=dict)
    fields: int = 0
    dropped_edges: int = 0
    dropped_queries: int = 0
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)   # nodes (with fields), edges, queries
    carried: dict[str, int] = field(default_factory=dict)           # replace: rows of derived tables kept

    @property
    def nodes(self) -> int:
        return sum(self.nodes_by_type.values())

    @property
    def edges(self) -> int:
        return sum(self.edges_by_relation.values())

    @property
    def queries(self) -> int:
        return sum(self.queries_by_split.values())

    def to_dict(self) -> dict:
        return asdict(self) | {"nodes": self.nodes, "edges": self.edges, "queries": self.queries}


class SkbExists(Exception):
    """Loading a name that exists with --if-exists fail."""


def load_skb(conn: psycopg.Connection, source: SkbSource, name: str | None = None, *,
             if_exists: IfExists = "replace", drop_dangling: bool = False,
             progress: Reporter | None = None) -> LoadSummary:
    """Load `source` as SKB `name` (default: the source's own name) in a single transaction."""
    name = name or source.default_name
    progress = progress or NullReporter()
    started = time.perf_counter()
    summary = LoadSummary(name=name, skb_id=None, status="loaded")
    with conn.transaction():
        lock_skb_name(conn, name)
        existing = sql().find_skb_id(conn, name=name)
        if existing is not None:
            if if_exists == "skip":
                summary.status, summary.skb_id = "skipped", existing
                return summary
            if if_exists == "fail":
                raise SkbExists(f"an SKB named {name!r} exists (use --if-exists replace or skip)")
            summary.status = "replaced"
        # beside the old one until the swap; no other session sees this name (the row is uncommitted)
        building_name = name if existing is None else f"{name}\x01replacing {existing}"
        skb_id = sql().create_skb(conn, name=building_name, source=source.location, format=source.format,
                                  meta=json.dumps(source.meta))
        summary.skb_id = skb_id
        stage_started = time.perf_counter()
        node_ids = _copy_nodes(conn, skb_id, source, summary, progress)
        summary.stage_seconds["nodes"] = round(time.perf_counter() - stage_started, 3)
        stage_started = time.perf_counter()
        _copy_edges(conn, skb_id, source, node_ids, drop_dangling, summary, progress)
        summary.stage_seconds["edges"] = round(time.perf_counter() - stage_started, 3)
        stage_started = time.perf_counter()
        _copy_queries(conn, skb_id, _valid_queries(source, node_ids, drop_dangling, summary, progress))
        summary.stage_seconds["queries"] = round(time.perf_counter() - stage_started, 3)
        summary.seconds = round(time.perf_counter() - started, 3)
        sql().update_skb_meta(conn, skb_id=skb_id, meta=json.dumps(source.meta | {"load": _meta(summary)}))
        if existing is not None:
            _swap(conn, existing, skb_id, name, summary)
    _drop_orphan_tables(conn, keep=existing)
    _analyze(conn)
    return summary


def _swap(conn, old_id: int, new_id: int, name: str, summary: LoadSummary) -> None:
    """The replacing load's last step: derived data moves over, the old SKB goes, the new one is `name`."""
    summary.carried = sql().carry_over_skb(conn, old_id=old_id, new_id=new_id) or {}
    sql().retire_replaced_skb(conn, skb_id=old_id)
    sql().rename_skb(conn, skb_id=new_id, name=name)


def _drop_orphan_tables(conn, keep: int | None) -> None:
    """The emptied edge partitions earlier replaces left behind (see stark.delete_skb_rows), after the
    load and in a transaction of its own: the AccessExclusive lock it takes on stark.edge must not last
    a whole load. `keep` is the one this load has just emptied (older snapshots may still read it)."""
    with conn.transaction():
        sql().drop_orphan_tables(conn, keep=keep)


def load_queries(conn: psycopg.Connection, skb_name: str, source: QuerySource, *, drop_dangling: bool = False,
                 progress: Reporter | None = None) -> LoadSummary:
    """Attach queries to a loaded SKB, replacing its queries of the splits the source contains."""
    progress = progress or NullReporter()
    started = time.perf_counter()
    summary = LoadSummary(name=skb_name, skb_id=None, status="queries-loaded")
    with conn.transaction():
        lock_skb_name(conn, skb_name)
        skb_id = sql().find_skb_id(conn, name=skb_name)
        if skb_id is None:
            raise LoadError(f"no SKB named {skb_name!r} is loaded; load its nodes and edges first")
        summary.skb_id = skb_id
        node_ids = {row[0] for row in sql().node_ids(conn, skb_id=skb_id)}
        rows = list(_valid_queries(source, node_ids, drop_dangling, summary, progress))
        sql().delete_queries_of_splits(conn, skb_id=skb_id, splits=sorted({q.split for q in rows}))
        _copy_queries(conn, skb_id, rows)
        summary.seconds = round(time.perf_counter() - started, 3)
    _analyze(conn)
    return summary


def _copy_nodes(conn, skb_id: int, source: SkbSource, summary: LoadSummary, progress: Reporter) -> set[int]:
    node_ids: set[int] = set()
    types: Counter[str] = Counter()
    label = source.nodes_label
    with tempfile.TemporaryFile() as spool, progress.stage("nodes") as stage:
        fields_out = CopyWriter(spool)
        with conn.cursor().copy("copy stark.node (skb_id, node_id, type, name, attrs) from stdin") as cp:
            nodes_out = CopyWriter(cp)
            pending = 0
            for position, node in source.nodes():
                if node.node_id in node_ids:
                    raise LoadError(f"duplicate node id {node.node_id}", label, position)
                check_int8(node.node_id, "node id", label, position)
                node_ids.add(node.node_id)
                types[node.type] += 1
                nodes_out.line(f"{skb_id}\t{node.node_id}\t{copy_text.text(_clean(node.type, label, position))}\t"
                               f"{copy_text.text(_clean(node.name, label, position))}\t"
                               f"{copy_text.jsonb(_clean_json(node.attrs, label, position))}\n")
                for field_name, body in node.fields.items():
                    if body:
                        fields_out.line(f"{skb_id}\t{node.node_id}\t{copy_text.text(_clean(field_name, label, position))}\t"
                                        f"{copy_text.text(_clean(body, label, position))}\n")
                        summary.fields += 1
                pending += 1
                if pending == _BATCH:
                    stage.advance(pending)
                    pending = 0
            nodes_out.flush()
            stage.advance(pending)
        if not node_ids:
            raise LoadError("no nodes", label)
        fields_out.flush()
        spool.seek(0)
        with conn.cursor().copy("copy stark.node_field (skb_id, node_id, field, body) from stdin") as cp:
            while chunk := spool.read(1 << 20):
                cp.write(chunk)
    summary.nodes_by_type = dict(types.most_common())
    return node_ids


def _copy_edges(conn, skb_id: int, source: SkbSource, node_ids: set[int], drop_dangling: bool,
                summary: LoadSummary, progress: Reporter) -> None:
    relations: Counter[str] = Counter()
    escaped: dict[str, str] = {}
    label = source.edges_label
    partition = sql().create_edge_partition(conn, skb_id=skb_id)
    # FREEZE: the partition was created in this transaction and no other session can see it before the
    # commit, so its rows go in frozen; reads after the load then don't rewrite every page to set hint bits
    copy_edges = pgsql.SQL("copy {} (skb_id, src, relation, dst) from stdin with (freeze)").format(
        pgsql.Identifier(*partition.split(".")))
    with progress.stage("edges") as stage, conn.cursor().copy(copy_edges) as cp:
        out = CopyWriter(cp)
        pending = 0
        for position, src, relation, dst in source.edges():
            if src not in node_ids or dst not in node_ids:
                if drop_dangling:
                    summary.dropped_edges += 1
                    continue
                missing = src if src not in node_ids else dst
                raise LoadError(f"edge endpoint {missing} is not a node (pass --drop-dangling to drop such edges)",
                                label, position)
            rel = escaped.get(relation)
            if rel is None:
                rel = escaped[relation] = copy_text.text(_clean(relation, label, position))
            relations[relation] += 1
            out.line(f"{skb_id}\t{src}\t{rel}\t{dst}\n")
            pending += 1
            if pending == _BATCH * 10:
                stage.advance(pending)
                pending = 0
        out.flush()
        stage.advance(pending)
    with progress.stage("edge indexes") as stage:
        sql().attach_edge_partition(conn, skb_id=skb_id)
        stage.advance()
    summary.edges_by_relation = dict(relations.most_common())


def _copy_queries(conn, skb_id: int, queries) -> None:
    """COPY already validated queries (see _valid_queries) into stark.query."""
    with conn.cursor().copy("copy stark.query (skb_id, query_id, split, body, answer_ids) from stdin") as cp:
        out = CopyWriter(cp)
        for query in queries:
            out.line(_query_line(skb_id, query))
        out.flush()


def _valid_queries(source, node_ids: set[int], drop_dangling: bool, summary: LoadSummary, progress: Reporter):
    splits: Counter[str] = Counter()
    seen: set[int] = set()
    label = source.queries_label
    with progress.stage("queries") as stage:
        for position, query in source.queries():
            if query.query_id in seen:
                raise LoadError(f"duplicate query id {query.query_id}", label, position)
            check_int8(query.query_id, "query id", label, position)
            seen.add(query.query_id)
            missing = [a for a in query.answer_ids if a not in node_ids]
            if missing:
                if drop_dangling:
                    summary.dropped_queries += 1
                    continue
                raise LoadError(f"answer ids {missing[:5]} of query {query.query_id} are not nodes "
                                "(pass --drop-dangling to drop such queries)", label, position)
            _clean(query.body, label, position)
            _clean(query.split, label, position)
            splits[query.split] += 1
            stage.advance()
            yield query
    summary.queries_by_split = dict(sorted(splits.items()))


def _query_line(skb_id: int, q) -> str:
    return (f"{skb_id}\t{q.query_id}\t{copy_text.text(q.split)}\t{copy_text.text(q.body)}\t"
            f"{copy_text.bigint_array(q.answer_ids)}\n")


def _clean(value: str | None, label: str, position) -> str | None:
    """PostgreSQL text cannot hold NUL characters, nor UTF-8 lone surrogates ("\\ud800" in JSON):
    say where one is instead of failing mid-COPY."""
    if value is not None:
        if "\x00" in value:
            raise LoadError("text contains a NUL character", label, position)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise LoadError(f"text contains a lone surrogate (U+{ord(value[exc.start]):04X}), not valid Unicode",
                            label, position) from None
    return value


ATTRS_MAX_DEPTH = 64
"""How deeply `attrs` may nest: far beyond any real attribute, well within what jsonb and json.dumps handle."""


def _clean_json(value, label: str, position):
    """`value` (a node's attrs) if jsonb can store it: no NUL or lone surrogate in any string or key,
    no deeper than ATTRS_MAX_DEPTH. Walked without recursion, so a hostile depth cannot overflow the stack."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _clean(item, label, position)
        elif isinstance(item, (dict, list)):
            if depth > ATTRS_MAX_DEPTH:
                raise LoadError(f"attrs nested deeper than {ATTRS_MAX_DEPTH} levels", label, position)
            if isinstance(item, dict):
                for key in item:
                    _clean(str(key), label, position)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
        elif isinstance(item, float) and not math.isfinite(item):
            raise LoadError(f"attrs hold {item}, which JSON cannot represent", label, position)
    return value


def _meta(summary: LoadSummary) -> dict:
    keep = ("nodes", "edges", "queries", "fields", "dropped_edges", "dropped_queries", "seconds")
    return {k: v for k, v in summary.to_dict().items() if k in keep}


def _analyze(conn) -> None:
    """Fresh planner statistics after a bulk change (cheap: PostgreSQL samples)."""
    with conn.transaction():
        conn.execute("analyze stark.node, stark.node_field, stark.edge, stark.query")
