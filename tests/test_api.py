"""The Python API (stark_pg.api) against a real database: the same rankings as `stark-pg search`, the
same figures as the eval runner, the same clear errors; and the README's Python examples run as written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import stark_pg
from conftest import cli_runner, cloned_database

README = Path(__file__).resolve().parents[1] / "README.md"
SKB = "synthetic-1000"        # README command 1's SKB, built as it builds it


@pytest.fixture(scope="module")
def api_url(server_url, template_db):
    """What README command 1 makes: `load synthetic --nodes 1000`, `index --relation-fields` (chunks
    are not built by default), `train mfar --variant lexical`."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.index.dense import build_dense
    from stark_pg.index.lexical import build_lexical, relation_scopes
    from stark_pg.skb.store import load_skb
    from stark_pg.train.mfar import TrainSettings, train_mfar

    with cloned_database(server_url, template_db, "stark_api") as url:
        with connect(url) as conn:
            load_skb(conn, SyntheticSource(nodes=1000), SKB)
            build_lexical(conn, SKB, extra_scopes=relation_scopes(conn, SKB))
            build_dense(conn, SKB, multi_vector=False)
            train_mfar(conn, SKB, TrainSettings(variant="lexical"))
        yield url


@pytest.fixture
def db(api_url):
    with stark_pg.connect(api_url) as database:
        yield database


@pytest.fixture(scope="module")
def val_queries(api_url):
    with stark_pg.connect(api_url) as database:
        rows = database.conn.execute("select q.body from stark.query q join stark.skb s using (skb_id) "
                                     "where s.name = %s and q.split = 'val' order by q.query_id limit 3",
                                     (SKB,)).fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("method, settings", [
    ("bm25", {}), ("bm25", {"k1": 0.9, "b": 0.4}), ("vss", {}), ("vss", {"exact": True}), ("hybrid", {}),
    ("hybrid", {"fusion": "weighted", "weight": 0.6}),
])
def test_search_ranks_as_the_cli_does(db, api_url, val_queries, method, settings):
    query = val_queries[0]
    hits = db.skb(SKB).search(query, method=method, k=10, **settings)
    options = [a for key, value in settings.items() for a in ("-o", f"{key}={str(value).lower()}")]
    done = cli_runner(api_url)("search", SKB, query, "-m", method, "-k", "10", "--json", *options)
    expected = json.loads(done.stdout)["results"]
    assert len(hits) == 10
    assert [h.to_dict() | {"score": round(h.score, 6)} for h in hits] == \
           [r | {"score": round(r["score"], 6)} for r in expected]
    assert [h.rank for h in hits] == list(range(1, 11)) and hits.node_ids == [r["node_id"] for r in expected]
    assert hits.trace.get("method", method) == method


def test_search_ranks_as_the_method_and_its_sql_do(db, val_queries):
    from stark_pg.retrieve import get_method

    module = get_method("bm25")
    for query in val_queries:
        ranking = module.search(db.conn, SKB, query, 20, module.Options())
        assert db.skb(SKB).search(query, method="bm25", k=20).node_ids == ranking.node_ids
        sql = db.conn.execute("select node_id from stark.bm25(%s, %s, 20)", (SKB, query)).fetchall()
        assert ranking.node_ids == [r[0] for r in sql]


