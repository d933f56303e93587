"""The embedded server's resource profile: one memory budget split by fixed rules, sized to the machine
or set by STARK_PG_MEMORY_MB, applied to a new cluster and shown by `stark-pg db status`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stark_pg.db.profile import ProfileError, budget_mb, settings

GB = 1024


def test_the_default_budget_is_a_quarter_of_the_machine_within_bounds():
    assert budget_mb(24 * GB) == 6 * GB
    assert budget_mb(1 * GB) == 512                  # at least 512 MB
    assert budget_mb(256 * GB) == 16 * GB            # at most 16 GB unless asked
    assert budget_mb(24 * GB, "2048") == 2048
    assert budget_mb(256 * GB, "65536") == 65536     # a dedicated server may take more
    for bad in ("lots", "1.5", "100", str(300 * GB)):
        with pytest.raises(ProfileError, match="STARK_PG_MEMORY_MB"):
            budget_mb(24 * GB, bad)


def test_the_budget_is_split_by_fixed_rules():
    profile = settings(24 * GB, 2, 6 * GB)
    assert profile == {"shared_buffers": "3072MB", "maintenance_work_mem": "1536MB", "work_mem": "64MB",
                       "effective_cache_size": "13824MB", "max_parallel_maintenance_workers": "1"}
    small = settings(24 * GB, 1, 512)
    assert small["shared_buffers"] == "256MB" and small["work_mem"] == "8MB"
    assert small["max_parallel_maintenance_workers"] == "0"
    assert settings(512 * GB, 64, 64 * GB)["maintenance_work_mem"] == "2048MB"   # capped
    assert settings(512 * GB, 64, 64 * GB)["max_parallel_maintenance_workers"] == "4"


def run(home, *args, **env):
    return subprocess.run([sys.executable, "-m", "stark_pg", *args], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"STARK_PG_HOME": str(home), "COLUMNS": "400"} | env)


def test_a_new_cluster_gets_the_profile_of_its_budget(tmp_path):
    home = tmp_path / "home"
    done = run(home, "db", "status", "--json", STARK_PG_MEMORY_MB="1024")
    try:
        assert done.returncode == 0, done.stderr
        memory = json.loads(done.stdout)["memory"]
        assert memory["shared_buffers"] == "512MB" and memory["maintenance_work_mem"] == "256MB"
        assert memory["work_mem"] == "16MB"
    finally:
        run(home, "db", "stop")


def test_a_bad_budget_is_one_line_and_creates_nothing(tmp_path):
    home = tmp_path / "home"
    done = run(home, "db", "status", STARK_PG_MEMORY_MB="a lot")
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "STARK_PG_MEMORY_MB='a lot'" in lines[0], done.stderr
    assert not (home / "pgdata" / "PG_VERSION").exists()
