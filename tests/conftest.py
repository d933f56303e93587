"""Test databases on a real PostgreSQL with pgvector: the embedded server pgserver starts.

One server per test session (in its own STARK_PG_HOME, so a developer's data is never touched);
a template database migrated once; every test that asks for `db_url` gets a fresh database cloned
from it by pytest-postgresql's DatabaseJanitor. Set STARK_PG_TEST_DSN to run against another server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pytest_postgresql.janitor import DatabaseJanitor

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
IBD = SHARED_DATA / "stark-prime-ibd"
STARK_QA = SHARED_DATA / "stark-qa"


def _server_params(url: str) -> dict:
    params = conninfo_to_dict(url)
    return {"host": params.get("host"), "port": int(params.get("port") or 5432), "user": params.get("user") or "postgres",
            "password": params.get("password") or None}


@pytest.fixture(scope="session")
def server_url(tmp_path_factory) -> str:
    """The maintenance URL of the server the tests use."""
    external = os.environ.get("STARK_PG_TEST_DSN")
    if external:
        yield external
        return
    home = Path(os.environ.get("STARK_PG_TEST_HOME") or tmp_path_factory.mktemp("stark-pg-home"))
    os.environ["STARK_PG_HOME"] = str(home)
    os.environ.pop("STARK_PG_DSN", None)
    # test clusters are throwaway and several may run at once (and beside a developer's): a small budget
    os.environ.setdefault("STARK_PG_MEMORY_MB", "1024")
    from stark_pg.db import embedded

    yield embedded.start().uri
    if not os.environ.get("STARK_PG_TEST_HOME"):
        embedded.stop()


@pytest.fixture(scope="session")
def template_db(server_url) -> str:
    """A database migrated to the newest schema, marked as a template to clone per test."""
    name = f"stark_tpl_{uuid.uuid4().hex[:8]}"
    janitor = DatabaseJanitor(dbname=name, as_template=True, **_server_params(server_url))
    janitor.init()
    from stark_pg.db.migrate import upgrade

    url = make_conninfo(server_url, dbname=name)
    upgrade(url)
    # a template must have no open connections when cloned
    yield name
    janitor.drop()


@pytest.fixture
def db_url(server_url, template_db) -> str:
    """A fresh database with the stark-pg schema, dropped after the test."""
    name = f"stark_test_{uuid.uuid4().hex[:10]}"
    janitor = DatabaseJanitor(dbname=name, template_dbname=template_db, **_server_params(server_url))
    janitor.init()
    yield make_conninfo(server_url, dbname=name)
    janitor.drop()


@pytest.fixture
def conn(db_url):
    from stark_pg.db import connect

    with connect(db_url) as connection:
        yield connection


def cli_runner(url: str):
    """A function running the real `stark-pg` command (a subprocess) against the database `url`."""

    def run(*args: str, expect: int | None = 0) -> subprocess.CompletedProcess:
        env = os.environ | {"STARK_PG_DSN": url, "COLUMNS": "160"}
        done = subprocess.run([sys.executable, "-m", "stark_pg", *map(str, args)], capture_output=True, text=True,
                              env=env, timeout=600, stdin=subprocess.DEVNULL)     # as a script runs it: no terminal
        if expect is not None:
            assert done.returncode == expect, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        return done

    return run


@pytest.fixture
def cli(db_url):
    """Run the real `stark-pg` command (a subprocess) against the test database."""
    return cli_runner(db_url)


@contextmanager
def cloned_database(server_url: str, template: str, prefix: str):
    """A new database cloned from `template` (the migrated template, or a prepared database no one is
    connected to), dropped afterwards: for module-scoped fixtures that load and index once."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    janitor = DatabaseJanitor(dbname=name, template_dbname=template, **_server_params(server_url))
    janitor.init()
    try:
        yield make_conninfo(server_url, dbname=name)
    finally:
        janitor.drop()


@contextmanager
def indexed_synthetic(server_url: str, template: str, prefix: str, skb: str, seed: int, nodes: int = 800,
                      edges_per_node: int = 10, backend: str | None = None):
    """A cloned database holding a small synthetic Prime-shaped SKB with BM25 and document vectors
    (800 nodes, 10 edges each unless told; `backend` the embedding backend, None: the default): what the
    end-to-end method tests share."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.index.dense import build_dense
    from stark_pg.index.lexical import build_lexical
    from stark_pg.skb.store import load_skb

    with cloned_database(server_url, template, prefix) as url:
        with connect(url) as conn:
            load_skb(conn, SyntheticSource(nodes=nodes, seed=seed, edges_per_node=edges_per_node), skb)
            build_lexical(conn, skb)
            build_dense(conn, skb, multi_vector=False, backend=backend)
        yield url


def field_scores(conn, query: str, fields: list[str], engine: str | None, pool: int = 100, include=None,
                 function: str = "stark.mfar_field_scores",
                 skb: str = "stark-prime-ibd") -> dict[tuple[int, str], float]:
    """mFAR's lexical scores of a query's candidates, {(node, field): score}: `engine` None takes the
    function's default; `function` another version of it (a temporary copy of an earlier text)."""
    engine_arg = ", %s" if engine is not None else ""
    rows = conn.execute(f"select node_id, field, scorer, score from {function}(%s, %s, null::vector, "
                        f"'all-MiniLM-L6-v2', %s::text[], '{{}}'::text[], %s, %s::bigint[], 1.2, 0.75{engine_arg})",
                        [skb, query, fields, pool, include] + ([engine] if engine is not None else [])).fetchall()
    assert all(r[2] == "lexical" for r in rows)
    return {(int(n), f): float(s) for n, f, _, s in rows}


def count_rows(url: str, table: str) -> int:
    with psycopg.connect(url) as c:
        return c.execute(f"select count(*) from stark.{table}").fetchone()[0]


@pytest.fixture(scope="session")
def ibd_indexed_url(server_url, template_db, tmp_path_factory) -> str:
    """One database for the whole session with the real slice loaded, indexed (BM25 and document
    embeddings) and evaluated on val with bm25 and hybrid: for tests that only read it."""
    if not IBD.is_dir():
        pytest.skip("../shared/data/stark-prime-ibd is not here")
    name = f"stark_ibd_{uuid.uuid4().hex[:8]}"
    janitor = DatabaseJanitor(dbname=name, template_dbname=template_db, **_server_params(server_url))
    janitor.init()
    url = make_conninfo(server_url, dbname=name)
    from loaders.bundle import BundleSource
    from stark_pg.db import connect
    from stark_pg.eval import query_sets
    from stark_pg.eval.runner import run_method
    from stark_pg.index.dense import build_dense
    from stark_pg.index.lexical import build_lexical
    from stark_pg.retrieve import get_method
    from stark_pg.skb.store import load_skb

    with connect(url) as conn:
        skb_id = load_skb(conn, BundleSource(IBD)).skb_id
        build_lexical(conn, "stark-prime-ibd")
        build_dense(conn, "stark-prime-ibd", multi_vector=False)
        val = query_sets.from_split(conn, skb_id, "val")
        for method in ("bm25", "vss", "hybrid"):
            run_method(conn, skb_id, "stark-prime-ibd", method, get_method(method).Options(), val, resolve=get_method)
    yield url
    janitor.drop()
