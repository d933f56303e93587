"""STaRK processed files through `stark-pg load` into PostgreSQL, end to end (fixtures in STaRK's format)."""

from __future__ import annotations

import json

import pytest

from stark_fixtures import write_processed


@pytest.mark.parametrize("dataset", ["prime", "mag", "amazon"])
def test_processed_files_load_with_their_types_and_relations(cli, tmp_path, dataset):
    directory = write_processed(tmp_path / dataset, dataset)
    summary = json.loads(cli("load", directory, "--name", f"tiny-{dataset}", "--json").stdout)
    assert summary["nodes"] > 0 and summary["edges"] > 0
    info = json.loads(cli("info", f"tiny-{dataset}", "--json").stdout)
    assert info["format"] == "stark-processed"
    assert info["nodes"] == summary["nodes"] and info["edges"] == summary["edges"]
    assert info["fields"], "node text became fields"
