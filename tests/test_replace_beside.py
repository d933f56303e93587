"""Replacing an SKB (issue 15, items 5-7): built beside the old one, swapped at the end.

- Other SKBs stay fully usable during a replace: a real `stark-pg load` process is held at a known
  point late in its transaction (the test holds a row lock on one of the old SKB's eval runs, which
  the swap must move), and meanwhile graph queries on another SKB run under a 2 s lock_timeout.
  Before the fix the load held an AccessExclusive lock on stark.edge from its first statement.
- Searches of the SKB being replaced see the old version, not an empty one.
- Nothing derived is silently lost: postings, vectors, eval runs and models move to the new version;
  the refresh re-does only the nodes whose text changed; an eval run interrupted before a reload is
  not resumed on the new data.
- A search over an SKB without the index its method reads is an error naming `stark-pg index`.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import psycopg
import pytest

from loaders.synthetic import SyntheticSource
from stark_pg.db import connect
from stark_pg.index.dense import build_dense
from stark_pg.index.lexical import build_lexical
from stark_pg.index.graph import build_graph_summary
from stark_pg.index.refresh import carried_indexes, refresh_indexes
from stark_pg.retrieve import get_method
from stark_pg.skb.store import load_skb

CHANGED_NODE = 7
NEW_TEXT = "zyxwvut quixotic marmalade"


class EditedSource:
    """A synthetic source with one node's text fields replaced (everything else identical)."""

    def __init__(self, inner: SyntheticSource, node_id: int, text: str):
        self._inner, self._node_id, self._text = inner, node_id, text

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def nodes(self):
        for position, node in self._inner.nodes():
            if node.node_id == self._node_id:
                node = dataclasses.replace(node, fields={f: self._text for f in node.fields} or {"description": self._text})
            yield position, node


def synthetic(nodes: int, seed: int = 5) -> SyntheticSource:
    return SyntheticSource(nodes=nodes, seed=seed, edges_per_node=6)


def search(conn, skb: str, method: str, query: str, k: int = 10, **settings):
    module = get_method(method)
    options = dataclasses.replace(module.Options(), **settings) if settings else module.Options()
    return module.search(conn, skb, query, k, options)


def ids(ranking) -> list[int]:
    return [hit.node_id for hit in ranking.hits]


