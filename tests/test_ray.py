"""`stark-pg index --executor ray` on a real Ray cluster: a head and a second node started on loopback
(`ray start --head`, `ray start --address`), one CPU each, for the whole module.

What is checked: the vectors the workers compute are the ones this process computes, written once per
node; a worker killed mid-index costs its batches again and nothing else (no missing vector, no batch
written twice); a build stopped mid-way resumes where it stopped; and the errors a user meets first
(Ray missing, a wrong address, more workers than the cluster holds) say what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray", reason="Ray is not installed: pip install 'stark-pg[ray]' (the dev extra has it)")

from conftest import cli_runner  # noqa: E402
from loaders.synthetic import SyntheticSource  # noqa: E402
from stark_pg import embed  # noqa: E402
from stark_pg.db import connect  # noqa: E402
from stark_pg.index.dense import find_model  # noqa: E402
from stark_pg.skb.store import load_skb  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_nodes(address: str, n: int, timeout: float = 90) -> None:
    """Until the cluster at `address` has `n` live nodes (asked from a separate process, so that this one
    never holds a Ray connection of its own)."""
    script = ("import sys, time, ray\n"
              "ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR')\n"
              "deadline = time.time() + float(sys.argv[3])\n"
              "while sum(x['Alive'] for x in ray.nodes()) < int(sys.argv[2]):\n"
              "    assert time.time() < deadline, 'the second Ray node did not join'\n"
              "    time.sleep(0.5)\n")
    subprocess.run([sys.executable, "-c", script, address, str(n), str(timeout)], check=True, timeout=timeout + 30,
                   capture_output=True)


@dataclass(frozen=True)
class Cluster:
    address: str      # HOST:PORT of the head
    marker: str       # the value of STARK_PG_TEST_RAY in its processes' environment


@pytest.fixture(scope="module")
def ray_cluster(server_url):
    """A two-node Ray cluster on loopback, one CPU per node, stopped afterwards (even when a
    test fails). Asks for server_url first: the nodes' workers inherit the test session's STARK_PG_HOME,
    so they share its model exports. Ray's files go to a short temporary directory (its socket paths
    must stay under the Unix limit); the nodes carry a marker in their environment, which their worker
    processes inherit, so that a test kills only this cluster's workers. No PYTHONPATH: the workers
    get stark_pg only as a remote node does, from the driver that ships it."""
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"RAY_USAGE_STATS_ENABLED": "0",
                                                                         "STARK_PG_TEST_RAY": str(temp)}
    common = ["--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    nodes = []
    try:
        nodes.append(subprocess.Popen([RAY, "start", "--head", "--port", str(port), "--include-dashboard=false",
                                       "--temp-dir", str(temp), *common], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        address = f"127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert nodes[0].poll() is None and time.time() < deadline, "the Ray head did not start"
                time.sleep(0.3)
        nodes.append(subprocess.Popen([RAY, "start", "--address", address, *common], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_for_nodes(address, 2)
        yield Cluster(address, str(temp))
    finally:
        for node in reversed(nodes):        # `ray start --block` stops its node's processes on SIGTERM
            node.send_signal(signal.SIGTERM)
        for node in reversed(nodes):
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                node.kill()
        shutil.rmtree(temp, ignore_errors=True)


def _workers_of(cluster_marker: str) -> list[int]:
    """Pids of this cluster's embedding workers (Ray names an actor's process after its class)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not (proc / "cmdline").read_bytes().startswith(b"ray::EmbeddingWorker"):
                continue
            if f"STARK_PG_TEST_RAY={cluster_marker}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _load(url: str, nodes: int, seed: int, name: str = "syn") -> None:
    with connect(url) as conn:
        load_skb(conn, SyntheticSource(nodes=nodes, seed=seed, edges_per_node=2), name)
        conn.commit()


def _stored(url: str) -> dict[int, tuple[str, np.ndarray]]:
    with connect(url) as conn:
        model = find_model(conn)
        rows = conn.execute(f"select node_id, doc_hash, vec from stark.{model.doc_table} "
                            "where skb_id = stark.skb_id('syn')").fetchall()
    return {n: (h, v.to_numpy()) for n, h, v in rows}


