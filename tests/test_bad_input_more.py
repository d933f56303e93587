"""More bad input (issue 15, items 12 and 13): each case is one readable error naming the file and
line (or the argument), the database is unchanged, and the CLI exits non-zero without a traceback."""

from __future__ import annotations

import json

import psycopg
import pytest

from conftest import count_rows
from loaders.bundle import BundleSource
from stark_pg.options import OptionError, parse_options
from stark_pg.skb.records import LoadError
from stark_pg.skb.store import load_skb
from test_bad_input import GOOD, QUERIES, write_bundle

TABLES = ("skb", "node", "node_field", "edge", "query")


def deep_attrs(depth: int) -> str:
    return '{"id": 4, "type": "x", "attrs": ' + '{"a": ' * depth + "1" + "}" * depth + "}"


def node_line(text: str) -> dict:
    return dict(raw_nodes=(GOOD + text + "\n").encode())


CASES = {
    "node id 2^63": (node_line('{"id": 9223372036854775808, "type": "x"}'), "nodes.jsonl line 4", "out of range"),
    "node id below int8": (node_line('{"id": -9223372036854775809, "type": "x"}'), "nodes.jsonl line 4",
                           "out of range"),
    "query id beyond int8": (dict(queries=QUERIES + "99999999999999999999,Who?,[1],val\n"), "queries.csv line 4",
                             "out of range"),
    "edge id beyond int8": (dict(edges="src\trelation\tdst\n1\ttarget\t9223372036854775808\n"), "edges.tsv line 2",
                            "out of range"),
    "NUL in attrs value": (node_line('{"id": 4, "type": "x", "attrs": {"a": ["b\\u0000"]}}'), "nodes.jsonl line 4",
                           "NUL"),
    "NUL in attrs key": (node_line('{"id": 4, "type": "x", "attrs": {"a\\u0000": 1}}'), "nodes.jsonl line 4", "NUL"),
    "NUL in split": (dict(queries=QUERIES + "12,Who?,[1],va\x00l\n"), "queries.csv line 4", "NUL"),
    "surrogate in name": (node_line('{"id": 4, "type": "x", "name": "a\\ud800"}'), "nodes.jsonl line 4", "surrogate"),
    "surrogate in attr": (node_line('{"id": 4, "type": "x", "attrs": {"a": "\\ud800"}}'), "nodes.jsonl line 4",
                          "surrogate"),
    "surrogate in field": (node_line('{"id": 4, "type": "x", "fields": {"d": "\\udfff"}}'), "nodes.jsonl line 4",
                           "surrogate"),
    "attrs 100,000 deep": (node_line(deep_attrs(100_000)), "nodes.jsonl line 4", "nested too deeply"),
    "attrs 200 deep": (node_line(deep_attrs(200)), "nodes.jsonl line 4", "nested deeper than 64"),
    "underscores in an id": (dict(queries=QUERIES + "1_2,Who?,[1],val\n"), "queries.csv line 4",
                             "'1_2' is not an integer"),
    "non-ASCII digits in an id": (dict(queries=QUERIES + "\u0661\u0662,Who?,[1],val\n"), "queries.csv line 4",
                                  "is not an integer"),
    "unterminated string": (node_line('{"id": 4, "type": "x'), "nodes.jsonl line 4",
                            "malformed JSON (Unterminated string starting at column 19)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_more_bad_input_names_file_and_line_and_changes_nothing(conn, db_url, tmp_path, case):
    load_skb(conn, BundleSource(write_bundle(tmp_path / "tiny")))
    before = {t: count_rows(db_url, t) for t in TABLES}
    kwargs, where, what = CASES[case]
    with pytest.raises(LoadError) as error:
        load_skb(conn, BundleSource(write_bundle(tmp_path / "bad", **kwargs)), name="tiny")
    message = str(error.value)
    assert where in message and what in message and "at at" not in message and "\n" not in message, message
    assert {t: count_rows(db_url, t) for t in TABLES} == before


def test_a_multi_line_quoted_query_keeps_its_newlines(conn, db_url, tmp_path):
    queries = 'id,query,answer_ids,split\n10,"first line\nsecond line\r\nthird",[1],train\n11,"x","[1,2]",nope\n12,y\n'
    with pytest.raises(LoadError) as error:          # the short row is line 6: lines count from the file
        load_skb(conn, BundleSource(write_bundle(tmp_path / "tiny", queries=queries)))
    assert "queries.csv line 6" in str(error.value), str(error.value)
    load_skb(conn, BundleSource(write_bundle(tmp_path / "tiny", queries=queries.removesuffix("12,y\n"))))
    body = conn.execute("select body from stark.query where query_id = 10").fetchone()[0]
    assert body == "first line\nsecond line\nthird"


@pytest.mark.parametrize("pair", ["k1=nan", "k1=inf", "b=inf", "b=-inf", "k1=1e308", "b=2", "k1=-1"])
def test_bm25_options_must_be_finite_and_in_range(pair):
    from stark_pg.retrieve import bm25

    with pytest.raises(OptionError, match="finite|between"):
        parse_options(bm25.Options, [pair])
    assert parse_options(bm25.Options, ["k1=0.9", "b=1"]).k1 == 0.9


def test_every_float_option_of_every_method_must_be_finite():
    import dataclasses
    import typing

    from stark_pg.retrieve import METHODS, get_method

    checked = 0
    for method in METHODS:
        options = get_method(method).Options
        for f in dataclasses.fields(options):
            if float in (typing.get_args(typing.get_type_hints(options)[f.name]) or (typing.get_type_hints(options)[f.name],)):
                with pytest.raises(OptionError, match="finite"):
                    parse_options(options, [f"{f.name}=nan"])
                checked += 1
    assert checked >= 4


# --- through the real CLI: one line on stderr, non-zero exit, no traceback, nothing changed -----------------

@pytest.fixture
def tiny(cli, db_url, tmp_path):
    """A loaded SKB `tiny` with a lexical index only."""
    cli("load", write_bundle(tmp_path / "tiny"), "--quiet")
    cli("index", "tiny", "--no-dense", "--quiet")
    return db_url


def one_line_error(done, *words):
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


CLI_CASES = {
    "k -1": (["-k", "-1"], ["-k -1"]),
    "k 0": (["-k", "0"], ["-k 0"]),
    "k1 huge": (["-m", "bm25", "-o", "k1=1e308"], ["k1=1e308", "between"]),
    "k1 nan": (["-m", "bm25", "-o", "k1=nan"], ["k1=nan", "finite"]),
    "b inf": (["-m", "bm25", "-o", "b=inf"], ["b=inf", "finite"]),
    "unknown field": (["-m", "bm25", "-o", "field=colour"], ["field=colour", "description"]),
    "unknown option": (["-m", "bm25", "-o", "colour=red"], ["colour=red"]),
    "unknown method": (["-m", "nosuch"], ["unknown method 'nosuch'"]),
    "unknown model": (["-m", "vss", "-o", "model=no-such/model-xyz"], ["no-such/model-xyz", "not available"]),
    "LLM unavailable": (["-m", "hyde", "-o", "llm=nosuchprovider:model"], []),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_search_bad_arguments_are_one_line(tiny, cli, case):
    before = {t: count_rows(tiny, t) for t in TABLES}
    args, words = CLI_CASES[case]
    one_line_error(cli("search", "tiny", "What targets PTGS2?", *args, expect=None), *words)
    assert {t: count_rows(tiny, t) for t in TABLES} == before


def test_an_unknown_skb_is_an_error(tiny, cli):
    one_line_error(cli("search", "nosuch", "fever", "-m", "bm25", expect=None), "no SKB named 'nosuch'")


def test_a_missing_index_says_how_to_build_it(cli, tmp_path):
    cli("load", write_bundle(tmp_path / "tiny"), "--quiet")
    one_line_error(cli("search", "tiny", "fever", "-m", "bm25", expect=None), "run stark-pg index tiny")


def test_an_unreachable_server_is_one_line(cli):
    done = cli("--dsn", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", "search", "tiny", "x",
               "-m", "bm25", expect=None)
    one_line_error(done, "cannot connect")


def test_a_bad_bundle_through_the_cli_is_one_line(tiny, cli, tmp_path):
    before = {t: count_rows(tiny, t) for t in TABLES}
    bad = write_bundle(tmp_path / "bad", **node_line(deep_attrs(100_000)))
    one_line_error(cli("load", bad, "--name", "tiny", "--quiet", expect=None), "nodes.jsonl line 4")
    assert {t: count_rows(tiny, t) for t in TABLES} == before


def test_a_good_search_still_works(tiny, cli):
    done = cli("search", "tiny", "pain relief", "-m", "bm25", "-o", "field=description", "--json")
    assert json.loads(done.stdout)["results"]


# --- stark.neighbors: hops capped, unknown SKB an error -----------------------------------------------------

def test_neighbors_caps_hops_and_rejects_an_unknown_skb(conn, tmp_path):
    load_skb(conn, BundleSource(write_bundle(tmp_path / "tiny")))
    assert conn.execute("select node_id, hop from stark.neighbors('tiny', 1, null, 10)").fetchall() == [(2, 1), (3, 2)]
    assert conn.execute("select node_id from stark.neighbors('tiny', 1)").fetchall() == [(2,)]
    for call in ("stark.neighbors('tiny', 1, null, 1000000)", "stark.neighbors('tiny', 1, null, 0)",
                 "stark.neighbors('tiny', 1, null, null)"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="hops must be between 1 and 10"):
            conn.execute(f"select * from {call}")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no SKB named 'nosuch'"):
        conn.execute("select * from stark.neighbors('nosuch', 1)")


@pytest.mark.parametrize("command", [["info", "nosuch"], ["index", "nosuch", "--quiet"], ["drop", "nosuch"],
                                     ["eval", "nosuch", "-m", "bm25", "--quiet"],
                                     ["search", "nosuch", "x", "-m", "vss"]])
def test_every_command_rejects_an_unknown_skb(tiny, cli, command):
    before = {t: count_rows(tiny, t) for t in TABLES}
    one_line_error(cli(*command, expect=None), "nosuch")
    assert {t: count_rows(tiny, t) for t in TABLES} == before


VECTOR = "array_fill(0.1::real, array[384])::vector"


@pytest.mark.parametrize("call", ["stark.bm25('nosuch', 'fever')", "stark.document('nosuch', 1)",
                                  "stark.neighbors('nosuch', 1)", "stark.document_chunks('nosuch', 1)",
                                  f"stark.answer_type_votes('nosuch', {VECTOR})"])
def test_sql_functions_reject_an_unknown_skb(conn, tmp_path, call):
    load_skb(conn, BundleSource(write_bundle(tmp_path / "tiny")))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no SKB named 'nosuch'"):
        conn.execute(f"select * from {call}")


def test_a_database_migrated_by_a_newer_stark_pg_is_one_clear_line(db_url):
    """A schema revision this stark-pg does not know (a newer release wrote it) is named, with what to do,
    instead of alembic's traceback; the database is left as it was."""
    from conftest import cli_runner

    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("update stark_pg_alembic_version set version_num = '9999'")
    done = cli_runner(db_url)("info", "stark-prime-ibd", expect=1)
    assert "schema is revision 9999, newer than this stark-pg knows (head " in done.stderr
    assert "Traceback" not in done.stderr
    with psycopg.connect(db_url, autocommit=True) as c:
        assert c.execute("select version_num from stark_pg_alembic_version").fetchone()[0] == "9999"