def test_a_replace_keeps_derived_data_and_refreshes_only_what_changed(conn):
    load_skb(conn, synthetic(300), "s")
    build_lexical(conn, "s")
    build_dense(conn, "s", multi_vector=False)
    build_graph_summary(conn, "s")
    conn.execute("insert into stark.eval_run (skb_id, method, options, query_set, depth, stored_k, config_hash) "
                 "select skb_id, 'bm25', '{}', 'val', 10, 10, 'h' from stark.skb where name = 's'")
    before_vectors = dict(conn.execute(
        "select node_id, vec::text from stark.emb_doc_1 d join stark.skb s using (skb_id) where s.name = 's'"))
    old_id = conn.execute("select skb_id from stark.skb where name = 's'").fetchone()[0]

    summary = load_skb(conn, EditedSource(synthetic(300), CHANGED_NODE, NEW_TEXT), "s")

    assert summary.status == "replaced" and summary.skb_id != old_id
    assert {"lex_doc", "lex_posting", "lex_stats", "lex_term", "emb_doc_1", "embedding_build",
            "eval_run"} <= set(summary.carried), summary.carried
    assert summary.carried["emb_doc_1"] == len(before_vectors) == 300
    assert conn.execute("select count(*) from stark.skb").fetchone()[0] == 1
    # the old version's rows are gone from every table and its HNSW index too (edges: see below)
    # the graph summary described the old version's edges: it is not carried, it goes with them
    assert "edge_type_link" not in summary.carried
    for table in ("node", "node_field", "query", "lex_posting", "emb_doc_1", "eval_run", "edge_type_link"):
        assert conn.execute(f"select count(*) from stark.{table} where skb_id = %s", (old_id,)).fetchone()[0] == 0
    def left():
        return {r[0] for r in conn.execute("select relname from pg_class where relname like %s", (f"%\\_\\_skb{old_id}",))}
    # its edge partition and its pg_textsearch tables are emptied (MVCC: older snapshots still read
    # their rows), and they and its indexes are dropped by the next load
    text_tables = {t for t in left() if t.startswith("lexbm25_")}
    text_indexes = {t for t in left() if t.startswith("lexbm25i_")}
    assert left() - text_tables - text_indexes == {f"edge__skb{old_id}", f"emb_doc_1_hnsw__skb{old_id}"}
    assert len(text_tables) == len(text_indexes) == 3     # *, name, description
    for table in text_tables:
        assert conn.execute(f"select count(*) from stark.{table}").fetchone()[0] == 0
    assert conn.execute("select count(*) from stark.edge where skb_id = %s", (old_id,)).fetchone()[0] == 0
    # the history moved with the name
    assert conn.execute("select count(*) from stark.eval_run r join stark.skb s using (skb_id) "
                        "where s.name = 's'").fetchone()[0] == 1

    report = refresh_indexes(conn, "s", carried_indexes(summary.carried))
    assert report["lexical"]["reindexed"]["*"] == 1           # only the edited node is re-tokenised
    # the new version's pg_textsearch tables are built whole, and find the edited text
    assert report["lexical"]["engine"] == "textsearch"
    assert [r[0] for r in conn.execute("select node_id from stark.bm25('s', %s, 1, engine => 'textsearch')",
                                       (NEW_TEXT,))] == [CHANGED_NODE]
    assert report["dense"][0]["documents"]["embedded"] == 1   # and re-embedded
    assert report["dense"][0]["indexes_built"], "the HNSW index of the new version is built"
    assert report["graph"]["built"] and report["graph"]["rows"] > 0       # and its graph summary
    after_vectors = dict(conn.execute(
        "select node_id, vec::text from stark.emb_doc_1 d join stark.skb s using (skb_id) where s.name = 's'"))
    assert {n for n in before_vectors if before_vectors[n] != after_vectors[n]} == {CHANGED_NODE}

    assert ids(search(conn, "s", "bm25", NEW_TEXT, 3))[0] == CHANGED_NODE
    assert ids(search(conn, "s", "vss", NEW_TEXT, 3))[0] == CHANGED_NODE
    load_skb(conn, synthetic(100, seed=9), "another")
    assert left() == set()


def test_a_query_whose_snapshot_predates_a_replace_still_reads_the_old_edges(db_url):
    with connect(db_url) as conn:
        load_skb(conn, synthetic(200), "s")
        edges = conn.execute("select count(*) from stark.edge e join stark.skb s using (skb_id) "
                             "where s.name = 's'").fetchone()[0]
    with psycopg.connect(db_url) as reader, connect(db_url) as writer:
        reader.execute("set transaction isolation level repeatable read")
        skb_id = reader.execute("select skb_id from stark.skb where name = 's'").fetchone()[0]   # the snapshot
        load_skb(writer, synthetic(200, seed=6), "s")
        assert reader.execute("select count(*) from stark.edge where skb_id = %s", (skb_id,)).fetchone()[0] == edges


def test_an_eval_run_interrupted_before_a_reload_is_not_resumed(conn):
    from stark_pg.resources import queries as sql

    load_skb(conn, synthetic(200), "s")
    skb_id = conn.execute("select skb_id from stark.skb where name = 's'").fetchone()[0]
    with conn.transaction():
        run_id = sql().create_run(conn, skb_id=skb_id, method="bm25", options="{}", query_set="val", depth=10,
                                  stored_k=10, config_hash="same")
    assert [r for (r,) in sql().unfinished_runs(conn, skb_id=skb_id, config_hash="same")] == [run_id]
    summary = load_skb(conn, synthetic(200), "s")
    assert summary.carried.get("eval_run") == 1
    assert not list(sql().unfinished_runs(conn, skb_id=summary.skb_id, config_hash="same"))


def _waiting_for_lock(url: str, pid: int) -> bool:
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute("select wait_event_type = 'Lock' from pg_stat_activity where pid = %s",
                         (pid,)).fetchone() == (True,)


