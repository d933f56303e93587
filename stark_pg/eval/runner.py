"""Running methods over a query set and storing every query's outcome in stark.eval_result.

Each query's result is committed as soon as it is scored, and a run is identified by a hash of its
configuration (SKB, method, settings, query set, depth), so re-running an interrupted evaluation
continues the unfinished run instead of starting over. An evaluation holds its run (an advisory lock)
while it works on it, so the same evaluation started twice at once makes two runs rather than storing
each query twice in one. A query whose method fails (an LLM error, a timeout) is stored with the reason
and scores zero; the run goes on.

With --workers N (stark_pg.llm.concurrency) up to N queries are searched at once, each on a
connection of its own (a connection serves one transaction at a time), which is what a method that
waits seconds on a served model needs. Results are still stored one by one in the query set's order
on the caller's connection, so the stored rows (and where a resumed run starts) are those of a
sequential run; a query's latency is still its own search's wall time.

A query's latency is what its method would take alone: its search's wall time plus the cold cost of
any query embedding the search found cached (another method of the same process embedded the same
text first; `stark_pg.embed.query_embeddings`). So every method pays for its own query embedding, as
it would for a user who runs it alone, and methods compare alike whatever order they ran in.

With `reads` (a function opening a read connection: on a standby, when the DSN names a primary and
standbys; stark_pg.db.connection), the searches run on connections of their own from it while the
results are still stored through the caller's connection, on the primary. A read connection lost
mid-query (its standby stopped or died) is replaced by a new one from `reads`, which libpq points at
another standby or the primary, and the query is searched again there: it is neither lost, nor
recorded as failed, nor stored twice.

With `ray` (RayOptions: `stark-pg eval --executor ray`), the searches run in shards on a Ray cluster,
each task on a connection of its own (stark_pg/eval/ray_shards.py); the results are stored here as
above, in the query set's order, under the one run id.

The methods themselves come from whoever calls: a `Resolve` (the CLI and the Python API hand over
stark_pg.retrieve.get_method) turns a method's name into its module (`Options`, `search`). Evaluation
thus sits beside retrieval, not on top of it, and a test or a benchmark can evaluate a method that is
not registered.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import queue
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import numpy as np
import psycopg

from stark_pg.db.connection import conninfo_of, connect_like, one_snapshot
from stark_pg.embed import query_embeddings
from stark_pg.eval import metrics
from stark_pg.eval.query_sets import QuerySet
from stark_pg.llm import concurrency
from stark_pg.llm.embeddings import cache_in
from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.ranking import Ranking
from stark_pg.skb.records import LoadError, MissingIndex


LATENCY_NOTE = ("what one question's search takes with the method alone: its query embedding is counted at "
                "what computing it took, even where another method of the run had computed it first (the vector "
                "is cached per process)")
"""What a stored latency includes, as reports and tables say it."""

Resolve = Callable[[str], ModuleType]
"""A method's name -> its module, which has `Options` (a dataclass) and `search(conn, skb, query, k, options)`."""

Reads = Callable[[], psycopg.Connection]
"""Opens a new connection to search on (a standby where there is one)."""

FAILOVER_TRIES = 3
"""How many times a query is searched again on a new read connection after losing one."""


@dataclass
class RunOutcome:
    run_id: int
    method: str
    options: dict
    summary: dict
    resumed_from: int          # queries already done when this invocation started


