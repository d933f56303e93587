"""What a new user trips on at the command line (issue 51): `drop` asks first, `--version`, "did you
mean" for methods, splits and SKBs, one-line errors without PL/pgSQL's context, `compare`'s labels and
a quick `--help`. The real CLI, a subprocess, against the test database."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from stark_pg import __version__


def one_line_error(done, *words) -> str:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def skb_names(cli) -> list[str]:
    return [item["name"] for item in json.loads(cli("info", "--json").stdout)]


# --- drop asks first ------------------------------------------------------------------------------

def test_drop_off_a_terminal_needs_yes(cli):
    cli("load", "synthetic", "--nodes", "100", "--name", "kept", "-q")
    line = one_line_error(cli("drop", "kept", expect=None), "drop kept", "not a terminal", "--yes")
    assert skb_names(cli) == ["kept"], line
    assert cli("drop", "kept", "--yes").stdout.strip() == "dropped kept"
    assert skb_names(cli) == []


def answered(db_url: str, answer: str, *args: str) -> tuple[int, str]:
    """`stark-pg ARGS` run with a terminal as stdin, `answer` typed at its question: exit code, stderr."""
    primary, secondary = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "stark_pg", *args], stdin=secondary, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env=os.environ | {"STARK_PG_DSN": db_url, "COLUMNS": "160"})
    os.close(secondary)
    try:
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:   # the question goes to stderr
            if select.select([process.stderr], [], [], 0.5)[0]:
                break
        os.write(primary, answer.encode() + b"\n")
        _, err = process.communicate(timeout=300)
    finally:
        os.close(primary)
    return process.returncode, err


def test_drop_on_a_terminal_asks_and_drops_only_on_yes(cli, db_url):
    cli("load", "synthetic", "--nodes", "100", "--name", "asked", "-q")
    code, err = answered(db_url, "n", "drop", "asked")
    assert code == 1 and "Drop SKB 'asked' with its 100 nodes" in err and "stored evaluation runs" in err, err
    assert "not confirmed, nothing dropped" in err
    assert skb_names(cli) == ["asked"]
    code, err = answered(db_url, "y", "drop", "asked")
    assert code == 0, err
    assert skb_names(cli) == []


# --- --version, a quick --help --------------------------------------------------------------------

def test_version(cli):
    assert cli("--version").stdout.strip() == f"stark-pg {__version__}"


@pytest.mark.parametrize("args", [["--help"], ["search", "--help"], ["eval", "--help"], ["--version"]])
def test_help_loads_nothing_heavy(args):
    """--help is quick because it imports no database driver, numerical or model library: they load in
    the commands that use them (a failing command used to import them to see whether its error was one
    of the expected ones, which --help's exit went through too)."""
    probe = ("import sys; sys.argv = ['stark-pg', *sys.argv[1:]]\n"
             "from stark_pg.cli import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "heavy = ('numpy', 'psycopg', 'torch', 'sentence_transformers', 'pandas', 'lightgbm', 'openai')\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and done.stderr.strip().splitlines()[-1] == "[]", done.stderr


# --- did you mean; one-line errors ----------------------------------------------------------------

@pytest.fixture
def lexical_only(cli):
    """A synthetic SKB `synth-ux` with BM25 and no vectors."""
    cli("load", "synthetic", "--nodes", "100", "--name", "synth-ux", "-q")
    cli("index", "synth-ux", "--no-dense", "--no-graph", "-q")
    return json.loads(cli("info", "synth-ux", "--json").stdout)


def test_a_mistyped_skb_method_or_split_is_answered_with_the_closest(lexical_only, cli):
    one_line_error(cli("search", "synth-xu", "fever", "-m", "bm25", expect=None),
                   "no SKB named 'synth-xu'", "did you mean 'synth-ux'?", "known: synth-ux")
    one_line_error(cli("search", "synth-ux", "fever", "-m", "bm26", expect=None),
                   "unknown method 'bm26'", "did you mean 'bm25'?", "known: bm25, vss")
    one_line_error(cli("eval", "synth-ux", "-m", "hybird", expect=None), "did you mean 'hybrid'?")
    splits = lexical_only["queries_by_split"]
    listed = ", ".join(f"{s} {n:,}" for s, n in sorted(splits.items()))
    line = one_line_error(cli("eval", "synth-ux", "-m", "bm25", "--split", "tset", "-q", expect=None),
                          "no queries in split:tset of synth-ux", f"its splits: {listed}")
    assert "did you mean 'test'?" in line
    line = one_line_error(cli("eval", "synth-ux", "-m", "bm25", "--split", "zzzz", "-q", expect=None),
                          f"its splits: {listed}")
    assert "did you mean" not in line                      # nothing close: only the list


@pytest.mark.parametrize("method", ["vss", "hybrid"])
def test_not_indexed_is_one_line_without_plpgsql_context(lexical_only, cli, method):
    line = one_line_error(cli("search", "synth-ux", "fever", "-m", method, expect=None), "stark-pg index synth-ux")
    assert "CONTEXT" not in line and "PL/pgSQL" not in line and "line " not in line, line


# --- compare's labels ------------------------------------------------------------------------------

def test_compare_labels_stored_runs_by_method_and_settings(lexical_only, cli, db_url, tmp_path):
    def run(*options: str, out: str) -> int:
        done = json.loads(cli("eval", "synth-ux", "-m", "bm25", *options, "--split", "test", "--out",
                              tmp_path / out, "-q", "--json").stdout)
        return done["methods"]["bm25"]["run_id"]

    default, changed = run(out="report/a"), run("-o", "k1=0.9", "-o", "b=0.5", out="report/b")
    result = json.loads(cli("compare", str(default), str(changed), "--json").stdout)
    assert [r["label"] for r in result["runs"]] == [f"bm25#{default}", f"bm25#{changed} k1=0.9 b=0.5"]
    text = cli("compare", str(default), str(changed)).stdout
    assert f"bm25#{changed} k1=0.9 b=0.5" in text
    # TREC files of one name in two folders are labelled by their paths, whole, even on a narrow terminal
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("report/*/bm25/run_test.trec"))
    assert len(files) == 2
    done = subprocess.run([sys.executable, "-m", "stark_pg", "compare", *files, "--qrels", "report/a/qrels_test.txt"],
                          capture_output=True, text=True, cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=300,
                          env=os.environ | {"COLUMNS": "80", "STARK_PG_DSN": db_url,
                                            "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    first_cells = "".join(line.split("│")[1].strip() for line in done.stdout.splitlines() if line.startswith("│"))
    assert all(f in first_cells for f in files), done.stdout       # wrapped over lines, but whole


# --- the README tour and the figures of the docs ------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(relative: str) -> str:
    with open(os.path.join(ROOT, relative), encoding="utf-8") as f:
        return f.read()


def test_the_readme_tour_starts_by_putting_stark_pg_on_the_path():
    """Command 1 installs into .venv; the tour calls bare `stark-pg`, so it activates the venv first."""
    tour = read("README.md").split("## A short tour", 1)[1]
    first_block = tour.split("```bash\n", 1)[1].split("```", 1)[0]
    assert first_block.splitlines()[0].startswith(". .venv/bin/activate")
    assert ".venv/bin/stark-pg" in tour.split("```bash", 1)[0]


def test_the_bm25_row_of_the_mfar_page_is_the_recorded_one():
    import yaml

    recorded = next(r for r in yaml.safe_load(read("results/stark-prime-ibd.yaml"))["results"] if r["id"] == "bm25")
    m = recorded["metrics"]
    row = f"| bm25 | | {m['hit@1']:.3f} | {m['hit@5']:.3f} | {m['recall@20']:.3f} | {m['mrr']:.3f} | |"
    assert row in read("docs/mfar.md").splitlines()


# --- chunks only when asked; index --dry-run ------------------------------------------------------

def test_index_embeds_chunks_only_when_asked_and_dry_run_says_what_it_would_do(lexical_only, cli, conn):
    def vectors() -> list[tuple]:
        return conn.execute("select model_id, documents, chunks from stark.embedding_build").fetchall()

    nodes = lexical_only["nodes"]
    plan = json.loads(cli("index", "synth-ux", "--dry-run", "--json").stdout)
    assert plan["documents"] == {"total": nodes, "to_embed": nodes} and plan["multi_vector"] is False
    assert plan["chunks"]["total"] == plan["chunks"]["to_embed"] > nodes
    assert plan["estimate"]["documents_seconds"] > 0 and plan["estimate"]["chunks_seconds"] > 0
    text = cli("index", "synth-ux", "--dry-run").stdout
    assert f"documents: {nodes:,}, {nodes:,} to embed, about " in text
    assert f"chunks: {plan['chunks']['total']:,}, {plan['chunks']['to_embed']:,} to embed" in text
    assert "not embedded unless --chunks" in text
    assert vectors() == []                                   # a dry run writes nothing

    built = json.loads(cli("index", "synth-ux", "--no-lexical", "--no-graph", "-q", "--json").stdout)["dense"]
    assert built["documents"]["embedded"] == nodes and built["chunks"]["total"] == 0
    shown = cli("index", "synth-ux", "--no-lexical", "--no-graph", "-q").stdout
    assert "multivss and mfar's field scorers need `stark-pg index synth-ux --chunks`" in " ".join(shown.split())
    one_line_error(cli("search", "synth-ux", "fever", "-m", "multivss", expect=None),
                   "no chunk vectors", "run `stark-pg index synth-ux --chunks`")

    plan = json.loads(cli("index", "synth-ux", "--chunks", "--dry-run", "--json").stdout)
    assert plan["documents"]["to_embed"] == 0 and plan["multi_vector"] is True
    with_chunks = json.loads(cli("index", "synth-ux", "--chunks", "--no-lexical", "--no-graph", "-q",
                                 "--json").stdout)["dense"]
    assert with_chunks["chunks"]["embedded"] == plan["chunks"]["to_embed"] > 0
    again = json.loads(cli("index", "synth-ux", "--dry-run", "--json").stdout)    # as the last build: chunks
    assert again["multi_vector"] is True and again["chunks"]["to_embed"] == again["documents"]["to_embed"] == 0
    assert len(json.loads(cli("search", "synth-ux", "fever", "-m", "multivss", "--json").stdout)["results"]) == 10
