"""Hot standbys of the embedded server (stark_pg/db/replica.py) and reads routed to them.

A real primary in a temporary STARK_PG_HOME (adding a standby restarts the primary with wal_level
replica, which the session's shared server must not go through), a real standby made by
pg_basebackup, a small synthetic SKB indexed on the primary. Checked: the standby is private and
read-only; every LLM-free method ranks on it exactly as on the primary (bm25, vss, hybrid,
multivss, and mfar and fusion with models trained briefly on the primary); an evaluation reading on the
standby stores its rows on the primary; a standby stopped mid-evaluation loses and duplicates no
query; what a read connection must write (the LLM cache) lands on the primary; the CLI's errors.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

SKB = "standby-syn"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A primary with an indexed SKB (and an mFAR and a fusion model trained in a few rounds) and one
    running standby, in a home of their own."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect, embedded, replica
    from stark_pg.index.dense import build_dense
    from stark_pg.index.lexical import build_lexical, relation_scopes
    from stark_pg.models.fusion import FusionSettings
    from stark_pg.skb.store import load_skb
    from stark_pg.train.fusion import train_fusion
    from stark_pg.train.mfar import TrainSettings, train_mfar

    home = tmp_path_factory.mktemp("standby-home")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STARK_PG_HOME", str(home))
        env.setenv("STARK_PG_MEMORY_MB", "512")
        env.delenv("STARK_PG_DSN", raising=False)
        primary = embedded.start()
        try:
            with connect(primary.uri) as conn:
                skb_id = load_skb(conn, SyntheticSource(nodes=240, seed=11, edges_per_node=6), SKB).skb_id
                build_lexical(conn, SKB, extra_scopes=relation_scopes(conn, SKB))
                build_dense(conn, SKB, multi_vector=True)
                train_mfar(conn, SKB, TrainSettings(variant="all", epochs=3, patience=3, negatives=8))
                train_fusion(conn, SKB, FusionSettings(rounds=[5], folds=2, min_data_in_leaf=[2], bag=1))
            standby = replica.add()
            replica.wait_caught_up(standby)
            yield SimpleNamespace(home=home, primary=primary.uri, standby=standby, skb_id=skb_id,
                                  routed=replica.routed_url(primary.uri, [standby]))
        finally:
            replica.stop_all()
            embedded.stop()


def cli(home: Path, *args: str, expect: int | None = 0) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "STARK_PG_DSN"} | {"STARK_PG_HOME": str(home),
                                                                          "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "stark_pg", *args], capture_output=True, text=True, env=env,
                          timeout=600, stdin=subprocess.DEVNULL)
    if expect is not None:
        assert done.returncode == expect, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def test_the_standby_is_a_private_read_only_copy(pair):
    standby = pair.standby
    with psycopg.connect(standby.url, autocommit=True) as conn:
        assert conn.execute("select pg_is_in_recovery()").fetchone()[0] is True
        assert conn.execute("select count(*) from stark.node").fetchone()[0] == 240
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("delete from stark.llm_cache")
    info = standby.pgdata.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == (pair.home / "pgdata").stat().st_uid          # the server's OS user, as the primary's
    for name in ("pg_hba.conf", "pg_ident.conf"):                       # the primary's peer-only rules
        assert (standby.pgdata / name).read_text() == (pair.home / "pgdata" / name).read_text()
    assert "trust" not in (standby.pgdata / "pg_hba.conf").read_text().replace("# ", "")
    socket_dir = Path(conninfo_to_dict(standby.url)["host"])
    assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700
    if os.geteuid() == 0 and shutil.which("runuser"):
        import pgserver

        psql = Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql"
        other = subprocess.run(["runuser", "-u", "nobody", "--", str(psql), "-h", str(socket_dir), "-p",
                                str(standby.port), "-U", "postgres", "-Atc", "select 1", "postgres"],
                               capture_output=True, text=True, timeout=60)
        assert other.returncode != 0, other.stdout


def test_list_and_status_show_each_standby_and_its_lag(pair):
    listed = json.loads(cli(pair.home, "db", "replica", "list", "--json").stdout)
    assert [(r["port"], r["running"], r["url"]) for r in listed] == [(pair.standby.port, True, pair.standby.url)]
    assert listed[0]["replication"]["state"] == "streaming" and listed[0]["replication"]["bytes_behind"] >= 0
    status = json.loads(cli(pair.home, "db", "status", "--json").stdout)
    assert status["role"] == "primary"
    assert [s["name"] for s in status["standbys"]] == [pair.standby.name]
    text = cli(pair.home, "db", "status").stdout
    assert f"{pair.standby.name} streaming" in text and "bytes behind" in text
    routed = json.loads(cli(pair.home, "--dsn", pair.routed, "db", "status", "--json").stdout)   # several hosts
    assert routed["role"] == "primary" and routed["schema_revision"] == routed["head_revision"]
    on_standby = json.loads(cli(pair.home, "--dsn", pair.standby.url, "db", "status", "--json").stdout)
    assert on_standby["role"] == "standby" and on_standby["standbys"] == []


def test_the_cli_searches_on_the_standby_and_stores_eval_runs_on_the_primary(pair):
    from stark_pg.db.connection import several_hosts

    assert several_hosts(cli(pair.home, "db", "url", "--standbys").stdout.strip())
    found = json.loads(cli(pair.home, "--dsn", pair.routed, "search", SKB, "drug", "-m", "bm25", "--json").stdout)
    assert found["trace"]["engine"] == "sql"                 # the standby's engine: it searched there
    done = json.loads(cli(pair.home, "--dsn", pair.routed, "eval", SKB, "-m", "bm25", "--limit", "5",
                          "-o", "k1=1.2", "--json").stdout)
    run_id = done["methods"]["bm25"]["run_id"]
    with psycopg.connect(pair.primary) as conn:
        assert conn.execute("select count(*) from stark.eval_result where run_id = %s", (run_id,)).fetchone()[0] == 5


def test_the_python_api_and_serve_search_on_the_standby(pair):
    """`stark_pg.connect(dsn)` and `stark-pg serve` on a DSN with standbys: searches run on a standby
    (its BM25 engine is the SQL one: pg_textsearch cannot read on a standby), and rank as the primary."""
    from starlette.testclient import TestClient

    import stark_pg
    from stark_pg.serve import create_app
    from stark_pg.serve.app import Store

    with stark_pg.connect(pair.routed) as db:
        routed = db.skb(SKB).search("drug", method="bm25", k=10)
        assert routed.trace["engine"] == "sql"
        assert db.read_conn.execute("select pg_is_in_recovery()").fetchone()[0] is True
        assert db.conn.execute("select pg_is_in_recovery()").fetchone()[0] is False      # writes: the primary
    with stark_pg.connect(pair.primary) as db:
        assert db.read_conn is db.conn
        on_primary = db.skb(SKB).search("drug", method="vss", k=10)
    with stark_pg.connect(pair.routed) as db:
        assert [h.node_id for h in db.skb(SKB).search("drug", method="vss", k=10)] == [h.node_id for h in on_primary]
    with Store(pair.routed).connect() as conn:
        assert conn.execute("select pg_is_in_recovery()").fetchone()[0] is True
    with TestClient(create_app(pair.routed)) as client:
        served = client.get("/api/search", params={"skb": SKB, "q": "drug", "method": "bm25", "k": 10})
        assert served.status_code == 200, served.text
        assert served.json()["trace"]["engine"] == "sql"


def _searches(url: str, read: bool, method: str, settings: dict, queries) -> list:
    from stark_pg.db import connect
    from stark_pg.retrieve import get_method

    module = get_method(method)
    options = module.Options(**settings)
    with connect(url, read=read) as conn:
        in_recovery = conn.execute("select pg_is_in_recovery()").fetchone()[0]
        rankings = [[(h.node_id, round(h.score, 6)) for h in module.search(conn, SKB, q.body, 50, options).hits]
                    for q in queries]
    return in_recovery, rankings


@pytest.mark.parametrize("method, settings", [("bm25", {}), ("bm25", {"engine": "sql"}), ("bm25", {"field": "name"}),
                                              ("vss", {}), ("vss", {"exact": True}), ("hybrid", {}),
                                              ("hybrid", {"fusion": "weighted", "weight": 0.6}), ("multivss", {}),
                                              ("mfar", {}), ("mfar", {"engine": "sql"}), ("fusion", {})])
def test_a_standby_ranks_as_the_primary(pair, method, settings):
    from stark_pg.db import connect
    from stark_pg.eval import query_sets

    with connect(pair.primary) as conn:
        queries = query_sets.from_split(conn, pair.skb_id, "val").queries
    assert queries
    on_primary, expected = _searches(pair.primary, False, method, settings, queries)
    on_standby, found = _searches(pair.routed, True, method, settings, queries)     # routed: prefer-standby
    assert (on_primary, on_standby) == (False, True)
    assert found == expected and any(expected)


def test_textsearch_engine_on_a_standby_is_refused_in_one_line(pair):
    from stark_pg.db import connect
    from stark_pg.retrieve import get_method

    module = get_method("bm25")
    with connect(pair.standby.url) as conn, pytest.raises(psycopg.errors.FeatureNotSupported) as caught:
        module.search(conn, SKB, "drug", 5, module.Options(engine="textsearch"))
    assert "hot standby" in str(caught.value) and "engine sql" in caught.value.diag.message_hint


class Recording(ModuleType):
    """A method that searches as `inner` does and notes, per query, whether it ran on a standby."""

    def __init__(self, inner: ModuleType, hook=None):
        super().__init__(f"recording-{inner.__name__}")
        self.inner, self.Options, self.hook, self.on_standby = inner, inner.Options, hook, []

    def search(self, conn, skb, query, k, options):
        self.on_standby.append(conn.execute("select pg_is_in_recovery()").fetchone()[0])
        if self.hook:
            self.hook(len(self.on_standby))
        return self.inner.search(conn, skb, query, k, options)


def _evaluate(pair, method: str, reads=None, hook=None, label_suffix: str = ""):
    from stark_pg.db import connect
    from stark_pg.eval import query_sets
    from stark_pg.eval.query_sets import QuerySet
    from stark_pg.eval.runner import run_method
    from stark_pg.retrieve import get_method

    recording = Recording(get_method(method), hook)
    with connect(pair.primary) as conn:
        val = query_sets.from_split(conn, pair.skb_id, "val")
        chosen = QuerySet(val.label + label_suffix, val.split, val.queries)     # a run of its own
        outcome = run_method(conn, pair.skb_id, SKB, method, recording.Options(), chosen,
                             resolve=lambda _: recording, reads=reads)
        rows = conn.execute("select query_id, ranked_ids, error from stark.eval_result where run_id = %s "
                            "order by query_id", (outcome.run_id,)).fetchall()
    return outcome, rows, recording.on_standby, [q.query_id for q in val.queries]


def test_an_evaluation_reading_on_the_standby_stores_on_the_primary(pair):
    from stark_pg.db import connect

    baseline, base_rows, base_where, ids = _evaluate(pair, "hybrid", label_suffix=":primary")
    outcome, rows, where, _ = _evaluate(pair, "hybrid", reads=lambda: connect(pair.routed, read=True),
                                        label_suffix=":standby")
    assert not any(base_where) and where and all(where)            # every search of the second on the standby
    assert [r[0] for r in rows] == ids and not any(r[2] for r in rows)
    assert [r[1] for r in rows] == [r[1] for r in base_rows]
    assert outcome.summary["metrics"] == baseline.summary["metrics"]


def test_a_read_connection_writes_the_llm_cache_on_the_primary(pair):
    from stark_pg.db import connect
    from stark_pg.llm.cache import LLMCache

    with connect(pair.routed, read=True) as conn:
        assert conn.execute("select pg_is_in_recovery()").fetchone()[0] is True
        cache = LLMCache(conn)
        cache.put("test", "standby", "k-standby", {"q": 1}, {"a": 2}, prompt_tokens=1, completion_tokens=1,
                  cost_usd=None, seconds=0.1)
        cache.close()
    with psycopg.connect(pair.primary) as conn:
        assert conn.execute("select response from stark.llm_cache where request_hash = 'k-standby'").fetchone() \
            == ({"a": 2},)


def test_cli_errors_for_an_unknown_standby_and_a_port_in_use(pair):
    for args, message in ((("db", "replica", "remove", "6123"), "no standby on port 6123"),
                          (("db", "replica", "start", "6123"), "no standby on port 6123"),
                          (("db", "replica", "add", "--port", str(pair.standby.port)),
                           f"port {pair.standby.port} is in use by the standby"),
                          (("db", "replica", "add", "--port", "5432"), "port 5432 is in use by the primary"),
                          (("db", "replica", "add", "--port", "80"), "--port 80: must be between")):
        done = cli(pair.home, *args, expect=1)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], done.stderr
    done = cli(pair.home, "--dsn", pair.primary, "db", "replica", "list", expect=1)
    assert "embedded server" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_add_and_remove_a_second_standby(pair):
    from stark_pg.db import replica

    added = json.loads(cli(pair.home, "db", "replica", "add", "--port", "5444", "--json").stdout)
    assert added["port"] == 5444 and added["running"]
    with psycopg.connect(added["url"]) as conn:
        assert conn.execute("select pg_is_in_recovery()").fetchone()[0] is True
    cli(pair.home, "db", "replica", "remove", "5444")
    assert not (pair.home / "replicas" / "5444").exists()
    with psycopg.connect(pair.primary) as conn:
        assert conn.execute("select count(*) from pg_replication_slots where slot_name = %s",
                            (f"{replica.SLOT_PREFIX}5444",)).fetchone()[0] == 0


def test_a_standby_stopped_mid_eval_loses_and_duplicates_nothing(pair):
    from stark_pg.db import connect, replica

    def stop_the_standby(searched: int) -> None:
        if searched == 4:
            replica.stop(pair.standby)

    baseline, base_rows, _, ids = _evaluate(pair, "vss", label_suffix=":primary")
    try:
        outcome, rows, where, _ = _evaluate(pair, "vss", reads=lambda: connect(pair.routed, read=True),
                                            hook=stop_the_standby, label_suffix=":failover")
    finally:
        replica.start(pair.standby)
    assert where[:4] == [True] * 4 and where[-1] is False          # read on the standby, then on the primary
    assert [r[0] for r in rows] == ids                              # every query once, none failed
    assert not any(r[2] for r in rows) and outcome.summary["failed"] == 0
    assert [r[1] for r in rows] == [r[1] for r in base_rows]
    assert outcome.summary["metrics"] == baseline.summary["metrics"]


def test_standbys_start_again_with_the_primary(pair):
    from stark_pg.db import embedded, replica
    from stark_pg.db.connection import resolve_dsn

    cli(pair.home, "db", "stop")
    assert pair.standby.pid is None and embedded.running_pid() is None
    resolve_dsn(None)                   # any command: starts the primary, and with it its standbys
    assert pair.standby.pid is not None
    replica.wait_caught_up(pair.standby)
    with psycopg.connect(pair.standby.url) as conn:
        assert conn.execute("select count(*) from stark.node").fetchone()[0] == 240
