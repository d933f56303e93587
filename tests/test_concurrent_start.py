"""Commands started at once on a fresh STARK_PG_HOME all succeed.

The first use of a home creates the cluster, tunes it (a restart) and migrates the schema; commands
started together used to trip over each other there: a half-written pid file parsed into a traceback,
two migrations creating the same type, a connection cut by the restart. embedded.start() holds a lock
file in the home, and the schema's install holds a database advisory lock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def test_eight_commands_at_once_on_a_fresh_home_all_succeed(tmp_path):
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("STARK_PG_DSN",)} | {
        "STARK_PG_HOME": str(home), "STARK_PG_MEMORY_MB": "512"}
    commands = [["load", "synthetic", "--nodes", "100", "--name", "same", "--json"]] * 3 + [["db", "status", "--json"]] * 5
    started = [subprocess.Popen([sys.executable, "-m", "stark_pg", *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for args in commands]
    try:
        finished = [(process.args, *process.communicate(timeout=900), process.returncode) for process in started]
    finally:
        subprocess.run([sys.executable, "-m", "stark_pg", "db", "stop"], env=env, capture_output=True, timeout=300)
    failures = [(args[3:], code, err[-800:]) for args, out, err, code in finished if code != 0]
    assert not failures, failures
    for args, out, _, _ in finished:
        json.loads(out)                     # every command printed its JSON, nothing else
    assert not any("Traceback" in err for _, _, err, _ in finished)