def run_method(conn: psycopg.Connection, skb_id: int, skb_name: str, method: str, options, query_set: QuerySet, *,
               resolve: Resolve, depth: int = 1000, stored_k: int = 100,
               progress: Reporter | None = None, reads: Reads | None = None, ray=None) -> RunOutcome:
    progress = progress or NullReporter()
    module = resolve(method)
    if hasattr(module, "resolve_options"):      # defaults that depend on the SKB (hybrid's tuned ones)
        options = module.resolve_options(conn, skb_name, options)
    settings = dataclasses.asdict(options)
    config = {"method": method, "options": settings, "query_set": query_set.label, "depth": depth,
              "stored_k": stored_k, "queries": len(query_set.queries)}
    config_hash = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()
    run_id = _claim_run(conn, skb_id, config_hash, lambda: sql().create_run(
        conn, skb_id=skb_id, method=method, options=json.dumps(settings), query_set=query_set.label, depth=depth,
        stored_k=stored_k, config_hash=config_hash))
    try:
        return _run(conn, skb_id, skb_name, run_id, method, settings, module, options, query_set, depth=depth,
                    stored_k=stored_k, progress=progress, reads=reads, ray=ray, resolve=resolve)
    finally:
        try:
            with conn.transaction():
                sql().release_run(conn, run_id=run_id)
        except psycopg.Error:       # a broken connection: the server releases the lock when it closes
            pass


def _claim_run(conn: psycopg.Connection, skb_id: int, config_hash: str, create) -> int:
    """The newest unfinished run of this configuration that no other evaluation is continuing, or a new
    one (`create()`), held by a session lock until run_method ends: an evaluation started twice at once
    continues one run in each process rather than both storing the same query in the same run."""
    with conn.transaction():
        for (run_id,) in sql().unfinished_runs(conn, skb_id=skb_id, config_hash=config_hash):
            if sql().try_claim_run(conn, run_id=run_id):
                return run_id
        run_id = create()
        sql().try_claim_run(conn, run_id=run_id)       # new: nobody else can hold it
        return run_id


def _run(conn: psycopg.Connection, skb_id: int, skb_name: str, run_id: int, method: str, settings: dict,
         module: ModuleType, options, query_set: QuerySet, *, depth: int, stored_k: int, progress: Reporter,
         reads: Reads | None, ray, resolve: Resolve) -> RunOutcome:
    """Search and store the queries of the claimed run not yet stored, then its summary."""
    done = {row[0] for row in sql().done_query_ids(conn, skb_id=skb_id, run_id=run_id)}
    todo = [q for q in query_set.queries if q.query_id not in done]
    with progress.stage(method, total=len(query_set.queries)) as stage:
        stage.advance(len(done))
        workers = min(concurrency.current(), len(todo)) if calls_served_model(settings) else 1
        with ExitStack() as stack:
            if ray is not None and todo:
                from stark_pg.eval.ray_shards import searched_on_ray

                results = searched_on_ray(ray, conninfo_of(conn), _search, resolve, method, skb_name, options,
                                          todo, depth)
            else:
                pool = stack.enter_context(_connections(conn, workers, reads))

                def searched(query):
                    return _search(pool, module, skb_name, query, depth, options, reads)

                results = concurrency.ordered_iter(searched, todo, workers)
            for query, ranking, error, latency_ms in results:
                ranked = ranking.node_ids
                scores = [h.score for h in ranking.hits]
                values = metrics.evaluate(ranked, query.answer_ids)
                ranks = metrics.answer_ranks(ranked, query.answer_ids)
                with conn.transaction():
                    sql().insert_result(conn, skb_id=skb_id, run_id=run_id, query_id=query.query_id,
                                        ranked_ids=ranked[:stored_k], scores=scores[:stored_k],
                                        answer_ids=query.answer_ids, answer_ranks=[r or 0 for r in ranks],
                                        metrics=json.dumps(values), latency_ms=latency_ms,
                                        trace=json.dumps(ranking.trace, default=str), error=error)
                stage.advance()
    summary = summarize_run(conn, skb_id, run_id)
    with conn.transaction():
        sql().finish_run(conn, run_id=run_id, summary=json.dumps(summary))
    return RunOutcome(run_id, method, settings, summary, resumed_from=len(done))


def calls_served_model(settings: dict) -> bool:
    """Whether a method's settings name a served model (an `llm`, or an `openai:` embedding model):
    only such methods wait on the network, and only they run queries concurrently; the others would
    just contend for the same cores."""
    return "llm" in settings or any(isinstance(v, str) and v.startswith("openai:") for v in settings.values())


