"""Every kind of bad bundle input: a LoadError naming file and line, and an untouched database."""

from __future__ import annotations

import json

import pytest

from conftest import count_rows
from loaders.bundle import BundleSource
from stark_pg.skb.records import LoadError
from stark_pg.skb.store import load_skb

NODES = [{"id": 1, "type": "drug", "name": "Aspirin", "fields": {"description": "pain relief"}},
         {"id": 2, "type": "gene/protein", "name": "PTGS2", "fields": {}},
         {"id": 3, "type": "disease", "name": "fever"}]
EDGES = "src\trelation\tdst\n1\ttarget\t2\n2\tassociated with\t3\n"
QUERIES = 'id,query,answer_ids,split\n10,What targets PTGS2?,[1],train\n11,"Which gene, if any?","[2]",val\n'


def write_bundle(path, nodes=None, edges=EDGES, queries=QUERIES, raw_nodes: bytes | None = None):
    path.mkdir(parents=True, exist_ok=True)
    if raw_nodes is None:
        raw_nodes = "".join(json.dumps(n) + "\n" for n in (nodes or NODES)).encode()
    (path / "nodes.jsonl").write_bytes(raw_nodes)
    (path / "edges.tsv").write_bytes(edges.encode() if isinstance(edges, str) else edges)
    if queries is not None:
        (path / "queries.csv").write_bytes(queries.encode() if isinstance(queries, str) else queries)
    return path


def test_a_good_bundle_loads(conn, tmp_path):
    summary = load_skb(conn, BundleSource(write_bundle(tmp_path / "tiny")))
    assert (summary.nodes, summary.edges, summary.queries, summary.fields) == (3, 2, 2, 1)
    assert summary.name == "tiny"


def test_queries_are_optional(conn, tmp_path):
    assert load_skb(conn, BundleSource(write_bundle(tmp_path / "tiny", queries=None))).queries == 0


GOOD = "\n".join(json.dumps(n) for n in NODES) + "\n"
CASES = {
    "malformed json": (dict(raw_nodes=(GOOD + '{"id": 4, "type": \n').encode()), "nodes.jsonl line 4", "malformed JSON"),
    "not an object": (dict(raw_nodes=(GOOD + "[4]\n").encode()), "nodes.jsonl line 4", "JSON object"),
    "missing type": (dict(raw_nodes=(GOOD + '{"id": 4}\n').encode()), "nodes.jsonl line 4", "missing key 'type'"),
    "extra key": (dict(raw_nodes=(GOOD + '{"id": 4, "type": "x", "colour": 1}\n').encode()), "nodes.jsonl line 4",
                  "unexpected keys"),
    "string id": (dict(raw_nodes=(GOOD + '{"id": "4", "type": "x"}\n').encode()), "nodes.jsonl line 4", "not an integer"),
    "duplicate node": (dict(raw_nodes=(GOOD + '{"id": 2, "type": "x"}\n').encode()), "nodes.jsonl line 4",
                       "duplicate node id 2"),
    "bad encoding": (dict(raw_nodes=GOOD.encode() + b'{"id": 4, "type": "caf\xe9"}\n'), "nodes.jsonl line 4", "UTF-8"),
    "NUL in text": (dict(raw_nodes=(GOOD + '{"id": 4, "type": "x", "name": "a\\u0000b"}\n').encode()),
                    "nodes.jsonl line 4", "NUL"),
    "empty nodes": (dict(raw_nodes=b""), "nodes.jsonl", "empty"),
    "empty edges": (dict(edges=""), "edges.tsv", "empty"),
    "bad edge header": (dict(edges="from\tto\n1\t2\n"), "edges.tsv line 1", "header"),
    "missing column": (dict(edges=EDGES + "1\t3\n"), "edges.tsv line 4", "3 tab-separated columns, found 2"),
    "extra column": (dict(edges=EDGES + "1\ttarget\t3\t0.5\n"), "edges.tsv line 4", "found 4"),
    "non-integer endpoint": (dict(edges=EDGES + "1\ttarget\tthree\n"), "edges.tsv line 4", "not an integer"),
    "dangling edge": (dict(edges=EDGES + "1\ttarget\t99\n"), "edges.tsv line 4", "endpoint 99 is not a node"),
    "answer not a node": (dict(queries=QUERIES + "12,Who?,[42],val\n"), "queries.csv line 4", "[42]"),
    "bad answer list": (dict(queries=QUERIES + "12,Who?,[],val\n"), "queries.csv line 4", "answer_ids"),
    "missing query column": (dict(queries="id,query\n1,x\n"), "queries.csv line 1", "header"),
    "extra query column": (dict(queries="id,query,answer_ids,colour\n1,x,[1],red\n"), "queries.csv line 1", "colour"),
    "short query row": (dict(queries=QUERIES + "12,Who?\n"), "queries.csv line 4", "columns"),
    "duplicate query": (dict(queries=QUERIES + "10,again,[1],val\n"), "queries.csv line 4", "duplicate query id 10"),
    "empty queries": (dict(queries=""), "queries.csv", "empty"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_names_file_and_line_and_changes_nothing(conn, db_url, tmp_path, case):
    load_skb(conn, BundleSource(write_bundle(tmp_path / "tiny")))       # an SKB that must survive
    before = {t: count_rows(db_url, t) for t in ("skb", "node", "node_field", "edge", "query")}
    kwargs, where, what = CASES[case]
    bad = write_bundle(tmp_path / "bad", **kwargs)
    with pytest.raises(LoadError) as error:
        load_skb(conn, BundleSource(bad), name="tiny")
    assert where in str(error.value) and what in str(error.value), str(error.value)
    assert {t: count_rows(db_url, t) for t in before} == before


def test_drop_dangling_reports_how_many(conn, tmp_path):
    bad = write_bundle(tmp_path / "bad", edges=EDGES + "1\ttarget\t99\n77\ttarget\t1\n",
                       queries=QUERIES + "12,Who?,[42],val\n")
    summary = load_skb(conn, BundleSource(bad), drop_dangling=True)
    assert (summary.edges, summary.dropped_edges, summary.queries, summary.dropped_queries) == (2, 2, 2, 1)