def _check_complete(url: str, stored: dict) -> None:
    """Every node has its one vector, of its current text, equal to what this process computes."""
    with connect(url) as conn:
        rows = conn.execute("select n.node_id, d, md5(d) from stark.node n, "
                            "stark.render_document(n.skb_id, n.node_id, true, 25) d "
                            "where n.skb_id = stark.skb_id('syn') order by n.node_id").fetchall()
        encoder = embed.skb_encoder(conn, "syn", None)
    assert sorted(stored) == [r[0] for r in rows]
    assert all(stored[n][0] == h for n, _, h in rows)
    sample = rows[:: max(1, len(rows) // 12)]
    here = embed.encode([r[1] for r in sample], None, role="document", encoder=encoder)
    there = np.stack([stored[r[0]][1] for r in sample])
    assert np.allclose(here, there, atol=1e-4)


def test_index_on_two_nodes_equals_local(ray_cluster, db_url):
    _load(db_url, 120, seed=1)
    cli = cli_runner(db_url)
    done = cli("index", "syn", "--no-lexical", "--no-graph", "--executor", "ray", "--ray-address", ray_cluster.address,
               "--json")
    report = json.loads(done.stdout)["dense"]
    assert report["documents"] == {"embedded": 120, "deleted": 0, "skipped": 0, "total": 120}
    assert report["encoding"]["executor"] == "ray"
    assert (report["encoding"]["workers"], report["encoding"]["cpus_per_worker"], report["encoding"]["nodes"]) == (2, 1, 2)
    _check_complete(db_url, _stored(db_url))
    again = json.loads(cli("index", "syn", "--no-lexical", "--no-graph", "--executor", "ray", "--ray-address",
                           ray_cluster.address, "--json").stdout)["dense"]
    assert again["documents"]["embedded"] == 0 and again["encoding"] is None      # nothing left to do


BUILD = """
import json, sys
from stark_pg.db import connect
from stark_pg.embed.ray_executor import RayOptions
from stark_pg.index.dense import build_dense

with connect(sys.argv[1]) as conn:
    report = build_dense(conn, "syn", multi_vector=False, batch_size=int(sys.argv[3]),
                         ray=RayOptions(address=sys.argv[2], workers=2))
print(json.dumps(report["documents"]))
"""


def _start_build(url: str, address: str, batch_size: int = 16) -> subprocess.Popen:
    """A build in a process of its own (a Ray driver, as `stark-pg index` is), committing every
    `batch_size` documents (the command line commits a few hundred at a time)."""
    return subprocess.Popen([sys.executable, "-c", BUILD, url, address, str(batch_size)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ | {"PYTHONPATH": str(REPO)})


def _written(url: str) -> int:
    return len(_stored(url)) if _has_model(url) else 0


def test_chunks_on_ray_are_the_ones_a_local_build_keeps(ray_cluster, db_url):
    _load(db_url, 100, seed=6)
    cli = cli_runner(db_url)
    report = json.loads(cli("index", "syn", "--no-lexical", "--no-graph", "--chunks", "--executor", "ray",
                            "--ray-address", ray_cluster.address, "--json").stdout)["dense"]
    assert report["chunks"]["embedded"] == report["chunks"]["total"] > 100
    again = json.loads(cli("index", "syn", "--no-lexical", "--no-graph", "--chunks", "--json").stdout)["dense"]
    assert again["documents"]["embedded"] == again["chunks"]["embedded"] == 0      # local finds all up to date
    with connect(db_url) as conn:
        model = find_model(conn)
        rows = conn.execute(f"select c.body, s.vec from stark.{model.chunk_table} s join "
                            "stark.render_chunks(stark.skb_id('syn'), null, true, 25, 512) c "
                            "using (node_id, chunk_no) where s.skb_id = stark.skb_id('syn') "
                            "order by node_id, chunk_no limit 12").fetchall()
        encoder = embed.skb_encoder(conn, "syn", None)
    here = embed.encode([r[0] for r in rows], None, role="document", encoder=encoder)
    assert np.allclose(here, np.stack([r[1].to_numpy() for r in rows]), atol=1e-4)


def test_a_worker_killed_mid_index_loses_and_duplicates_nothing(ray_cluster, db_url):
    nodes = 300
    _load(db_url, nodes, seed=2)
    build = _start_build(db_url, ray_cluster.address)
    killed = None
    try:
        deadline = time.time() + 300
        while build.poll() is None and time.time() < deadline:
            workers = _workers_of(ray_cluster.marker)
            if workers and 32 <= _written(db_url) < nodes - 64:
                killed = workers[0]
                os.kill(killed, signal.SIGKILL)
                break
            time.sleep(0.2)
        out, err = build.communicate(timeout=600)
    finally:
        if build.poll() is None:
            build.kill()
    assert killed is not None, "the build finished before a worker could be killed"
    assert build.returncode == 0, err
    assert killed not in _workers_of(ray_cluster.marker)
    # every batch written once: the killed worker's batches were neither skipped nor written twice
    assert json.loads(out) == {"embedded": nodes, "deleted": 0, "skipped": 0, "total": nodes}
    _check_complete(db_url, _stored(db_url))


def test_a_stopped_build_resumes_where_it_stopped(ray_cluster, db_url):
    nodes = 200
    _load(db_url, nodes, seed=3)
    build = _start_build(db_url, ray_cluster.address)
    try:
        deadline = time.time() + 300
        while build.poll() is None and time.time() < deadline and _written(db_url) == 0:
            time.sleep(0.2)
        assert build.poll() is None, "the build finished before it could be stopped"
        build.kill()
        build.wait()
    finally:
        if build.poll() is None:
            build.kill()
    kept = _written(db_url)
    assert 0 < kept < nodes
    report = json.loads(cli_runner(db_url)("index", "syn", "--no-lexical", "--no-graph", "--executor", "ray",
                                           "--ray-address", ray_cluster.address, "--json").stdout)["dense"]
    assert report["documents"]["embedded"] == nodes - kept
    _check_complete(db_url, _stored(db_url))


def test_eval_sharded_on_ray_stores_what_a_local_run_stores(ray_cluster, db_url):
    from stark_pg.index.dense import build_dense
    from stark_pg.index.lexical import build_lexical

    _load(db_url, 120, seed=5)
    with connect(db_url) as conn:
        build_lexical(conn, "syn")
        build_dense(conn, "syn", multi_vector=False)
    cli = cli_runner(db_url)
    args = ("eval", "syn", "-m", "bm25,vss", "--split", "train", "--json", "-q")
    on_ray = json.loads(cli(*args, "--executor", "ray", "--ray-address", ray_cluster.address).stdout)["methods"]
    local = json.loads(cli(*args).stdout)["methods"]
    with connect(db_url) as conn:
        def rows(run_id):
            return conn.execute("select query_id, ranked_ids, scores, answer_ranks, metrics, error "
                                "from stark.eval_result where run_id = %s order by query_id", (run_id,)).fetchall()

        for method in ("bm25", "vss"):
            assert on_ray[method]["run_id"] != local[method]["run_id"]
            assert on_ray[method]["metrics"] == local[method]["metrics"]
            there, here = rows(on_ray[method]["run_id"]), rows(local[method]["run_id"])
            assert len(there) == len(here) == on_ray[method]["queries"] > 0
            for a, b in zip(there, here):
                assert (a[0], a[1], a[3], a[4], a[5]) == (b[0], b[1], b[3], b[4], b[5])
                assert np.allclose(a[2], b[2])


def test_errors_say_what_to_do(ray_cluster, db_url):
    _load(db_url, 100, seed=4)
    cli = cli_runner(db_url)
    closed = _free_port()
    started = time.perf_counter()
    done = cli("index", "syn", "--no-lexical", "--no-graph", "--executor", "ray", "--ray-address",
               f"127.0.0.1:{closed}", expect=1)
    assert f"--ray-address '127.0.0.1:{closed}': no Ray cluster answers there" in done.stderr
    assert time.perf_counter() - started < 60
    done = cli("index", "syn", "--no-dense", "--ray-address", ray_cluster.address, expect=1)
    assert "--ray-address is for --executor ray" in done.stderr
    done = cli("index", "syn", "--no-lexical", "--no-graph", "--executor", "ray", "--ray-address", ray_cluster.address,
               "--ray-workers", "3", expect=1)
    assert "room for 2 embedding workers of 1 CPU(s) each, not 3" in done.stderr
    # without Ray installed (the import fails as it does where the package is missing)
    script = "import sys; sys.modules['ray'] = None; from stark_pg.cli import main; sys.argv[0] = 'stark-pg'; main()"
    done = subprocess.run([sys.executable, "-c", script, "index", "syn", "--executor", "ray"], capture_output=True,
                          text=True, env=os.environ | {"STARK_PG_DSN": db_url, "COLUMNS": "200"}, timeout=300)
    assert done.returncode == 1
    assert "pip install 'stark-pg[ray]'" in done.stderr


def _has_model(url: str) -> bool:
    with connect(url) as conn:
        return find_model(conn) is not None