@contextmanager
def _connections(conn: psycopg.Connection, n: int, reads: Reads | None = None):
    """A queue of the connections the searches take turns on: `conn` alone for a sequential run,
    else `n` connections of their own (closed at the end), one per worker; with `reads`, always `n`
    connections from it."""
    pool: queue.SimpleQueue = queue.SimpleQueue()
    if reads is not None:
        own = concurrency.ordered_map(lambda _: reads(), range(n), n)
    else:
        own = concurrency.ordered_map(lambda _: connect_like(conn), range(n), n) if n > 1 else []   # opened at once
    for c in own or [conn]:
        pool.put(c)
    opened = list(own)
    try:
        yield pool
    finally:
        while not pool.empty():             # the ones in the pool now: a lost one was replaced
            c = pool.get()
            if c is not conn:
                c.close()
        for c in opened:
            c.close()


def _search(pool: queue.SimpleQueue, module: ModuleType, skb_name: str, query, depth: int, options,
            reads: Reads | None = None):
    """One query's ranking (or its error) and its latency, on a connection taken from `pool`; with
    `reads`, searched again on a new read connection when the one it ran on was lost."""
    conn = pool.get()
    try:
        for attempt in range(FAILOVER_TRIES + 1):
            started = time.perf_counter()
            with query_embeddings() as spent:
                try:
                    with cache_in(conn):      # an embedding API's vectors are cached in this database
                        with one_snapshot(conn):     # one version of the SKB, even across a replace
                            ranking, error = module.search(conn, skb_name, query.body, depth, options), None
                except Exception as exc:  # a failing query is recorded, not fatal
                    if reads is not None and _lost(conn) and attempt < FAILOVER_TRIES:
                        conn.close()
                        conn = reads()        # libpq skips the server that went away
                        continue
                    if not conn.closed:
                        conn.rollback()
                    if needs_setup(exc):      # ...unless every query would fail alike
                        raise
                    ranking, error = Ranking([], {}), f"{type(exc).__name__}: {exc}"
            return query, ranking, error, (time.perf_counter() - started) * 1000 + spent.cached_ms
    finally:
        pool.put(conn)


def _lost(conn: psycopg.Connection) -> bool:
    """Whether a connection is gone (its server stopped, died, or cut it off), rather than a query failed."""
    return conn.closed or conn.broken


def summarize_run(conn: psycopg.Connection, skb_id: int, run_id: int) -> dict:
    """Mean of every metric, the query count, failures (and the first one's error, by query id), and
    latency p50/p95 over a run's stored results;
    plus LLM totals (calls, cache hits, tokens, seconds, cost) when the method's traces carry them."""
    from stark_pg.llm.usage import run_llm_usage

    rows = list(sql().run_results(conn, skb_id=skb_id, run_id=run_id))
    per_query = [row[5] for row in rows]
    latencies = np.array([row[6] for row in rows]) if rows else np.zeros(1)
    errors = [row[7] for row in rows if row[7]]
    summary = {"queries": len(rows), "failed": len(errors),
               "metrics": metrics.mean_metrics(per_query),
               "latency_ms": {"p50": round(float(np.percentile(latencies, 50)), 3),
                              "p95": round(float(np.percentile(latencies, 95)), 3),
                              "mean": round(float(latencies.mean()), 3)}}
    if errors:
        summary["first_error"] = errors[0]
    llm = run_llm_usage(conn, skb_id, run_id)
    if llm:
        summary["llm"] = llm
    return summary


def needs_setup(exc: BaseException) -> bool:
    """Whether a failed search failed for every query alike: an index, a trained model or the SKB itself
    is missing (MissingIndex; LoadError naming the SKB or model; one of our SQL functions raising with a
    hint that says which `stark-pg` command to run). An evaluation stops on such an error instead of
    recording it once per query as an all-zero run."""
    if isinstance(exc, (MissingIndex, LoadError)):
        return True
    hint = exc.diag.message_hint if isinstance(exc, psycopg.Error) and exc.diag else None
    return bool(hint) and hint.startswith("run `stark-pg ")
