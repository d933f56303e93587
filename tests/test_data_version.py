"""A data directory of another PostgreSQL major version (stark-pg ran PostgreSQL 16 before issue 18)
is refused before anything touches it: one line naming it and what to do, nothing in it changed, no
server started on it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest


def snapshot(root: Path) -> dict:
    """Every path under `root` (itself included) with its mode, owner, size, mtime and content hash."""
    found = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        found[str(path.relative_to(root))] = (info.st_mode, info.st_uid, info.st_size, info.st_mtime_ns, digest)
    return found


@pytest.fixture
def old_home(tmp_path, monkeypatch):
    """STARK_PG_HOME with a fake PostgreSQL 16 data directory (the files a real one starts with)."""
    home = tmp_path / "home"
    pgdata = home / "pgdata"
    (pgdata / "base" / "1").mkdir(parents=True)
    (pgdata / "global").mkdir()
    (pgdata / "PG_VERSION").write_text("16\n")
    (pgdata / "base" / "1" / "PG_VERSION").write_text("16\n")
    (pgdata / "global" / "pg_control").write_bytes(bytes(range(256)) * 32)
    (pgdata / "postgresql.conf").write_text("# a PostgreSQL 16 cluster\n")
    (pgdata / "pg_hba.conf").write_text("local all all trust\n")
    pgdata.chmod(0o700)
    home.chmod(0o700)       # pgserver would loosen the parents of a data directory it starts
    monkeypatch.setenv("STARK_PG_HOME", str(home))
    monkeypatch.delenv("STARK_PG_DSN", raising=False)
    return pgdata


def servers_on(pgdata: Path) -> list[int]:
    return [p.pid for p in psutil.process_iter(["name", "cmdline"])
            if p.info["name"] == "postgres" and str(pgdata) in " ".join(p.info["cmdline"] or [])]


def test_start_refuses_a_postgresql_16_directory_and_leaves_it_untouched(old_home):
    from stark_pg.db import embedded

    before = snapshot(old_home.parent)
    with pytest.raises(embedded.DataDirectoryVersionError) as caught:
        embedded.start()
    message = str(caught.value)
    assert "\n" not in message
    assert f"{old_home} is a PostgreSQL 16 data directory" in message
    assert f"PostgreSQL {embedded.server_major()} cannot open" in message
    assert "left untouched" in message and "docs/postgres.md: Upgrading from PostgreSQL 16" in message
    assert snapshot(old_home.parent) == before
    assert servers_on(old_home) == []
    assert embedded.running_pid() is None and embedded.stop() is False
    assert snapshot(old_home.parent) == before


def test_every_command_says_it_in_one_line(old_home):
    before = snapshot(old_home.parent)
    for args in (["db", "status"], ["info"], ["db", "url"]):
        done = subprocess.run([sys.executable, "-m", "stark_pg", *args], capture_output=True, text=True,
                              env=os.environ | {"COLUMNS": "400"}, timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(old_home) in lines[0], done.stderr
        assert "Traceback" not in done.stderr
    assert snapshot(old_home.parent) == before
    assert servers_on(old_home) == []


def test_a_newer_major_version_is_refused_too(old_home):
    from stark_pg.db import embedded

    (old_home / "PG_VERSION").write_text("99\n")
    with pytest.raises(embedded.DataDirectoryVersionError, match="PostgreSQL 99 data directory.*use the stark-pg version"):
        embedded.start()


def test_the_docs_have_the_recipe_the_message_names():
    from stark_pg.db.embedded import UPGRADE_HELP

    page, heading = UPGRADE_HELP.split(": ", 1)
    text = (Path(__file__).resolve().parents[1] / page).read_text(encoding="utf-8")
    assert f"## {heading}\n" in text
    recipe = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    assert "pgserver==0.1.4" in recipe and "pg_dumpall" in recipe and 'mv "$OLD" "$OLD-16"' in recipe
