"""The searches of an evaluation run on a Ray cluster: `stark-pg eval --executor ray`.

Why it is built this way:
- The query set is cut into shards of SHARD queries, each a Ray task that opens a connection of its own
  to the evaluation's database and searches its queries one after another, as a sequential run would,
  with the same search function (stark_pg/eval/runner.py: its failover, its latency, a failing query
  recorded rather than fatal). A task is retried by Ray if its worker dies.
- The results come back to the evaluation's process, which stores them in the query set's order under
  the one run id, as it stores a local run's: the stored rows, and where an interrupted run resumes, do
  not depend on where the searches ran.
- A query's latency is its search's wall time in the worker, on the one CPU its task holds.
- The tasks reach PostgreSQL themselves, so the database must be reachable from the workers under the
  DSN this process uses (a TCP address for a cluster of several machines; the embedded server's Unix
  socket serves workers on this machine only).
"""

from __future__ import annotations

from typing import Callable, Iterator

from stark_pg.embed.ray_executor import RayOptions, RaySession

SHARD = 16          # queries per task: enough to amortise a task's connection, few enough to spread


def _search_shard(dsn: str, search: Callable, resolve: Callable, method: str, skb_name: str, options, queries,
                  depth: int) -> list:
    """In a Ray worker: the shard's (query, ranking, error, latency_ms), on a connection of its own."""
    import queue

    import psycopg
    from pgvector.psycopg import register_vector

    from stark_pg.embed import backends

    backends.set_cpu_threads(1)          # the task's one CPU: a query encoder must not take the node's cores
    module = resolve(method)
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        register_vector(conn)
        pool: queue.SimpleQueue = queue.SimpleQueue()
        pool.put(conn)
        return [search(pool, module, skb_name, q, depth, options) for q in queries]
    finally:
        conn.close()


def searched_on_ray(ray_options: RayOptions, dsn: str, search: Callable, resolve: Callable, method: str,
                    skb_name: str, options, todo: list, depth: int) -> Iterator[tuple]:
    """(query, ranking, error, latency_ms) for each query of `todo`, in its order, searched in shards on
    the cluster (`ray_options.workers` tasks at once, else as many as it has CPUs)."""
    session = RaySession(ray_options.address)
    try:
        ray = session.ray
        task = ray.remote(_search_shard).options(num_cpus=1, max_retries=3)
        shards = [todo[i:i + SHARD] for i in range(0, len(todo), SHARD)]
        limit = ray_options.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        refs: list = []
        for n in range(len(shards)):
            while len(refs) < min(len(shards), n + limit):      # up to `limit` shards ahead of the one stored
                shard = shards[len(refs)]
                refs.append(task.remote(dsn, search, resolve, method, skb_name, options, shard, depth))
            yield from ray.get(refs[n])
            refs[n] = None
    finally:
        session.close()
