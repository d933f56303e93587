"""`--json` on the commands that lacked it: `drop` and `db upgrade` (the real CLI, a subprocess)."""

from __future__ import annotations

import json


def test_drop_json(cli):
    cli("load", "synthetic", "--nodes", "100", "--name", "gone", "-q")
    assert json.loads(cli("drop", "gone", "--json", "--yes").stdout) == {"dropped": "gone"}
    assert json.loads(cli("info", "--json").stdout) == []
    done = cli("drop", "gone", "--json", "--yes", expect=1)
    assert "gone" in done.stderr and not done.stdout


def test_db_upgrade_json(cli):
    report = json.loads(cli("db", "upgrade", "--json").stdout)
    assert report["before"] == report["after"] and report["upgraded"] is False
    status = json.loads(cli("db", "status", "--json").stdout)
    assert report["after"] == status["head_revision"]


def test_db_status_shows_the_embedding_endpoint_never_its_key(cli, monkeypatch):
    status = json.loads(cli("db", "status", "--json").stdout)
    assert status["embedding_endpoint"] is None
    assert "none set (stark-pg db embedding-endpoint URL)" in cli("db", "status").stdout
    monkeypatch.setenv("STARK_PG_TEST_EMBED_KEY", "sk-never-shown-4711")
    cli("db", "embedding-endpoint", "http://127.0.0.1:9/v1", "--timeout", "2.5", "--api-key-env",
        "STARK_PG_TEST_EMBED_KEY")
    done = cli("db", "status", "--json")
    endpoint = json.loads(done.stdout)["embedding_endpoint"]
    assert {k: endpoint[k] for k in ("url", "timeout_s", "api_key")} == {
        "url": "http://127.0.0.1:9", "timeout_s": 2.5, "api_key": True}
    text = cli("db", "status").stdout
    assert "http://127.0.0.1:9/v1/embeddings, timeout 2.5 s, with API key" in text
    assert "sk-never-shown-4711" not in done.stdout + text