def _loader_pid(url: str, process: subprocess.Popen, timeout: float = 300) -> int:
    """The backend of the replacing load, once it waits on the row lock the test holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"the load ended (exit {process.returncode}) before reaching the swap:\n{out}\n{err}")
        with psycopg.connect(url, autocommit=True) as c:
            row = c.execute("select pid from pg_stat_activity where datname = current_database() "
                            "and wait_event_type = 'Lock' and backend_type = 'client backend'").fetchone()
        if row:
            return row[0]
        time.sleep(0.2)
    pytest.fail("the replacing load never reached the swap")


def test_other_skbs_stay_usable_and_the_replaced_one_readable_during_a_replace(db_url):
    with connect(db_url) as conn:
        load_skb(conn, synthetic(400, seed=1), "other")
        load_skb(conn, synthetic(3000, seed=2), "big")
        build_lexical(conn, "big")
        conn.execute("insert into stark.eval_run (skb_id, method, options, query_set, depth, stored_k, "
                     "config_hash) select skb_id, 'bm25', '{}', 'val', 10, 10, 'h' from stark.skb where name = 'big'")
        query = conn.execute("select body from stark.query q join stark.skb s using (skb_id) "
                             "where s.name = 'big' order by query_id limit 1").fetchone()[0]
        big_before = ids(search(conn, "big", "bm25", query))
        hub = conn.execute("select src from stark.edge e join stark.skb s using (skb_id) where s.name = 'other' "
                           "group by src order by count(*) desc limit 1").fetchone()[0]
        other_before = conn.execute("select count(*) from stark.neighbors('other', %s, hops => 2)",
                                    (hub,)).fetchone()[0]
    assert big_before and other_before

    holder = psycopg.connect(db_url)       # holds the old version's eval run: the swap must wait for it
    holder.execute("select * from stark.eval_run for update")
    env = os.environ | {"STARK_PG_DSN": db_url, "COLUMNS": "160"}
    loader = subprocess.Popen([sys.executable, "-m", "stark_pg", "load", "synthetic", "--nodes", "3000",
                               "--seed", "3", "--edges-per-node", "6", "--name", "big", "--no-refresh", "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        pid = _loader_pid(db_url, loader)
        with psycopg.connect(db_url, autocommit=True) as reader:
            reader.execute("set lock_timeout = '2s'")
            for _ in range(3):
                # graph queries on another SKB: no lock of the load in their way
                assert reader.execute("select count(*) from stark.neighbors('other', %s, hops => 2)",
                                      (hub,)).fetchone()[0] == other_before
                # the SKB being replaced still answers with its old version
                with connect(db_url) as conn:
                    conn.execute("set lock_timeout = '2s'")
                    assert ids(search(conn, "big", "bm25", query)) == big_before
            assert _waiting_for_lock(db_url, pid), "the load went on while the test held its row"
    finally:
        holder.rollback()
        holder.close()
        out, err = loader.communicate(timeout=600)
    assert loader.returncode == 0, err
    assert "stark-pg index big" in out     # --no-refresh says what to run
    with connect(db_url) as conn:
        assert conn.execute("select meta -> 'seed' from stark.skb where name = 'big'").fetchone()[0] == 3
        assert search(conn, "big", "bm25", query).hits       # the carried postings answer at once


def test_a_search_over_a_missing_index_says_run_index(conn, cli):
    load_skb(conn, synthetic(120), "bare")
    split = conn.execute("select min(split) from stark.query").fetchone()[0]
    for method in ("bm25", "vss"):   # eval stops at the first query instead of storing all-zero metrics
        done = cli("eval", "bare", "-m", method, "--split", split, expect=1)
        assert "stark-pg index bare" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert conn.execute("select count(*) from stark.eval_result").fetchone()[0] == 0
    for method in ("bm25", "vss", "multivss", "hybrid"):
        with pytest.raises(Exception, match="stark-pg index bare"):
            search(conn, "bare", method, "anything")
    with pytest.raises(Exception, match="stark-pg train mfar bare"):
        search(conn, "bare", "mfar", "anything")


def test_the_sql_bm25_says_what_index_is_missing(conn):
    """stark.bm25 raises as the bm25 method does; 4StepFocus's name linking still works without the index."""
    load_skb(conn, synthetic(120), "bare")
    name = conn.execute("select name from stark.node order by node_id limit 1").fetchone()[0]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="has no lexical index") as info:
        conn.execute("select * from stark.bm25('bare', 'anything')")
    assert info.value.diag.message_hint == "run `stark-pg index bare`"
    conn.rollback()
    found = conn.execute("select node_id from stark.focus_name_candidates('bare', %s)", (name,)).fetchall()
    assert found, "exact name matches need no lexical index"
    build_lexical(conn, "bare")
    assert conn.execute("select count(*) from stark.bm25('bare', %s, field => 'name')", (name,)).fetchone()[0] > 0
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no indexed field 'nope' \\(fields: .*name"):
        conn.execute("select * from stark.bm25('bare', 'anything', field => 'nope')")


READS = {   # every SQL API read of per-SKB objects: the pg_textsearch index, the HNSW index, the edge partition
    "bm25 textsearch": ("select node_id, score from stark.bm25('victim', 'drug target protein', 10, "
                        "engine => 'textsearch')", ()),
    "bm25 sql": ("select node_id, score from stark.bm25('victim', 'drug target protein', 10, engine => 'sql')", ()),
    "bm25 name": ("select node_id, score from stark.bm25('victim', 'process', 10, field => 'name')", ()),
    "vss": ("select node_id, score from stark.vss('victim', %s, 10)", ("vector",)),
    "hybrid": ("select node_id, score from stark.hybrid('victim', 'drug target protein', %s, 10)", ("vector",)),
    "neighbors": ("select node_id, hop from stark.neighbors('victim', %s, hops => 2)", ("node",)),
    "document": ("select stark.document('victim', %s, true)", ("node",)),
}


def read_all(conn, vector, node: int, skip=()) -> dict:
    values = {"vector": vector, "node": node}
    return {name: conn.execute(statement, [values[a] for a in args]).fetchall()
            for name, (statement, args) in READS.items() if name not in skip}


def test_a_reader_of_the_old_version_finishes_on_it_and_a_new_reader_reads_the_new(db_url):
    """A replace commits while a reader's snapshot still sees the old version (a repeatable-read
    transaction: the longest any query can see it): the reader goes on reading the old version, with its
    indexes, whatever the replace and the refresh after it dropped or built; a reader after the commit
    reads the new version, before its refresh (BM25's engine auto then takes the exact SQL engine: the
    new version's pg_textsearch index comes with the refresh) and after; none sees a missing index or table.
    Before the fix the replace dropped the old version's pg_textsearch index in its transaction, and a
    reader that had resolved the name got `index "stark.lexbm25i_..." does not exist`."""
    with connect(db_url) as conn:
        load_skb(conn, synthetic(200), "victim")
        build_lexical(conn, "victim")
        build_dense(conn, "victim", multi_vector=False)
        vector = conn.execute("select stark.node_vector('victim', 5)").fetchone()[0]
        node = conn.execute("select e.src from stark.edge e where e.skb_id = stark.skb_id('victim') group by e.src "
                            "having count(*) between 2 and 8 order by e.src limit 1").fetchone()[0]
    with connect(db_url) as reader, connect(db_url) as writer:
        writer.execute("set lock_timeout = '20s'")     # the replace takes no lock the reader holds: no wait
        reader.autocommit = False
        reader.execute("set transaction isolation level repeatable read")
        before = read_all(reader, vector, node)
        assert all(before.values()), before
        summary = load_skb(writer, synthetic(200, seed=6), "victim")     # other text, other edges
        assert read_all(reader, vector, node) == before                      # the old version, whole
        with connect(db_url) as fresh:         # after the commit, before the refresh: the SQL engine answers
            new = read_all(fresh, vector, node, skip={"bm25 textsearch"})
        assert new["neighbors"] != before["neighbors"]                 # the new edges
        refresh_indexes(writer, "victim", carried_indexes(summary.carried))
        assert read_all(reader, vector, node) == before
        reader.rollback()
        with connect(db_url) as fresh:
            refreshed = read_all(fresh, vector, node)
        assert refreshed["neighbors"] == new["neighbors"]
        assert [n for n, _ in refreshed["bm25 textsearch"]] == [n for n, _ in refreshed["bm25 sql"]]
        # the next load drops what the replace left for the old readers
        load_skb(writer, synthetic(100, seed=9), "another")
        old_id = summary.skb_id
    with connect(db_url) as conn:
        left = conn.execute("select relname from pg_class where relname ~ '__skb[0-9]+$' and "
                            "substring(relname from '__skb([0-9]+)$')::int not in (select skb_id from stark.skb)"
                            ).fetchall()
        assert left == [], left
        assert old_id in {r[0] for r in conn.execute("select skb_id from stark.skb")}


def test_readers_looping_through_two_replaces_see_no_error(db_url):
    """Readers calling every per-SKB read of the SQL API in a loop, each statement on its own snapshot,
    and the methods' searches (several statements each, run on one snapshot), while the SKB is replaced
    twice (and refreshed): every call answers (docs/loading.md's promise). Before, a BM25 search that
    resolved the name before a swap and read its indexed scopes after it said the SKB had no index."""
    import threading

    with connect(db_url) as conn:
        load_skb(conn, synthetic(200), "victim")
        build_lexical(conn, "victim")
        build_dense(conn, "victim", multi_vector=False)
        vector = conn.execute("select stark.node_vector('victim', 5)").fetchone()[0]
        node = conn.execute("select e.src from stark.edge e where e.skb_id = stark.skb_id('victim') group by e.src "
                            "having count(*) between 2 and 8 order by e.src limit 1").fetchone()[0]
    stop = threading.Event()
    calls, errors = [0], []

    def read():
        with connect(db_url) as reader:
            while not stop.is_set():
                for name, (statement, args) in READS.items():
                    values = {"vector": vector, "node": node}
                    try:
                        reader.execute(statement, [values[a] for a in args]).fetchall()
                    except psycopg.Error as exc:
                        if name == "bm25 textsearch" and "has no pg_textsearch index" in str(exc):
                            continue        # asked for an index the new version gets with its refresh
                        errors.append(f"{name}: {exc}")
                    calls[0] += 1

    def search():       # the methods' own path: several statements, one snapshot (search_described)
        from stark_pg.retrieve.results import search_described

        with connect(db_url) as reader:
            while not stop.is_set():
                for method in ("bm25", "vss", "hybrid"):
                    module = get_method(method)
                    try:
                        search_described(reader, "victim", "drug target protein", module, module.Options(), k=10)
                    except Exception as exc:  # noqa: BLE001 - every failure is the finding
                        errors.append(f"{method}: {type(exc).__name__}: {exc}")
                    calls[0] += 1

    readers = [threading.Thread(target=read) for _ in range(2)] + [threading.Thread(target=search)]
    for thread in readers:
        thread.start()
    try:
        with connect(db_url) as writer:
            for seed in (6, 7):
                summary = load_skb(writer, synthetic(200, seed=seed), "victim")
                refresh_indexes(writer, "victim", carried_indexes(summary.carried))
    finally:
        stop.set()
        for thread in readers:
            thread.join(60)
    assert calls[0] > 50 and errors == [], (calls[0], errors[:3])


def test_a_search_that_straddles_a_replace_reads_one_version(db_url, monkeypatch):
    """A method's search is several statements (bm25: the SKB's id, its indexed scopes, the ranking).
    A replace that commits between two of them used to make the second find no index for the id the
    first resolved ("has no lexical index"); search_described runs them on one snapshot."""
    from stark_pg.retrieve import bm25
    from stark_pg.retrieve.results import search_described

    with connect(db_url) as conn:
        load_skb(conn, synthetic(150), "victim")
        build_lexical(conn, "victim")
    original = bm25.check_scope
    replaced = []

    def replace_first(conn, skb, skb_id, scope):
        if not replaced:                  # the swap commits right after the search resolved the name
            with connect(db_url) as writer:
                replaced.append(load_skb(writer, synthetic(150, seed=6), "victim").skb_id)
        return original(conn, skb, skb_id, scope)

    monkeypatch.setattr(bm25, "check_scope", replace_first)
    with connect(db_url) as reader:
        hits, ranking = search_described(reader, "victim", "drug target protein", bm25, bm25.Options(), k=5)
    assert replaced and hits and ranking.trace["method"] == "bm25"
