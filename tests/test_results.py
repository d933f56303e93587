"""Recorded results (results/*.yaml): the docs' tables are what the files render, a malformed file is one
error naming file and line, and `stark-pg reproduce` re-runs a row for real and flags a wrong figure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer.main

from stark_pg import results
from stark_pg.cli import app

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "results").glob("*.yaml"))


def test_there_are_results_files_and_marked_tables():
    assert FILES, "no results/*.yaml"
    for page, table in [("README.md", "methods"), ("docs/kar.md", "expansion"), ("docs/fusion.md", "fusion"),
                        ("docs/evaluation.md", "recorded"), ("docs/search.md", "search"),
                        ("docs/llm.md", "llm"), ("docs/dense-retriever.md", "dense"),
                        ("docs/4stepfocus.md", "focus"), ("docs/agent.md", "agent"), ("docs/mfar.md", "mfar"),
                        ("docs/qagnn.md", "qagnn"), ("docs/synthesize.md", "synthesized")]:
        assert f"\n<!-- results stark-prime-ibd {table}:" in (ROOT / page).read_text(encoding="utf-8"), (page, table)


QUOTED_TABLES = ("epoch", "first stage", "masked", "variant")
"""First column headers of the tables that quote another command's output (training histories, the masking
table, the fusion ablation), which stay typed under their command."""


def test_every_table_of_eval_figures_is_rendered_from_a_results_file():
    typed = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:   # docs/history/ is history
        inside = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            inside = (inside or line.startswith("<!-- results ")) and not line.startswith("<!-- end results")
            header = [cell.strip() for cell in line.strip("|").split("|")]
            if (not inside and line.startswith("|") and any(c in ("Hit@1", "MRR") or c.startswith(("val Hit@1", "val MRR"))
                                                             for c in header)
                    and header[0] not in QUOTED_TABLES):
                typed.append(f"{page.relative_to(ROOT)}:{number}")
    assert not typed, f"tables of figures typed by hand (put them in results/*.yaml): {typed}"


def test_the_checked_in_tables_are_what_the_results_files_render():
    stale = results.stale_pages(ROOT)
    assert not stale, ("tables differ from results/*.yaml in " + ", ".join(str(p.relative_to(ROOT)) for p in stale)
                       + ": edit the results file, then run `python -m stark_pg.results --write`")


def test_a_changed_figure_makes_the_page_stale(tmp_path):
    """The check can fail: one figure changed in the file, and the README no longer matches."""
    shutil.copytree(ROOT / "results", tmp_path / "results")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "docs").mkdir()
    path = tmp_path / "results" / "stark-prime-ibd.yaml"
    text = path.read_text(encoding="utf-8")
    assert "{hit@1: 0.263, hit@5: 0.427" in text
    path.write_text(text.replace("{hit@1: 0.263, hit@5: 0.427", "{hit@1: 0.270, hit@5: 0.427"), encoding="utf-8")
    assert results.stale_pages(tmp_path) == [tmp_path / "README.md"]
    fixed = results.regenerate((tmp_path / "README.md").read_text(encoding="utf-8"), results_dir=tmp_path / "results")
    assert "| `bm25` | Okapi BM25 through pg_textsearch's index, or exact in SQL | | 0.270 | 0.340 |" in fixed


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_recorded_command_parses_with_the_real_cli(path):
    command = typer.main.get_command(app).commands["eval"]
    for row in results.load(path).rows:
        params = command.make_context("stark-pg eval", row.args()[1:]).params
        assert params["split"] == row.split
        assert len(params["method"].split(",")) == 1, f"{row.id}: one method a row"


GOOD = """skb: tiny
tables:
  t:
    columns:
      - {title: method, text: label}
      - {title: MRR, metric: mrr}
results:
  - id: bm25
    command: stark-pg eval tiny -m bm25 --split val --json
    split: val
    kind: exact
    date: 2026-11-28
    version: 0.1.0
    metrics: {hit@1: 0.5, mrr: 0.6}
    shown:
      t: {label: "`bm25`"}
