"""Faults and load: kill -9 during load, index and eval, a postmaster crash, concurrent loads of one
name, and clients searching during a replace; prints what survived, what was lost, errors and latency.

    python benchmarks/fault_benchmark.py                       # every scenario, 20,000-node SKBs
    python benchmarks/fault_benchmark.py --nodes 5000 --only crash
    python benchmarks/fault_benchmark.py --json > faults.json

The script runs its own embedded server in a fresh temporary STARK_PG_HOME (or --home DIR; never the
user's own), drives everything through the real CLI in subprocesses (`python -m stark_pg ...`) so that
kill -9 hits real processes, and stops the server at the end. Every process it starts gets
PGAPPNAME=fault-bench:<tag>, so pg_stat_activity tells which backend serves which command.

Setup: `other` (--nodes, seed 0) is loaded and lexically indexed; it is the bystander every scenario
checks. "Committed" data is compared per SKB name: the skb_id, counts and fingerprints of its nodes,
text fields, edges and queries, and counts of its derived rows (lexical docs, vectors, eval runs and
results); plus rows or edge partitions left behind by an skb_id that no longer exists ("orphans").

1. load:       kill -9 a fresh `load synthetic --name victim` during its edge COPY: the database holds
               exactly what it held before; a re-run succeeds; then kill -9 a replace of `victim`
               (--seed 1) during its COPY: the committed `victim` is unchanged (same skb_id).
2. index:      kill -9 `index victim --no-dense` once its first lexical scope has committed, and
               `index indexed --no-multi-vector` (an SKB of --index-nodes nodes: embedding --nodes
               documents on a CPU takes too long) once its first batch of vectors has committed;
               re-runs complete, re-index fewer documents than a full build (the work done is kept),
               and search (bm25, vss) answers.
3. eval:       kill -9 `eval victim -m bm25 --split <largest split>` after a third of its queries; the
               re-run continues the same run (resumed queries = results already stored), stores every
               query once, and no second run appears.
4. crash:      kill -9 the postmaster (postmaster.pid, line 1) during a load of `crashed`; the next
               `stark-pg info --json` succeeds (waiting for recovery) and everything committed is there.
               If it fails, that is reported, and it is retried each second to go on checking; the
               server log's own redo and restart times are printed beside the client's.
5. concurrent: three `load synthetic --nodes N/4 --name same` at once: all exit 0, `same` exists once,
               with the counts its loads report.
6. replace:    8 client processes search `other` (BM25 as `stark-pg search` runs it, and
               `stark.neighbors(..., hops => 2)`) and 2 search `victim`, each on its own connection, for
               --baseline-seconds, then during `load synthetic --name victim --seed 1` (a replace of
               victim with different text, followed by its index refresh): calls, errors, empty results,
               p50/p95/max latency per client group, baseline vs during the replace. The walks start at
               nodes with 1-40 out-edges (a hub's 2-hop walk covers much of the graph). An empty answer
               on victim is "transient" when the same query answers now (BM25) or the node has
               out-edges in the new version too (2-hop); other empty walks are correct answers of the
               new graph.
7. fresh:      on a new, empty STARK_PG_HOME of its own, three `load synthetic --name same` and five
               `db status --json` at once (the first start, its restart and the schema's install race):
               all exit 0, no traceback.

Exit status 1 when an invariant fails: committed data lost or changed, leftovers of an aborted load,
a re-run or concurrent load failing, the first command after a crash failing, errors or empty results
for `other`, errors for `victim` during its own replace, a command on a fresh home failing. Transiently
empty results on `victim`, and a traceback from the load the crash interrupted, are reported as WARN
(they should be 0) without failing the run.
Most of the default run's time goes to the dense build and the replace under 10 clients.
Not a test.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("load", "index", "eval", "crash", "concurrent", "replace", "fresh")
COPY_EDGE = re.compile(r'copy\s+"?stark"?\."?edge', re.IGNORECASE)
CORE = ("skb_id", "nodes", "nodes_fp", "fields", "fields_fp", "edges", "edges_fp", "queries", "queries_fp")
DERIVED = ("lex_scopes", "lex_docs", "vectors", "eval_runs", "eval_results")


# --------------------------------------------------------------------------------------------------
# the search clients of scenario 6 (separate processes, each with its own connection)

def _client(uri: str, skb: str, queries: list[str], nodes: list[int], seed: int, ready, stop, out_path: str) -> None:
    import psycopg

    from stark_pg.retrieve import get_method
    from stark_pg.retrieve.results import search_described

    bm25 = get_method("bm25")
    rng = random.Random(seed)
    records = []                      # (wall start, op, ms, rows, error, argument: query index or node id)

    def connect():
        return psycopg.connect(uri, autocommit=True)

    conn = connect()
    ready.set()
    while not stop.is_set():
        for op in ("bm25", "neighbors"):
            argument = rng.randrange(len(queries)) if op == "bm25" else rng.choice(nodes)
            started, clock = time.time(), time.perf_counter()
            rows, error = 0, None
            try:
                if op == "bm25":
                    # the path of `stark-pg search` and the Python API: the search's statements on one snapshot
                    rows = len(search_described(conn, skb, queries[argument], bm25, bm25.Options(), k=10)[0])
                else:
                    rows = conn.execute("select count(*) from stark.neighbors(%s, %s, hops => 2)",
                                        (skb, argument)).fetchone()[0]
            except Exception as exc:  # every failure is a finding: record it and go on
                error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                if conn.closed or conn.broken:
                    try:
                        conn = connect()
                    except Exception:
                        time.sleep(0.1)
            records.append((started, op, (time.perf_counter() - clock) * 1000, rows, error, argument))
    conn.close()
    with open(out_path, "w") as handle:
        json.dump(records, handle)


# --------------------------------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Bench:
    def __init__(self, args, home: Path, uri: str):
        self.args = args
        self.home = home
        self.pgdata = home / "pgdata"
        self.uri = uri
        self.env = dict(os.environ, STARK_PG_HOME=str(home))
        self.env.pop("STARK_PG_DSN", None)
        self.children: list[subprocess.Popen] = []
        self._conn = None
        self.results: dict[str, dict] = {}
        self.verbose = not args.json

    # -- output ---------------------------------------------------------------------------------

    def say(self, text: str = "") -> None:
        if self.verbose:
            print(text, flush=True)

    def progress(self, text: str) -> None:
        print(f"  .. {text}", file=sys.stderr, flush=True)

    # -- processes ------------------------------------------------------------------------------

    def command(self, args: list[str], tag: str) -> tuple[list[str], dict]:
        return [sys.executable, "-m", "stark_pg", *args], dict(self.env, PGAPPNAME=f"fault-bench:{tag}")

    def cli(self, *args: str, tag: str = "cli", timeout: float = 1800) -> dict:
        """Run a stark-pg command to the end: exit code, seconds, stdout, stderr, its JSON if it printed some."""
        command, env = self.command(list(args), tag)
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        result = {"command": "stark-pg " + " ".join(args), "rc": done.returncode,
                  "seconds": round(time.perf_counter() - started, 2), "stdout": done.stdout, "stderr": done.stderr}
        try:
            result["json"] = json.loads(done.stdout) if "--json" in args and done.returncode == 0 else None
        except json.JSONDecodeError:
            result["json"] = None
        return result

    def spawn(self, *args: str, tag: str) -> subprocess.Popen:
        command, env = self.command(list(args), tag)
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   cwd=ROOT)
        process.started = time.perf_counter()
        process.label = "stark-pg " + " ".join(args)
        self.children.append(process)
        return process

    @staticmethod
    def kill9(process: subprocess.Popen) -> float:
        """SIGKILL; returns the seconds the process had run."""
        ran = time.perf_counter() - process.started
        os.kill(process.pid, signal.SIGKILL)
        process.communicate()
        return round(ran, 2)

    def cleanup(self) -> None:
        for process in self.children:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()

    # -- database -------------------------------------------------------------------------------

    def conn(self):
        import psycopg

        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.uri, autocommit=True)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def sql(self, statement: str, params=None) -> list[tuple]:
        return self.conn().execute(statement, params).fetchall()

    def one(self, statement: str, params=None):
        rows = self.sql(statement, params)
        return rows[0][0] if rows else None

    def skb_id(self, name: str) -> int | None:
        return self.one("select skb_id from stark.skb where name = %s", (name,))

    def activity(self, tag: str) -> list[tuple]:
        """(pid, state, query) of the backends serving the processes started with this tag."""
        return self.sql("select pid, state, query from pg_stat_activity where application_name = %s",
                        (f"fault-bench:{tag}",))

    def wait_backends_gone(self, tag: str, limit: float = 60.0) -> float | None:
        started = time.perf_counter()
        while time.perf_counter() - started < limit:
            if not self.activity(tag):
                return round(time.perf_counter() - started, 2)
            time.sleep(0.05)
        return None

    def vector_tables(self) -> list[str]:
        return [row[0] for row in self.sql(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname = 'stark' and c.relkind = 'r' and c.relname ~ '^emb_doc_[0-9]+$' order by 1")]

    def snapshot(self) -> dict[str, dict]:
        """Per SKB name: skb_id, counts and fingerprints of its core rows, counts of its derived rows."""
        state = {}
        vectors = self.vector_tables()
        for skb_id, name in self.sql("select skb_id, name from stark.skb order by name"):
            p = {"s": skb_id}
            row = {"skb_id": skb_id}
            row["nodes"], row["nodes_fp"] = self.sql(
                "select count(*), md5(coalesce(string_agg(node_id::text || '|' || type || '|' || coalesce(name, '') "
                "|| '|' || coalesce(attrs::text, ''), ',' order by node_id), '')) "
                "from stark.node where skb_id = %(s)s", p)[0]
            row["fields"], row["fields_fp"] = self.sql(
                "select count(*), coalesce(sum(hashtext(node_id::text || '|' || field || '|' || body)::bigint), 0) "
                "from stark.node_field where skb_id = %(s)s", p)[0]
            row["edges"], row["edges_fp"] = self.sql(
                "select count(*), coalesce(sum(hashtext(src::text || '|' || relation || '|' || dst::text)::bigint), 0) "
                "from stark.edge where skb_id = %(s)s", p)[0]
            row["queries"], row["queries_fp"] = self.sql(
                "select count(*), md5(coalesce(string_agg(query_id::text || '|' || split || '|' || body || '|' "
                "|| answer_ids::text, ',' order by query_id), '')) from stark.query where skb_id = %(s)s", p)[0]
            row["lex_scopes"] = self.one("select count(*) from stark.lex_stats where skb_id = %(s)s", p)
            row["lex_docs"] = self.one("select count(*) from stark.lex_doc where skb_id = %(s)s", p)
            row["vectors"] = sum(self.one(f"select count(*) from stark.{t} where skb_id = %(s)s", p) for t in vectors)
            row["eval_runs"] = self.one("select count(*) from stark.eval_run where skb_id = %(s)s", p)
            row["eval_results"] = self.one("select count(*) from stark.eval_result where skb_id = %(s)s", p)
            state[name] = {k: int(v) if isinstance(v, Decimal) else v for k, v in row.items()}
        return state

    def orphans(self) -> dict[str, int]:
        """Rows (and edge partitions, per-SKB indexes) whose skb_id is not a loaded SKB: leftovers of a
        load or replace that did not finish cleanly."""
        found = {}
        tables = [row[0] for row in self.sql(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "join pg_attribute a on a.attrelid = c.oid and a.attname = 'skb_id' and not a.attisdropped "
            "where n.nspname = 'stark' and c.relkind in ('r', 'p') and c.relname <> 'skb' "
            "and not c.relispartition order by 1")]
        for table in tables:
            count = self.one(f"select count(*) from stark.{table} t "
                             f"where not exists (select 1 from stark.skb s where s.skb_id = t.skb_id)")
            if count:
                found[table] = count
        live = {row[0] for row in self.sql("select skb_id from stark.skb")}
        for relname, relkind in self.sql(
                "select c.relname, c.relkind from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                "where n.nspname = 'stark' and c.relname ~ '__skb[0-9]+$'"):
            if int(relname.rsplit("__skb", 1)[1]) in live:
                continue
            # a replace empties the old version's per-SKB tables (MVCC-safe) and keeps its indexes for
            # readers that resolved the old version; the next load drops them: empty tables and their
            # indexes are expected, a table with rows is a leftover
            if relkind == "r" and self.one(f"select count(*) from stark.{relname}") == 0:
                continue
            if relkind == "i":
                continue
            found[relname] = found.get(relname, 0) + 1
        return found

    # -- checks ---------------------------------------------------------------------------------

    @staticmethod
    def compare(before: dict, after: dict, grow: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> dict:
        """What of `before` is still there unchanged. SKBs in `grow` may have gained derived rows (work
        a killed process committed) but not lost any; SKBs in `ignore` are not compared."""
        survived, lost, changed = [], [], {}
        for name, old in before.items():
            if name in ignore:
                continue
            new = after.get(name)
            if new is None:
                lost.append(name)
                continue
            diffs = {k: (old[k], new[k]) for k in CORE if old[k] != new[k]}
            for k in DERIVED:
                if (new[k] < old[k]) if name in grow else (new[k] != old[k]):
                    diffs[k] = (old[k], new[k])
            if diffs:
                changed[name] = diffs
            else:
                survived.append(name)
        appeared = sorted(set(after) - set(before) - set(ignore))
        return {"survived": survived, "lost": lost, "changed": changed, "appeared": appeared}

    def report_state(self, result: dict, before: dict, after: dict, cmp: dict) -> None:
        for name in cmp["survived"]:
            s = after[name]
            self.say(f"  survived: {name} (skb_id {s['skb_id']}): {s['nodes']:,} nodes, {s['edges']:,} edges, "
                     f"{s['queries']:,} queries, {s['lex_docs']:,} lexical docs, {s['vectors']:,} vectors, "
                     f"{s['eval_results']:,} eval results; fingerprints unchanged")
        lost = cmp["lost"] + [f"{n} changed: {d}" for n, d in cmp["changed"].items()]
        self.say(f"  lost: {'; '.join(lost) if lost else 'nothing committed'}")
        if cmp["appeared"]:
            self.say(f"  appeared (uncommitted work left visible): {', '.join(cmp['appeared'])}")
        result.setdefault("comparisons", []).append({"before": before, "after": after, "comparison": cmp})
        result["comparison"] = cmp

    def check(self, result: dict, name: str, ok: bool, detail: str = "", soft: bool = False) -> bool:
        verdict = "PASS" if ok else ("WARN" if soft else "FAIL")
        result.setdefault("checks", []).append({"check": name, "verdict": verdict, "detail": detail})
        self.say(f"  {verdict} {name}{': ' + detail if detail else ''}")
        return ok

    def check_state(self, result: dict, cmp: dict, orphans: dict) -> None:
        self.check(result, "nothing committed lost or changed", not cmp["lost"] and not cmp["changed"],
                   f"{len(cmp['survived'])} SKB(s) intact")
        self.check(result, "nothing uncommitted left visible", not cmp["appeared"],
                   ", ".join(cmp["appeared"]) or "no new SKB")
        self.check(result, "no orphaned rows or partitions", not orphans,
                   ", ".join(f"{k} {v:,}" for k, v in orphans.items()) or "none")
        result["orphans"] = orphans

    @staticmethod
    def failure_line(run: dict) -> str:
        lines = [line for line in (run.get("stderr") or "").strip().splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""

    def must_succeed(self, result: dict, name: str, run: dict) -> bool:
        return self.check(result, name, run["rc"] == 0,
                          f"exit {run['rc']} in {run['seconds']} s" + ("" if run["rc"] == 0
                                                                       else f"; {self.failure_line(run)}"))

    # -- waiting for a moment to strike --------------------------------------------------------

    def wait_for(self, process: subprocess.Popen, predicate, limit: float, interval: float = 0.05):
        """Poll `predicate` (returning a truthy value when the moment has come) while `process` runs."""
        deadline = time.perf_counter() + limit
        while time.perf_counter() < deadline:
            if process.poll() is not None:
                return None
            try:
                found = predicate()
            except Exception:  # the monitoring connection itself may fail (a crash): try again
                self.close()
                found = None
            if found:
                return found
            time.sleep(interval)
        return None

    def copy_seen(self, tag: str, pattern=COPY_EDGE):
        for _pid, state, query in self.activity(tag):
            if state == "active" and pattern.search(query or ""):
                return query.split("(")[0].strip()
        return None

    # -- set-up --------------------------------------------------------------------------------

    def ensure_loaded(self, name: str, nodes: int, seed: int = 0) -> None:
        if self.skb_id(name) is None:
            self.progress(f"loading {name} ({nodes:,} nodes)")
            run = self.cli("load", "synthetic", "--nodes", str(nodes), "--name", name, "--seed", str(seed),
                           "-q", "--json", tag=f"setup-{name}")
            if run["rc"] != 0:
                raise SystemExit(f"set-up failed: {run['command']}: {self.failure_line(run)}")

    def ensure_lexical(self, name: str) -> None:
        if not self.one("select count(*) from stark.lex_stats where skb_id = %s", (self.skb_id(name),)):
            self.progress(f"indexing {name} (lexical)")
            run = self.cli("index", name, "--no-dense", "-q", "--json", tag=f"setup-index-{name}")
            if run["rc"] != 0:
                raise SystemExit(f"set-up failed: {run['command']}: {self.failure_line(run)}")

    def setup(self) -> dict:
        started = time.perf_counter()
        info = self.cli("info", "--json", tag="setup")
        if info["rc"] != 0:
            raise SystemExit(f"stark-pg info failed: {self.failure_line(info)}")
        self.ensure_loaded("other", self.args.nodes)
        self.ensure_lexical("other")
        return {"seconds": round(time.perf_counter() - started, 1), "info_seconds": info["seconds"]}

    # ==========================================================================================
    # 1. kill -9 during load

    def scenario_load(self) -> dict:
        n = self.args.nodes
        result: dict = {"title": "kill -9 during load"}
        if self.skb_id("victim") is not None:       # a reused --home: start from an absent victim
            self.cli("drop", "victim", "--yes", tag="prep")
        before = self.snapshot()

        load = ["load", "synthetic", "--nodes", str(n), "--name", "victim", "-q", "--json"]
        process = self.spawn(*load, tag="s1-load")
        seen = self.wait_for(process, lambda: self.copy_seen("s1-load"), limit=600)
        if seen is None:
            process.communicate()
            self.check(result, "kill landed during the load", False, f"the load ended first (exit {process.returncode})")
            return result
        time.sleep(0.3)
        ran = self.kill9(process)
        gone = self.wait_backends_gone("s1-load")
        self.say(f"  killed `{process.label}` after {ran} s, during `{seen}`; its backend ended "
                 f"{gone if gone is not None else '(not within 60)'} s later")
        result["fresh_load"] = {"killed_after_s": ran, "during": seen, "backend_gone_s": gone}
        after = self.snapshot()
        cmp = self.compare(before, after)
        self.report_state(result, before, after, cmp)
        self.check_state(result, cmp, self.orphans())
        self.check(result, "the killed backend ended", gone is not None, f"{gone} s after the kill")

        rerun = self.cli(*load, tag="s1-rerun")
        self.must_succeed(result, "re-run of the load", rerun)
        summary = rerun["json"] or {}
        result["rerun"] = {"rc": rerun["rc"], "seconds": rerun["seconds"],
                           "nodes": summary.get("nodes"), "edges": summary.get("edges"),
                           "queries": summary.get("queries")}
        loaded = self.snapshot().get("victim", {})
        self.check(result, "victim holds what the re-run reported",
                   bool(summary) and all(loaded.get(k) == summary.get(k) for k in ("nodes", "edges", "queries")),
                   f"{loaded.get('nodes', 0):,} nodes, {loaded.get('edges', 0):,} edges, {loaded.get('queries', 0):,} "
                   f"queries")

        # a replace killed half-way: the committed victim stays as it was
        before = self.snapshot()
        process = self.spawn("load", "synthetic", "--nodes", str(n), "--name", "victim", "--seed", "1", "-q",
                             "--json", tag="s1-replace")
        seen = self.wait_for(process, lambda: self.copy_seen("s1-replace"), limit=600)
        if seen is None:
            process.communicate()
            self.check(result, "kill landed during the replace", False,
                       f"the replace ended first (exit {process.returncode})")
            return result
        time.sleep(0.3)
        ran = self.kill9(process)
        gone = self.wait_backends_gone("s1-replace")
        self.say(f"  killed `{process.label}` (a replace of victim) after {ran} s, during `{seen}`; its backend "
                 f"ended {gone} s later")
        result["replace"] = {"killed_after_s": ran, "during": seen, "backend_gone_s": gone}
        after = self.snapshot()
        cmp = self.compare(before, after)
        self.report_state(result, before, after, cmp)
        result["replace"]["comparison"] = cmp
        self.check_state(result, cmp, self.orphans())
        return result

    # ==========================================================================================
    # 2. kill -9 during index

    def scenario_index(self) -> dict:
        result: dict = {"title": "kill -9 during index"}
        self.ensure_loaded("victim", self.args.nodes)
        victim = self.skb_id("victim")
        if self.one("select count(*) from stark.lex_stats where skb_id = %s", (victim,)):
            self.progress("victim is indexed already (a reused --home): reloading it without its index")
            self.cli("drop", "victim", "--yes", tag="prep")
            self.ensure_loaded("victim", self.args.nodes)
            victim = self.skb_id("victim")

        # A: lexical, at --nodes: killed once its first scope has committed
        before = self.snapshot()
        process = self.spawn("index", "victim", "--no-dense", "-q", "--json", tag="s2-lexical")
        scopes = self.wait_for(process, lambda: self.sql(
            "select scope, n_docs from stark.lex_stats where skb_id = %s", (victim,)), limit=900)
        if scopes is None:
            process.communicate()
            self.check(result, "kill landed during the lexical build", False,
                       f"it ended first (exit {process.returncode})")
            return result
        ran = self.kill9(process)
        self.wait_backends_gone("s2-lexical")
        kept = self.one("select count(*) from stark.lex_doc where skb_id = %s", (victim,))
        kept_scopes = self.one("select count(*) from stark.lex_stats where skb_id = %s", (victim,))
        self.say(f"  killed `{process.label}` after {ran} s; committed by then: {kept_scopes} scope(s), "
                 f"{kept:,} lexical documents")
        after = self.snapshot()
        cmp = self.compare(before, after, grow=("victim",))
        self.report_state(result, before, after, cmp)
        self.check_state(result, cmp, self.orphans())
        rerun = self.cli("index", "victim", "--no-dense", "-q", "--json", tag="s2-lexical-rerun")
        self.must_succeed(result, "re-run of the lexical build", rerun)
        redone = sum((rerun["json"] or {}).get("lexical", {}).get("reindexed", {}).values())
        total = self.one("select count(*) from stark.lex_doc where skb_id = %s", (victim,))
        self.say(f"  re-run: {redone:,} documents (re)indexed of {total:,} in {rerun['seconds']} s "
                 f"(a full build indexes {total:,}; {kept:,} were kept)")
        result["lexical"] = {"killed_after_s": ran, "scopes_kept": kept_scopes, "docs_kept": kept,
                             "rerun_reindexed": redone, "full_build": total, "rerun_seconds": rerun["seconds"]}
        self.check(result, "lexical re-run kept the committed work", rerun["rc"] == 0 and 0 < kept and redone < total
                   and redone + kept == total, f"{redone:,} re-indexed + {kept:,} kept = {total:,}")
        query = self.one("select body from stark.query where skb_id = %s order by query_id limit 1", (victim,))
        search = self.cli("search", "victim", query, "-m", "bm25", "-k", "5", "--json", tag="s2-search")
        hits = len((search["json"] or {}).get("results", []))
        self.check(result, "bm25 search on victim answers", search["rc"] == 0 and hits > 0, f"{hits} results")

        # B: dense, on a small SKB: killed once its first batch of vectors has committed
        self.ensure_loaded("indexed", self.args.index_nodes)
        indexed = self.skb_id("indexed")
        before = self.snapshot()
        if before["indexed"]["vectors"]:
            self.progress("`indexed` has vectors already (a reused --home): the dense kill proves less")

        def vectors_committed():
            count = sum(self.one(f"select count(*) from stark.{t} where skb_id = %s", (indexed,))
                        for t in self.vector_tables())
            return count if count > before["indexed"]["vectors"] else None

        process = self.spawn("index", "indexed", "--no-multi-vector", "-q", "--json", tag="s2-dense")
        seen = self.wait_for(process, vectors_committed, limit=1800, interval=0.1)
        if seen is None:
            _, err = process.communicate()
            self.check(result, "kill landed during the dense build", False,
                       f"it ended first (exit {process.returncode}); {self.failure_line({'stderr': err})}")
            return result
        ran = self.kill9(process)
        self.wait_backends_gone("s2-dense")
        after = self.snapshot()
        kept_vectors = after["indexed"]["vectors"]
        self.say(f"  killed `{process.label}` after {ran} s; committed by then: {after['indexed']['lex_docs']:,} "
                 f"lexical documents, {kept_vectors:,} of {after['indexed']['nodes']:,} document vectors")
        cmp = self.compare(before, after, grow=("indexed",))
        self.report_state(result, before, after, cmp)
        self.check_state(result, cmp, self.orphans())
        rerun = self.cli("index", "indexed", "--no-multi-vector", "-q", "--json", tag="s2-dense-rerun")
        self.must_succeed(result, "re-run of the dense build", rerun)
        report = rerun["json"] or {}
        lex_redone = sum(report.get("lexical", {}).get("reindexed", {}).values())
        docs = report.get("dense", {}).get("documents", {})
        embedded, total_vectors = docs.get("embedded"), docs.get("total")
        self.say(f"  re-run: lexical {lex_redone:,} documents re-indexed; dense {embedded} embedded, "
                 f"{docs.get('skipped')} unchanged, of {total_vectors} in {rerun['seconds']} s")
        result["dense"] = {"nodes": after["indexed"]["nodes"], "killed_after_s": ran, "vectors_kept": kept_vectors,
                           "rerun_lexical_reindexed": lex_redone, "rerun_embedded": embedded,
                           "rerun_total": total_vectors, "rerun_seconds": rerun["seconds"]}
        self.check(result, "dense re-run kept the committed vectors",
                   rerun["rc"] == 0 and embedded is not None and embedded + kept_vectors == total_vectors
                   and embedded < total_vectors, f"{embedded} embedded + {kept_vectors} kept = {total_vectors}")
        query = self.one("select body from stark.query where skb_id = %s order by query_id limit 1", (indexed,))
        for method in ("vss", "bm25"):
            search = self.cli("search", "indexed", query, "-m", method, "-k", "5", "--json", tag="s2-search")
            hits = len((search["json"] or {}).get("results", []))
            self.check(result, f"{method} search on indexed answers", search["rc"] == 0 and hits > 0,
                       f"{hits} results" + ("" if search["rc"] == 0 else f"; {self.failure_line(search)}"))
        return result

    # ==========================================================================================
    # 3. kill -9 during eval

    def scenario_eval(self) -> dict:
        result: dict = {"title": "kill -9 during eval"}
        self.ensure_loaded("victim", self.args.nodes)
        self.ensure_lexical("victim")
        victim = self.skb_id("victim")
        split, size = self.sql("select split, count(*) from stark.query where skb_id = %s group by 1 "
                               "order by 2 desc, 1 limit 1", (victim,))[0]
        last_run = self.one("select coalesce(max(run_id), 0) from stark.eval_run")
        before = self.snapshot()
        command = ["eval", "victim", "-m", "bm25", "--split", split, "-q", "--json"]
        process = self.spawn(*command, tag="s3-eval")
        target = max(3, size // 3)
        stored = self.wait_for(process, lambda: (lambda c: c if c >= target else None)(self.one(
            "select count(*) from stark.eval_result where run_id > %s", (last_run,))), limit=900, interval=0.02)
        if stored is None:
            process.communicate()
            self.check(result, "kill landed during the eval", False, f"it ended first (exit {process.returncode})")
            return result
        ran = self.kill9(process)
        self.wait_backends_gone("s3-eval")
        runs = self.sql("select run_id, finished_at is not null from stark.eval_run where run_id > %s", (last_run,))
        kept = self.one("select count(*) from stark.eval_result where run_id > %s", (last_run,))
        self.say(f"  killed `{process.label}` ({size} queries of split {split}) after {ran} s, "
                 f"{kept} results stored")
        after = self.snapshot()
        cmp = self.compare(before, after, grow=("victim",))
        self.report_state(result, before, after, cmp)
        self.check_state(result, cmp, self.orphans())

        rerun = self.cli(*command, tag="s3-rerun")
        self.must_succeed(result, "re-run of the eval", rerun)
        method = ((rerun["json"] or {}).get("methods") or {}).get("bm25", {})
        run_id = method.get("run_id")
        killed_run = runs[0][0] if len(runs) == 1 else None
        new_runs = self.one("select count(*) from stark.eval_run where run_id > %s", (last_run,))
        per_query = self.sql("select query_id, count(*) from stark.eval_result where run_id = %s group by 1",
                             (run_id,)) if run_id else []
        duplicates = sum(1 for _, c in per_query if c != 1)
        finished = self.one("select finished_at is not null from stark.eval_run where run_id = %s", (run_id,))
        cli_says = "resum" in (rerun["stdout"] + rerun["stderr"]).lower()
        self.say(f"  re-run: run {run_id} (the killed run was {killed_run}), resumed from {kept} stored results, "
                 f"{len(per_query)} queries stored, {duplicates} duplicated, finished: {finished}, "
                 f"{rerun['seconds']} s; queries in its summary: {method.get('queries')}")
        result["eval"] = {"split": split, "queries": size, "killed_after_s": ran, "results_kept": kept,
                          "killed_run": killed_run, "rerun_run": run_id, "resumed_from": kept,
                          "runs_created": new_runs, "results": len(per_query), "duplicates": duplicates,
                          "rerun_seconds": rerun["seconds"],
                          "cli_reports_resumed": cli_says}
        if not cli_says:
            self.say("  (the count of resumed queries is read from stark.eval_result: `stark-pg eval --json` "
                     "does not report RunOutcome.resumed_from)")
        self.check(result, "re-run resumed the killed run", killed_run is not None and run_id == killed_run
                   and new_runs == 1, f"run {run_id}, {new_runs} run(s) created, {kept} queries were done")
        self.check(result, "every query stored exactly once", len(per_query) == size and duplicates == 0
                   and method.get("queries") == size, f"{len(per_query)} of {size}, {duplicates} duplicated")
        return result

    # ==========================================================================================
    # 4. crash of the postmaster

    def scenario_crash(self) -> dict:
        result: dict = {"title": "postmaster crash"}
        if self.skb_id("crashed") is not None:
            self.cli("drop", "crashed", "--yes", tag="prep")
        baseline = self.cli("info", "--json", tag="s4-baseline")
        before = self.snapshot()
        process = self.spawn("load", "synthetic", "--nodes", str(self.args.nodes), "--name", "crashed", "-q",
                             "--json", tag="s4-load")
        seen = self.wait_for(process, lambda: self.copy_seen("s4-load"), limit=600)
        pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        self.close()
        if seen is None:
            self.say("  (the load ended before its COPY was seen: crashing an idle server)")
        else:
            time.sleep(0.3)
        log = self.pgdata / "log"
        log_offset = log.stat().st_size if log.exists() else 0
        os.kill(pid, signal.SIGKILL)
        crashed_at = time.perf_counter()
        _, load_err = process.communicate(timeout=300)
        load_line = self.failure_line({"stderr": load_err})
        traceback = "Traceback" in load_err
        self.say(f"  killed the postmaster (pid {pid}) during `{seen or 'nothing'}`; the load then exited "
                 f"{process.returncode}: {load_line!r}")
        info = self.cli("info", "--json", tag="s4-info", timeout=900)
        first, first_rc = time.perf_counter() - crashed_at, info["rc"]
        waited = "recovering" in info["stderr"]
        self.say(f"  first `stark-pg info --json` after the crash: exit {info['rc']} in {info['seconds']} s "
                 f"({baseline['seconds']} s before the crash), {first:.1f} s after the kill; said it waits for "
                 f"recovery: {waited}" + (f"; {self.failure_line(info)}" if info["rc"] else ""))
        self.must_succeed(result, "first command after the crash", info)
        attempts = 1
        while info["rc"] != 0 and time.perf_counter() - crashed_at < 300:
            time.sleep(1.0)            # to go on checking what survived, retry until the server is back
            info = self.cli("info", "--json", tag="s4-info", timeout=900)
            attempts += 1
            waited = waited or "recovering" in info["stderr"]
        usable = time.perf_counter() - crashed_at
        if attempts > 1:
            self.say(f"  `stark-pg info --json` succeeded at attempt {attempts}, {usable:.1f} s after the kill"
                     if info["rc"] == 0 else f"  still failing after {attempts} attempts: {self.failure_line(info)}")
        recovery = self._recovery_from_log(log, log_offset)
        if recovery:
            self.say(f"  server log: {recovery}")
        names = sorted(item["name"] for item in (info["json"] or []))
        result["crash"] = {"postmaster_pid": pid, "during": seen, "load_rc": process.returncode,
                           "load_error": load_line, "load_traceback": traceback, "first_info_rc": first_rc,
                           "first_info_seconds_after_kill": round(first, 1), "info_seconds_before": baseline["seconds"], "attempts": attempts,
                           "usable_seconds_after_kill": round(usable, 1), "waited_message": waited,
                           "server_log": recovery, "skbs": names}
        self.check(result, "the interrupted load failed with one readable line", process.returncode != 0
                   and not traceback, f"exit {process.returncode}" + (", traceback" if traceback else ""), soft=True)
        if info["rc"] != 0:
            return result
        after = self.snapshot()
        cmp = self.compare(before, after)
        self.report_state(result, before, after, cmp)
        self.check_state(result, cmp, self.orphans())
        return result

    @staticmethod
    def _recovery_from_log(log: Path, offset: int) -> str:
        """The server's own account of the crash recovery: how long redo took, when it was ready again."""
        try:
            with open(log, errors="replace") as handle:
                handle.seek(offset)
                text = handle.read()
        except OSError:
            return ""
        stamps = {}
        for key, pattern in (("interrupted", r"was interrupted|not properly shut down"), ("ready", r"ready to accept")):
            match = re.search(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+).*(?:" + pattern + ")", text, re.MULTILINE)
            if match:
                stamps[key] = match.group(1)
        redo = re.search(r"redo done at .*?elapsed: ([0-9.]+ s)", text)
        parts = []
        if redo:
            parts.append(f"redo took {redo.group(1)}")
        if len(stamps) == 2:
            from datetime import datetime

            span = (datetime.fromisoformat(stamps["ready"]) - datetime.fromisoformat(stamps["interrupted"]))
            parts.append(f"ready {span.total_seconds():.1f} s after the restart began recovery")
        return "; ".join(parts)

    # ==========================================================================================
    # 5. concurrent loads of one name

    def scenario_concurrent(self) -> dict:
        result: dict = {"title": "3 concurrent loads of one name"}
        nodes = max(100, self.args.nodes // 4)
        before = self.snapshot()
        started = time.perf_counter()
        processes = [self.spawn("load", "synthetic", "--nodes", str(nodes), "--name", "same", "-q", "--json",
                                tag=f"s5-load{i}") for i in range(3)]
        outcomes = []
        for process in processes:
            stdout, stderr = process.communicate(timeout=1800)
            try:
                summary = json.loads(stdout)
            except json.JSONDecodeError:
                summary = {}
            outcomes.append({"rc": process.returncode, "seconds": round(time.perf_counter() - process.started, 2),
                             "waited": "waiting for another process" in stderr, "summary": summary,
                             "error": self.failure_line({"stderr": stderr}) if process.returncode else ""})
        wall = round(time.perf_counter() - started, 2)
        for i, o in enumerate(outcomes):
            self.say(f"  load {i + 1}: exit {o['rc']} after {o['seconds']} s, waited for another: {o['waited']}"
                     + (f"; {o['error']}" if o["error"] else "")
                     + (f"; {o['summary'].get('nodes', 0):,} nodes, {o['summary'].get('edges', 0):,} edges, "
                        f"{o['summary'].get('queries', 0):,} queries" if o["summary"] else ""))
        self.check(result, "all three loads exit 0", all(o["rc"] == 0 for o in outcomes),
                   ", ".join(str(o["rc"]) for o in outcomes))
        copies = self.one("select count(*) from stark.skb where name = 'same'")
        after = self.snapshot()
        same = after.get("same", {})
        expected = next((o["summary"] for o in outcomes if o["summary"]), {})
        self.check(result, "`same` exists once, with the counts its loads report",
                   copies == 1 and bool(expected) and all(same.get(k) == expected.get(k)
                                                          for k in ("nodes", "edges", "queries"))
                   and all(o["summary"].get(k) == expected.get(k) for o in outcomes if o["summary"]
                           for k in ("nodes", "edges", "queries")),
                   f"{copies} row(s); {same.get('nodes', 0):,} nodes, {same.get('edges', 0):,} edges, "
                   f"{same.get('queries', 0):,} queries")
        cmp = self.compare(before, after, ignore=("same",))
        self.report_state(result, before, after, cmp)
        self.check_state(result, cmp, self.orphans())
        result["loads"] = [{k: v for k, v in o.items() if k != "summary"} | {
            k: o["summary"].get(k) for k in ("nodes", "edges", "queries")} for o in outcomes]
        result["wall_seconds"] = wall
        return result

    # ==========================================================================================
    # 6. clients searching during a replace of another SKB

    def scenario_replace(self) -> dict:
        result: dict = {"title": "8+2 clients searching during a replace of victim"}
        self.ensure_loaded("victim", self.args.nodes)
        self.ensure_lexical("victim")
        groups = {"other": self.args.clients, "victim": self.args.victim_clients}
        material = {}
        for skb in groups:
            skb_id = self.skb_id(skb)
            queries = [row[0] for row in self.sql("select body from stark.query where skb_id = %s", (skb_id,))]
            # nodes with a few out-edges: a 2-hop walk from a hub would visit much of the graph
            nodes = [row[0] for row in self.sql(
                "select src from stark.edge where skb_id = %s group by src having count(*) between 1 and 40 "
                "order by src limit 500", (skb_id,))]
            material[skb] = (queries, nodes)
        before = self.snapshot()
        context = mp.get_context("spawn")
        stop = context.Event()
        workdir = Path(tempfile.mkdtemp(prefix="fault-bench-clients-"))
        clients = []
        for skb, count in groups.items():
            for i in range(count):
                ready = context.Event()
                path = workdir / f"{skb}-{i}.json"
                process = context.Process(target=_client, args=(self.uri, skb, *material[skb], 1000 * i + len(skb),
                                                                ready, stop, str(path)), daemon=True)
                process.start()
                clients.append((skb, process, ready, path))
        for _, process, ready, _ in clients:
            ready.wait(120)
        load_start = load_avg()
        baseline_start = time.time()
        time.sleep(self.args.baseline_seconds)
        replace_start = time.time()
        old_id = before["victim"]["skb_id"]
        process = self.spawn("load", "synthetic", "--nodes", str(self.args.nodes), "--name", "victim", "--seed", "1",
                             "-q", "--json", tag="s6-replace")
        swapped = self.wait_for(process, lambda: (lambda i: time.time() if i not in (None, old_id) else None)(
            self.skb_id("victim")), limit=3600, interval=0.05)
        stdout, stderr = process.communicate()
        replace_end = time.time()
        if swapped is None and self.skb_id("victim") not in (None, old_id):
            swapped = replace_end        # the swap and the exit fell between two polls
        replace = {"rc": process.returncode, "seconds": round(replace_end - replace_start, 2), "stderr": stderr}
        try:
            summary = json.loads(stdout)
        except json.JSONDecodeError:
            summary = {}
        time.sleep(1.0)
        stop.set()
        records = {skb: [] for skb in groups}
        for skb, process, _, path in clients:
            process.join(120)
            if path.exists():
                records[skb].extend(json.loads(path.read_text()))
            else:
                records[skb].append((time.time(), "client", 0.0, 0, f"client process exited {process.exitcode} "
                                                                   "without results", None))
        shutil.rmtree(workdir, ignore_errors=True)
        load_end = load_avg()

        self.say(f"  replace of victim (--seed 1, {self.args.nodes:,} nodes): exit {replace['rc']} in "
                 f"{replace['seconds']} s, new version visible {swapped - replace_start:.1f} s in"
                 if swapped else f"  replace of victim: exit {replace['rc']} in {replace['seconds']} s, no swap seen")
        if summary:
            self.say(f"  it kept {summary.get('carried')}; refreshed {list((summary.get('refreshed') or {}).keys())}")
        if replace["rc"]:
            self.say(f"  {self.failure_line(replace)}")
        self.say(f"  client windows: baseline {replace_start - baseline_start:.1f} s, during the replace "
                 f"{replace_end - replace_start:.1f} s; load average {load_start} -> {load_end}")
        stats = {}
        self.say(f"  {'group':<8} {'op':<10} {'window':<9} {'calls':>7} {'errors':>6} {'empty':>6} "
                 f"{'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        for skb in groups:
            for op in ("bm25", "neighbors"):
                for window, low, high in (("baseline", baseline_start, replace_start),
                                          ("replace", replace_start, replace_end)):
                    rows = [r for r in records[skb] if r[1] == op and low <= r[0] < high]
                    ok = [r[2] for r in rows if r[4] is None]
                    entry = {"calls": len(rows), "errors": sum(1 for r in rows if r[4] is not None),
                             "empty": sum(1 for r in rows if r[4] is None and r[3] == 0),
                             "p50_ms": pct(ok, 50), "p95_ms": pct(ok, 95), "max_ms": max(ok) if ok else None}
                    stats[f"{skb}/{op}/{window}"] = entry
                    self.say(f"  {skb:<8} {op:<10} {window:<9} {entry['calls']:>7,} {entry['errors']:>6} "
                             f"{entry['empty']:>6} {fmt_ms(entry['p50_ms']):>8} {fmt_ms(entry['p95_ms']):>8} "
                             f"{fmt_ms(entry['max_ms']):>8}")

        # Empty answers on victim: a 2-hop walk from a node without out-edges in the new version is rightly
        # empty (the new text and graph come from another seed); a BM25 query that answers now, or a node
        # with out-edges in both versions, was empty only for a moment: that is what a replace must avoid.
        new_id = self.skb_id("victim")
        queries, _ = material["victim"]
        from stark_pg.retrieve import get_method

        bm25 = get_method("bm25")
        victim_empty = {"bm25": [r for r in records["victim"] if r[1] == "bm25" and r[4] is None and r[3] == 0],
                        "neighbors": [r for r in records["victim"] if r[1] == "neighbors" and r[4] is None
                                      and r[3] == 0]}
        answers_now = {i: len(bm25.search(self.conn(), "victim", queries[i], 10).hits)
                       for i in {r[5] for r in victim_empty["bm25"]}}
        degree_now = dict(self.sql("select src, count(*) from stark.edge where skb_id = %s and src = any(%s) "
                                   "group by src", (new_id, sorted({r[5] for r in victim_empty["neighbors"]}))))
        transient = {"bm25": [r for r in victim_empty["bm25"] if answers_now.get(r[5])],
                     "neighbors": [r for r in victim_empty["neighbors"] if degree_now.get(r[5])]}
        for op, rows in transient.items():
            if rows:
                shown = ", ".join(f"{'query #' if op == 'bm25' else 'node '}{r[5]} started "
                                  f"{r[0] - swapped:+.2f} s from the swap, took {r[2]:.0f} ms" if swapped else str(r[5])
                                  for r in sorted(rows)[:5])
                self.say(f"  victim {op}: {len(rows)} transiently empty answers (they answer now"
                         + (", and every walk starts at a node with 1-40 out-edges in the old version"
                            if op == "neighbors" else "") + f"): {shown}{' ...' if len(rows) > 5 else ''}")
        legit = len(victim_empty["neighbors"]) - len(transient["neighbors"])
        if legit:
            self.say(f"  victim neighbors: {legit} empty walks from nodes without out-edges in the new version "
                     f"(correct answers)")
        totals = {}
        for skb in groups:
            rows = records[skb]
            errors = [r[4] for r in rows if r[4] is not None]
            totals[skb] = {"calls": len(rows), "errors": len(errors),
                           "empty_bm25": sum(1 for r in rows if r[4] is None and r[1] == "bm25" and r[3] == 0),
                           "empty_neighbors": sum(1 for r in rows if r[4] is None and r[1] == "neighbors"
                                                  and r[3] == 0),
                           "error_kinds": sorted({e.split(":")[0] + ": " + e.split(":", 1)[-1][:120] for e in errors})[:5]}
            if errors:
                self.say(f"  {skb} errors, e.g.: {'; '.join(totals[skb]['error_kinds'])}")
        totals["victim"]["transient_empty_bm25"] = len(transient["bm25"])
        totals["victim"]["transient_empty_neighbors"] = len(transient["neighbors"])
        totals["victim"]["transient"] = [{"op": op, "argument": r[5], "ms": round(r[2], 1),
                                          "started_from_swap_s": round(r[0] - swapped, 3) if swapped else None}
                                         for op, rows in transient.items() for r in rows]
        result.update({"replace": {k: replace[k] for k in ("rc", "seconds")} | {
            "carried": summary.get("carried"), "refreshed": summary.get("refreshed"),
            "swap_after_s": round(swapped - replace_start, 2) if swapped else None},
            "baseline_seconds": round(replace_start - baseline_start, 1),
            "replace_seconds": round(replace_end - replace_start, 1), "stats": stats, "totals": totals,
            "load_average": {"start": load_start, "end": load_end}})
        self.check(result, "the replace", replace["rc"] == 0 and swapped is not None,
                   f"exit {replace['rc']} in {replace['seconds']} s")
        self.check(result, "0 errors for clients of other", totals["other"]["errors"] == 0,
                   f"{totals['other']['errors']} of {totals['other']['calls']:,} calls")
        self.check(result, "0 empty results for clients of other", totals["other"]["empty_bm25"] == 0
                   and totals["other"]["empty_neighbors"] == 0,
                   f"bm25 {totals['other']['empty_bm25']}, neighbors {totals['other']['empty_neighbors']}")
        self.check(result, "0 errors for clients of victim during its replace", totals["victim"]["errors"] == 0,
                   f"{totals['victim']['errors']} of {totals['victim']['calls']:,} calls")
        self.check(result, "0 transiently empty results on victim during its replace",
                   not transient["bm25"] and not transient["neighbors"],
                   f"bm25 {len(transient['bm25'])} of {totals['victim']['empty_bm25']} empty, 2-hop "
                   f"{len(transient['neighbors'])} of {totals['victim']['empty_neighbors']} empty", soft=True)
        after = self.snapshot()
        cmp = self.compare(before, after, ignore=("victim",))
        self.report_state(result, before, after, cmp)
        self.check_state(result, cmp, self.orphans())
        new = after.get("victim", {})
        self.check(result, "victim replaced and still indexed", new.get("skb_id") != before["victim"]["skb_id"]
                   and new.get("lex_docs", 0) > 0 and new.get("nodes") == summary.get("nodes"),
                   f"skb_id {before['victim']['skb_id']} -> {new.get('skb_id')}, {new.get('lex_docs', 0):,} lexical "
                   f"docs, {new.get('eval_results', 0):,} eval results kept")
        return result


    # ==========================================================================================
    # 7. commands started at once on a fresh STARK_PG_HOME (a home of its own, not the benchmark's)

    def scenario_fresh(self) -> dict:
        result: dict = {"title": "8 commands at once on a fresh home"}
        home = Path(tempfile.mkdtemp(prefix="stark-fresh-"))
        env = os.environ | {"STARK_PG_HOME": str(home), "PYTHONPATH": str(ROOT)}
        env.pop("STARK_PG_DSN", None)
        commands = ([["load", "synthetic", "--nodes", "200", "--name", "same", "-q", "--json"]] * 3
                    + [["db", "status", "--json"]] * 5)
        started = time.perf_counter()
        processes = [subprocess.Popen([sys.executable, "-m", "stark_pg", *command], env=env, cwd=ROOT, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE) for command in commands]
        outcomes = []
        try:
            for command, process in zip(commands, processes):
                stdout, stderr = process.communicate(timeout=1800)
                outcomes.append({"command": " ".join(command[:2]), "rc": process.returncode,
                                 "traceback": "Traceback" in stderr,
                                 "error": self.failure_line({"stderr": stderr}) if process.returncode else ""})
        finally:
            subprocess.run([sys.executable, "-m", "stark_pg", "db", "stop"], env=env, cwd=ROOT, capture_output=True,
                           timeout=300)
            shutil.rmtree(home, ignore_errors=True)
        wall = round(time.perf_counter() - started, 2)
        for o in outcomes:
            if o["rc"]:
                self.say(f"  {o['command']}: exit {o['rc']}: {o['error']}")
        self.check(result, "all 8 commands exit 0", all(o["rc"] == 0 for o in outcomes),
                   ", ".join(str(o["rc"]) for o in outcomes))
        self.check(result, "no traceback", not any(o["traceback"] for o in outcomes),
                   f"{sum(o['traceback'] for o in outcomes)} of {len(outcomes)}")
        result.update({"commands": outcomes, "wall_seconds": wall})
        return result


# --------------------------------------------------------------------------------------------------

def headline(name: str, r: dict) -> str:
    """One line of figures per scenario for the summary table."""
    try:
        if name == "load":
            f, p = r.get("fresh_load", {}), r.get("replace", {})
            return (f"killed at {f.get('killed_after_s')} s (fresh) / {p.get('killed_after_s')} s (replace); "
                    f"re-run {r.get('rerun', {}).get('seconds')} s")
        if name == "index":
            lx, d = r.get("lexical", {}), r.get("dense", {})
            return (f"lexical: {lx.get('docs_kept', 0):,} kept, {lx.get('rerun_reindexed', 0):,} redone of "
                    f"{lx.get('full_build', 0):,}; dense: {d.get('vectors_kept', 0):,} kept, "
                    f"{d.get('rerun_embedded')} redone of {d.get('rerun_total')}")
        if name == "eval":
            e = r.get("eval", {})
            return (f"{e.get('split')}: resumed run {e.get('rerun_run')} from {e.get('resumed_from')} of "
                    f"{e.get('queries')}, {e.get('duplicates')} duplicates")
        if name == "crash":
            c = r.get("crash", {})
            first = ("first command ok" if c.get("first_info_rc") == 0
                     else f"first command FAILED ({c.get('attempts')} attempts)")
            return (f"{first}; usable {c.get('usable_seconds_after_kill')} s after the kill"
                    + (f"; {c['server_log']}" if c.get("server_log") else ""))
        if name == "concurrent":
            loads = r.get("loads", [])
            return (f"exits {[x['rc'] for x in loads]}, {sum(x['waited'] for x in loads)} waited, "
                    f"{r.get('wall_seconds')} s wall")
        if name == "fresh":
            return f"exits {[c['rc'] for c in r.get('commands', [])]}, {r.get('wall_seconds')} s wall"
        if name == "replace":
            s, t = r.get("stats", {}), r.get("totals", {})
            o_b, o_r = s.get("other/bm25/baseline", {}), s.get("other/bm25/replace", {})
            g_b, g_r = s.get("other/neighbors/baseline", {}), s.get("other/neighbors/replace", {})
            v = t.get("victim", {})
            return (f"other: {t.get('other', {}).get('errors')} errors / {t.get('other', {}).get('calls', 0):,} calls, "
                    f"bm25 p50/p95 {fmt_ms(o_b.get('p50_ms'))}/{fmt_ms(o_b.get('p95_ms'))} -> "
                    f"{fmt_ms(o_r.get('p50_ms'))}/{fmt_ms(o_r.get('p95_ms'))} ms, 2-hop "
                    f"{fmt_ms(g_b.get('p50_ms'))}/{fmt_ms(g_b.get('p95_ms'))} -> "
                    f"{fmt_ms(g_r.get('p50_ms'))}/{fmt_ms(g_r.get('p95_ms'))} ms; victim: {v.get('errors')} errors, "
                    f"{v.get('transient_empty_bm25')}+{v.get('transient_empty_neighbors')} transiently empty")
    except Exception as exc:  # a summary line must not hide the results above it
        return f"({type(exc).__name__}: {exc})"
    return ""


def summary_table(results: dict) -> str:
    rows = [("scenario", "result", "s", "survived", "lost", "figures")]
    for name, r in results.items():
        verdicts = [c["verdict"] for c in r.get("checks", [])]
        verdict = "FAIL" if "FAIL" in verdicts or r.get("error") else ("WARN" if "WARN" in verdicts else "PASS")
        cmp = r.get("comparison", {})
        lost = sorted({name for c in r.get("comparisons", []) for name in
                       c["comparison"]["lost"] + list(c["comparison"]["changed"]) + c["comparison"]["appeared"]})
        rows.append((name, verdict, f"{r.get('seconds', 0):.0f}", ",".join(cmp.get("survived", [])) or "-",
                     ",".join(lost) or "nothing", r.get("error") or headline(name, r)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:5], widths)) + "  " + row[5] for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 7)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=20_000, help="nodes of the synthetic SKBs (default 20000)")
    parser.add_argument("--index-nodes", type=int, default=600,
                        help="nodes of the SKB whose dense build is killed (embedding is slow on a CPU; default 600)")
    parser.add_argument("--only", choices=SCENARIOS, action="append", help="run this scenario only (repeatable)")
    parser.add_argument("--clients", type=int, default=8, help="clients searching `other` during the replace")
    parser.add_argument("--victim-clients", type=int, default=2, help="clients searching `victim` during its replace")
    parser.add_argument("--baseline-seconds", type=float, default=10.0, help="client window before the replace")
    parser.add_argument("--home", help="STARK_PG_HOME for the benchmark's own embedded server "
                                       "(default: a fresh temporary directory, removed at the end)")
    parser.add_argument("--keep-home", action="store_true", help="do not remove the temporary home at the end")
    parser.add_argument("--json", action="store_true", help="print everything as JSON instead of text")
    args = parser.parse_args()

    temporary = args.home is None
    home = Path(args.home or tempfile.mkdtemp(prefix="stark-fault-")).resolve()
    if not temporary and home == (Path.home() / ".local/share/stark-pg").resolve():
        raise SystemExit("--home must not be the user's own stark-pg home")
    os.environ["STARK_PG_HOME"] = str(home)
    os.environ.pop("STARK_PG_DSN", None)
    sys.path.insert(0, str(ROOT))
    from stark_pg.db import embedded

    wall = time.perf_counter()
    report = {"home": str(home), "nodes": args.nodes, "index_nodes": args.index_nodes, "cpus": os.cpu_count(),
              "load_average_start": load_avg()}
    if not args.json:
        print(f"server: embedded, STARK_PG_HOME={home}; {args.nodes:,}-node SKBs; {os.cpu_count()} CPUs; "
              f"load average {report['load_average_start']}", flush=True)
    server = embedded.start()
    bench = Bench(args, home, server.uri)
    failed = False
    try:
        report["setup"] = bench.setup()
        for name in dict.fromkeys(args.only or SCENARIOS):
            title = getattr(bench, f"scenario_{name}").__name__
            bench.say(f"\n== {name} ==")
            bench.progress(f"scenario {name}")
            started = time.perf_counter()
            try:
                result = getattr(bench, title)()
            except Exception as exc:  # a scenario that breaks is a finding too; the others still run
                import traceback

                bench.cleanup()
                bench.close()
                result = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                          "traceback": traceback.format_exc()}
                bench.say(f"  FAIL the scenario itself broke: {result['error']}")
            result["seconds"] = round(time.perf_counter() - started, 1)
            result["load_average"] = load_avg()
            bench.say(f"  ({result['seconds']} s, load average {result['load_average']})")
            bench.results[name] = result
    finally:
        bench.cleanup()
        bench.close()
        report["load_average_end"] = load_avg()
        report["seconds"] = round(time.perf_counter() - wall, 1)
        try:
            embedded.stop()
        except Exception as exc:  # report, and still remove the temporary home
            print(f"stopping the embedded server failed: {exc}", file=sys.stderr)
        if temporary and not args.keep_home:
            shutil.rmtree(home, ignore_errors=True)

    for r in bench.results.values():
        verdicts = [c["verdict"] for c in r.get("checks", [])]
        failed = failed or "FAIL" in verdicts or "error" in r
    report["scenarios"] = bench.results
    report["failed"] = failed
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print("\n" + summary_table(bench.results))
        print(f"\n{report['seconds']} s in all; load average {report['load_average_start']} at the start, "
              f"{report['load_average_end']} at the end; "
              + ("an invariant FAILED" if failed else "every invariant held"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