def test_evaluate_gives_the_runners_figures(db):
    from stark_pg.eval import query_sets
    from stark_pg.eval.runner import run_method
    from stark_pg.retrieve import get_method
    from stark_pg.skb.catalog import require_skb

    result = db.skb(SKB).evaluate(["bm25", "hybrid"], split="val", limit=6)
    skb_id = require_skb(db.conn, SKB)
    chosen = query_sets.from_split(db.conn, skb_id, "val")
    chosen.queries, chosen.label = chosen.queries[:6], chosen.label + "[:6]"
    for method in ("bm25", "hybrid"):
        direct = run_method(db.conn, skb_id, SKB, method, get_method(method).Options(), chosen, resolve=get_method)
        assert result.summary[method] == direct.summary["metrics"]
    assert result.query_set == "split:val[:6]"
    import pandas

    assert isinstance(result.metrics, pandas.DataFrame) and list(result.metrics["method"]) == ["bm25", "hybrid"]
    assert result.metrics.set_index("method").loc["hybrid", "mrr"] == result.summary["hybrid"]["mrr"]
    assert len(result.results) == 12 and set(result.results["query_id"]) == {q.query_id for q in chosen.queries}
    row = result.results.iloc[0]
    assert row["query"] == chosen.queries[0].body and row["answer_ids"] == chosen.queries[0].answer_ids
    per_query = result.results[result.results["method"] == "bm25"]["mrr"].mean()
    assert per_query == pytest.approx(result.summary["bm25"]["mrr"])