"""


@pytest.mark.parametrize("old,new,line,message", [
    ("metrics: {hit@1: 0.5, mrr: 0.6}", "metrics: {hit@1: 0.5, mrr: 1.6}", 14, "metric mrr must be a number from 0 to 1"),
    ("metrics: {hit@1: 0.5, mrr: 0.6}", "metrics: {hit@1: 0.5, mrr: high}", 14, "metric mrr must be a number"),
    ("date: 2026-11-28", "date: 28.11.2026", 8, "is not YYYY-MM-DD"),
    ("kind: exact", "kind: guess", 8, "kind 'guess' is not one of exact, trained, llm"),
    ("    version: 0.1.0\n", "", 8, "missing version"),
    ("    version: 0.1.0\n", "    version: 0.1.0\n    figure: 3\n", 8, "unknown keys ['figure']"),
    ("-m bm25 --split val", "-m bm25 --split train", 8, "split 'val' differs from the command's --split train"),
    ("command: stark-pg eval tiny", "command: stark-pg eval other", 8, "command must be `stark-pg eval tiny ...`"),
    ("t: {label:", "u: {label:", 16, "shown in table 'u', which 'tables' does not define"),
    ("metrics: {hit@1: 0.5, mrr: 0.6}", "metrics: {hit@1: 0.5, mrr: [0.6}", 14, "not valid YAML"),
    ("skb: tiny", "skb: tinier", 1, "differs from the file's name"),
    ("{title: MRR, metric: mrr}", "{title: MRR, metric: mrr, row: \"{id}-train\"}", 6, "row 'bm25' needs a row 'bm25-train'"),
])
def test_a_malformed_results_file_is_one_error_naming_file_and_line(tmp_path, old, new, line, message):
    assert old in GOOD
    path = tmp_path / "tiny.yaml"
    path.write_text(GOOD.replace(old, new), encoding="utf-8")
    with pytest.raises(results.ResultsError) as caught:
        results.load(path)
    text = str(caught.value)
    assert text.startswith(f"{path}:{line}: ") and message in text and "\n" not in text, text


def test_the_good_example_loads_and_renders(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(GOOD, encoding="utf-8")
    loaded = results.load(path)
    assert [r.id for r in loaded.rows] == ["bm25"] and loaded.rows[0].line == 8
    assert results.render_table(loaded, "t") == "| method | MRR |\n| --- | --- |\n| `bm25` | 0.600 |\n"


# -- stark-pg reproduce, for real: a small synthetic SKB, BM25, a results file written here --------------

SKB = "tiny-reproduce"


@pytest.fixture
def tiny_db(db_url):
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.index.lexical import build_lexical
    from stark_pg.skb.store import load_skb

    with connect(db_url) as conn:
        load_skb(conn, SyntheticSource(nodes=300, seed=4, edges_per_node=6), SKB)
        build_lexical(conn, SKB)
    return db_url


def _record(path: Path, hit1: float, mrr: float, kind: str = "exact") -> None:
    path.write_text(f"""skb: {SKB}
results:
  - id: bm25
    command: stark-pg eval {SKB} -m bm25 --split val --limit 20 --json
    split: val
    kind: {kind}
    date: 2026-11-28
    version: 0.1.0
    metrics: {{hit@1: {hit1}, mrr: {mrr}}}
    latency_ms: {{p50: 1.0}}
