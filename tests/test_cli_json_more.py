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