def test_evaluate_without_pandas_gives_lists_of_dicts(db, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pandas", None)        # `import pandas` now fails
    result = db.skb(SKB).evaluate("bm25", split="val", limit=3, options={"k1": 1.0}, out=tmp_path / "report")
    assert isinstance(result.metrics, list) and result.metrics[0]["method"] == "bm25"
    assert result.metrics[0]["hit@1"] == result.summary["bm25"]["hit@1"]
    assert isinstance(result.results, list) and len(result.results) == 3
    assert {"query_id", "query", "answer_ids", "ranked_ids", "best_answer_rank", "mrr"} <= set(result.results[0])
    assert result.runs[0].options["k1"] == 1.0
    assert result.report == tmp_path / "report" / "report.md" and result.report.is_file()


def test_evaluate_takes_settings_per_method(db):
    result = db.skb(SKB).evaluate(["bm25", "hybrid"], limit=2,
                                  options={"hybrid": {"fusion": "weighted", "weight": 0.7}, "k1": 1.1})
    options = {run.method: run.options for run in result.runs}
    assert options["hybrid"]["fusion"] == "weighted" and options["hybrid"]["weight"] == 0.7
    assert options["bm25"]["k1"] == 1.1 and "k1" not in options["hybrid"]


def cli_error(url: str, *args: str) -> str:
    done = cli_runner(url)(*args, expect=1)
    assert done.stderr.startswith("error: ")
    return done.stderr.removeprefix("error: ").strip()


def test_errors_are_the_clis_exceptions_with_its_messages(db, api_url):
    skb = db.skb(SKB)
    with pytest.raises(stark_pg.LoadError) as unknown_skb:
        db.skb("no-such-skb")
    assert str(unknown_skb.value) == cli_error(api_url, "info", "no-such-skb")
    assert "known: " in str(unknown_skb.value) and SKB in str(unknown_skb.value)
    with pytest.raises(stark_pg.UnknownMethod) as unknown_method:
        skb.search("x", method="bm26")
    assert str(unknown_method.value) == cli_error(api_url, "search", SKB, "x", "-m", "bm26")
    with pytest.raises(stark_pg.UnknownMethod, match="unknown method 'bm26'"):
        skb.evaluate(["bm25", "bm26"])
    with pytest.raises(stark_pg.OptionError, match=r"setting 'k1=nan': must be a finite number; bm25 settings: k1=1.2"):
        skb.search("x", method="bm25", k1=float("nan"))
    with pytest.raises(stark_pg.OptionError, match=r"setting 'b=2': must be between 0.0 and 1.0"):
        skb.search("x", method="bm25", b=2)
    with pytest.raises(stark_pg.OptionError, match=r"setting 'k1=abc': 'abc' is not a valid float"):
        skb.search("x", method="bm25", k1="abc")
    with pytest.raises(stark_pg.OptionError, match=r"setting 'exact=1': 1 is not a valid bool"):
        skb.search("x", method="vss", exact=1)
    with pytest.raises(stark_pg.OptionError, match=r"setting 'colour': expected one of b, engine, field, k1"):
        skb.search("x", method="bm25", colour="red")
    with pytest.raises(stark_pg.OptionError, match="k 0: the number of results must be at least 1"):
        skb.search("x", method="bm25", k=0)
    with pytest.raises(stark_pg.OptionError, match="setting 'colour': none of bm25, vss has it"):
        skb.evaluate(["bm25", "vss"], options={"colour": "red"})
    with pytest.raises(stark_pg.LoadError, match=f"no queries in split:nope of {SKB}"):
        skb.evaluate("bm25", split="nope")


def test_a_search_over_a_missing_index_says_what_to_run(db):
    db.load("synthetic", nodes=200, seed=5, name="api-unindexed")
    with pytest.raises(stark_pg.MissingIndex, match="has no lexical index: run stark-pg index api-unindexed"):
        db.skb("api-unindexed").search("anything", method="bm25")
    db.drop("api-unindexed")
    assert "api-unindexed" not in db.skbs()


def test_load_info_index_and_drop(api_url, monkeypatch):
    monkeypatch.setenv("STARK_PG_DSN", api_url)                # connect() with no dsn: as the CLI, STARK_PG_DSN
    summary = stark_pg.load("synthetic", nodes=300, seed=2, name="api-small")
    assert summary["name"] == "api-small" and summary["status"] == "loaded" and summary["nodes"] == 300
    again = stark_pg.load("synthetic", nodes=300, seed=2, name="api-small", if_exists="skip")
    assert again["status"] == "skipped"
    with stark_pg.connect() as db:
        skb = db.skb("api-small")
        info = skb.info()
        assert info == json.loads(cli_runner(api_url)("info", "api-small", "--json").stdout)
        report = skb.index(dense=False)
        assert set(report) == {"lexical", "graph"} and report["graph"]["rows"] > 0
        assert skb.search("protein", method="bm25", k=3).node_ids
        with pytest.raises(stark_pg.OptionError, match="if_exists must be replace, skip or fail, not 'keep'"):
            db.load("synthetic", nodes=300, name="api-small", if_exists="keep")
        with pytest.raises(stark_pg.DeviceError, match="device='tpu' is not a device"):
            skb.index(device="tpu")
        db.drop("api-small")
        assert "api-small" not in db.skbs()
    assert db.closed


def test_import_stark_pg_stays_cheap():
    code = ("import sys, stark_pg; heavy = [m for m in ('psycopg', 'numpy', 'torch', 'typer') if m in sys.modules]; "
            "print(heavy, stark_pg.connect.__module__, 'connect' in dir(stark_pg))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[] stark_pg.api True"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        stark_pg.nothing


def python_examples() -> list[str]:
    """The ```python blocks of the README's "Python API" section."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## Python API\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert section, "README.md has no '## Python API' section"
    return re.findall(r"```python\n(.*?)```", section.group(1), flags=re.S)


def test_the_readmes_python_examples_run(api_url, monkeypatch, capsys):
    monkeypatch.setenv("STARK_PG_DSN", api_url)
    examples = python_examples()
    assert len(examples) >= 3
    session = {"__name__": "readme"}          # one namespace, as a reader running them in turn in one session
    for example in examples:
        try:
            exec(compile(example, "README.md (Python API)", "exec"), session)
        except Exception as exc:
            pytest.fail(f"README example failed with {type(exc).__name__}: {exc}\n{example}")
    printed = capsys.readouterr().out
    assert "unknown method 'bm26'" in printed and str(session["hits"].node_ids) in printed
    assert set(session["result"].summary) == {"bm25", "vss", "hybrid"} and len(session["hits"]) == 5
    # the question asks for drugs and gets them: its answer first by mfar and by the weighted hybrid
    with stark_pg.connect(api_url) as db:
        (answer,) = db.conn.execute("select answer_ids from stark.query where body = %s",
                                    (session["question"],)).fetchone()
    assert answer == [886] and "1 886 drug Firavir" in printed
    assert session["hits"][0].node_id == 886 and session["hits"][0].type == "drug"
    assert session["db"].closed