""", encoding="utf-8")


def test_reproduce_matches_a_true_record_and_flags_a_wrong_one(tiny_db, cli, tmp_path):
    measured = json.loads(cli("eval", SKB, "-m", "bm25", "--split", "val", "--limit", "20", "--json").stdout)
    figures = measured["methods"]["bm25"]["metrics"]
    hit1, mrr = round(figures["hit@1"], 3), round(figures["mrr"], 3)
    path = tmp_path / f"{SKB}.yaml"

    _record(path, hit1, mrr)
    dry = cli("reproduce", SKB, "--file", path, "--dry-run")
    assert f"bm25 (exact): stark-pg eval {SKB} -m bm25" in dry.stdout
    done = cli("reproduce", SKB, "bm25", "--file", path, "--json")
    report = json.loads(done.stdout)
    assert report["flagged"] == 0 and report["tolerance"] == 0.001
    row = report["rows"][0]
    assert row["metrics"]["mrr"]["measured"] == pytest.approx(figures["mrr"])
    assert row["metrics"]["mrr"]["difference"] == 0 and row["run_id"] != measured["methods"]["bm25"]["run_id"]
    assert row["latency_ms"]["p50"]["recorded"] == 1.0

    _record(path, hit1, round(mrr + 0.05, 3))                 # a wrong MRR: flagged, exit 1
    wrong = cli("reproduce", SKB, "--file", path, "--json", expect=1)
    report = json.loads(wrong.stdout)
    assert report["flagged"] == 1 and report["rows"][0]["flagged"] == ["mrr"]
    assert report["rows"][0]["metrics"]["mrr"]["difference"] == pytest.approx(-0.05)
    assert "differ from the record by more than 0.001" in wrong.stderr and "bm25 mrr" in wrong.stderr
    table = cli("reproduce", SKB, "--file", path, expect=1)
    assert "DIFFERS" in table.stdout
    assert cli("reproduce", SKB, "--file", path, "--tolerance", "0.1").returncode == 0

    _record(path, hit1, round(mrr + 0.05, 3), kind="llm")    # an LLM row: shown, not flagged
    info = json.loads(cli("reproduce", SKB, "--file", path, "--json").stdout)
    assert info["flagged"] == 0 and info["rows"][0]["metrics"]["mrr"]["beyond_tolerance"]


def test_reproduce_errors_are_one_line(tiny_db, cli, tmp_path):
    path = tmp_path / f"{SKB}.yaml"
    _record(path, 0.5, 1.5)
    bad = cli("reproduce", SKB, "--file", path, expect=1)
    assert bad.stderr.count("\n") == 1 and f"{path}:9:" in bad.stderr and "metric mrr" in bad.stderr
    _record(path, 0.5, 0.5)
    missing = cli("reproduce", SKB, "vss", "--file", path, expect=1)
    assert "no row 'vss'" in missing.stderr


def test_reproduce_reports_a_row_that_cannot_run_and_goes_on(tiny_db, cli, tmp_path):
    """No vectors on this SKB: the vss row is not run, with the reason; the bm25 row still is."""
    measured = json.loads(cli("eval", SKB, "-m", "bm25", "--split", "val", "--limit", "20", "--json").stdout)
    figures = measured["methods"]["bm25"]["metrics"]
    path = tmp_path / f"{SKB}.yaml"
    _record(path, round(figures["hit@1"], 3), round(figures["mrr"], 3))
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("results:\n", f"""results:
  - id: vss
    command: stark-pg eval {SKB} -m vss --split val --limit 20 --json
    split: val
    kind: exact
    date: 2026-11-28
    version: 0.1.0
    metrics: {{hit@1: 0.5}}

  - id: vss-missing-model
    command: stark-pg eval {SKB} -m vss -o model=no-such-model --split val --limit 3 --json
    split: val
    kind: trained
    date: 2026-11-29
    version: 0.1.0
    metrics: {{hit@1: 0.5}}
"""), encoding="utf-8")
    done = cli("reproduce", SKB, "--file", path, "--json", expect=1)
    report = json.loads(done.stdout)
    assert [r["id"] for r in report["rows"]] == ["bm25"] and report["flagged"] == 0
    assert [r["id"] for r in report["not_run"]] == ["vss", "vss-missing-model"]
    assert "stark-pg index" in report["not_run"][0]["error"]
    # a model that is not on this machine fails every query: not a measured 0.000, a row that could not run
    assert ("every one of its 3 queries failed" in report["not_run"][1]["error"]
            and "no-such-model" in report["not_run"][1]["error"])
    assert "2 row(s) could not run: vss, vss-missing-model" in done.stderr


IBD = ROOT.parent / "shared" / "data" / "stark-prime-ibd"


@pytest.mark.slow
def test_reproduce_confirms_the_recorded_bm25_rows_on_the_real_slice(db_url, cli):
    """The figures of results/stark-prime-ibd.yaml are real: BM25's rows on val and train, re-run on the
    slice loaded and indexed (BM25 only) as `stark-pg index` does, match to the default tolerance."""
    if not IBD.is_dir():
        pytest.skip("../shared/data/stark-prime-ibd is not here")
    from loaders.bundle import BundleSource
    from stark_pg.db import connect
    from stark_pg.index.lexical import build_lexical
    from stark_pg.skb.store import load_skb

    with connect(db_url) as conn:
        load_skb(conn, BundleSource(IBD))
        build_lexical(conn, "stark-prime-ibd")
    done = cli("reproduce", "stark-prime-ibd", "bm25", "bm25-train", "--file", ROOT / "results" / "stark-prime-ibd.yaml",
               "--json", expect=None)
    report = json.loads(done.stdout)
    assert [r["id"] for r in report["rows"]] == ["bm25", "bm25-train"]
    assert report["flagged"] == 0 and done.returncode == 0, done.stdout
    assert report["rows"][0]["queries"] == 171 and report["rows"][1]["queries"] == 435
