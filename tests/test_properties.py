"""Property-based tests of the loaders (issue 15, "Done means"): generated bundles, mostly valid, some with
one corruption (bad ids, NUL, lone surrogates, deep or non-finite attrs, duplicates, dangling references,
bad headers and columns, broken quoting, invalid UTF-8, empty files). A valid bundle loads and reads
back exactly as generated; a corrupted one fails with a LoadError naming the file and line at fault,
and the database (every table of the schema `stark`) is exactly as it was, with an SKB of the same name
loaded before, so a failed replace is exercised too.

Options, search and the `stark.*` SQL functions: tests/test_properties_sql.py.
"""

from __future__ import annotations

import csv
import io
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql as pgsql

from conftest import cloned_database
from loaders.bundle import BundleSource
from stark_pg.skb.records import LoadError
from stark_pg.skb.store import SkbExists, load_skb

INT8_MIN, INT8_MAX = -(1 << 63), (1 << 63) - 1
SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --- the database, before and after ------------------------------------------------------------------------

def fingerprint(conn) -> dict[str, tuple]:
    """Row count and md5 of the ordered rows of every table of the schema `stark` (partitions included),
    and the schema's index names: equal fingerprints mean equal stored data."""
    tables = [r[0] for r in conn.execute("select relname from pg_class where relnamespace = 'stark'::regnamespace "
                                         "and relkind in ('r', 'p') order by relname")]
    parts = [pgsql.SQL("select {}::text, count(*), md5(coalesce(string_agg(x::text, E'\\n' order by x::text), '')) "
                       "from stark.{} x").format(pgsql.Literal(t), pgsql.Identifier(t)) for t in tables]
    rows = conn.execute(pgsql.SQL(" union all ").join(parts)).fetchall()
    indexes = [r[0] for r in conn.execute("select indexname from pg_indexes where schemaname = 'stark' order by 1")]
    return {name: (n, digest) for name, n, digest in rows} | {"(indexes)": tuple(indexes)}


def stored(conn, name: str) -> dict | None:
    """An SKB's nodes, fields, edges and queries as sorted tuples (None if there is no such SKB)."""
    row = conn.execute("select skb_id from stark.skb where name = %s", (name,)).fetchone()
    if row is None:
        return None
    args = (row[0],)
    return {
        "nodes": conn.execute("select node_id, type, name, attrs from stark.node where skb_id = %s order by 1",
                              args).fetchall(),
        "fields": conn.execute("select node_id, field, body from stark.node_field where skb_id = %s order by 1, 2",
                               args).fetchall(),
        "edges": sorted(conn.execute("select src, relation, dst from stark.edge where skb_id = %s", args).fetchall()),
        "queries": conn.execute("select query_id, split, body, answer_ids from stark.query where skb_id = %s "
                                "order by 1", args).fetchall(),
    }


def same_json(a, b) -> bool:
    """JSON equality with numbers compared as numbers: jsonb keeps the decimal a float was written as,
    so 1e308 comes back as the integer 10**308."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b if isinstance(a, int) and isinstance(b, int) else math.isclose(float(a), float(b), rel_tol=1e-15)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return a == b


def assert_same(got: dict, want: dict) -> None:
    assert [n[:3] for n in got["nodes"]] == [n[:3] for n in want["nodes"]]
    for (node_id, *_, attrs), (_, *_, expected) in zip(got["nodes"], want["nodes"]):
        assert same_json(attrs, expected), (node_id, attrs, expected)
    for part in ("fields", "edges", "queries"):
        assert got[part] == want[part], part


@pytest.fixture(scope="module")
def load_conn(server_url, template_db):
    """A database of this module's own, holding `skb` (replaced by every successful example) and `other`
    (which no example touches)."""
    from stark_pg.db import connect

    with cloned_database(server_url, template_db, "stark_props_load") as url, connect(url) as conn:
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("skb", "other"):
                load_skb(conn, BundleSource(BASELINE.write(Path(tmp) / name)))
        yield conn


# --- generated bundles ---------------------------------------------------------------------------------------

TEXT = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
# Node types and field names: any text but NUL (backslashes, tabs and line breaks included: store.py
# escapes them for COPY; test_type_and_field_names_are_stored_verbatim keeps the examples that found it).
LABEL = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
text = st.text(TEXT, max_size=12)
labels = st.text(LABEL, max_size=8)
node_ids = st.one_of(st.sampled_from([INT8_MIN, INT8_MAX, 0, -1]), st.integers(-50, 50),
                     st.integers(INT8_MIN, INT8_MAX))
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 30, 10 ** 30),
                         st.floats(allow_nan=False, allow_infinity=False), text)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                 st.dictionaries(text, inner, max_size=3)),
                           max_leaves=8)


def nested(depth: int, inner="1") -> str:
    """attrs `depth` levels deep: one object around depth - 1 lists."""
    return '{"a": ' + "[" * (depth - 1) + inner + "]" * (depth - 1) + "}"


DEEP_64 = json.loads(nested(64))               # the deepest attrs allowed: loads
BAD_INTEGERS = ["9223372036854775808", "-9223372036854775809", "1" * 25, "1" * 5000, "-" + "9" * 4400, "1_4_4",
                "\u0661\u0662", "\uff11", "\u00b9", "1.0", "1e3", "0x1F", "+-1", "1 2", "", "x"]
BAD_JSON_IDS = ["9223372036854775808", "-9223372036854775809", "1" * 25, "1" * 5000, "-" + "9" * 4400, "1.5",
                "1e3", "1E400", "-0.0", '"7"', '"x"', "true", "null", "[1]", "{}"]
BAD_UTF8 = [b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"]
NODE_SHAPES = [
    lambda o: [1], lambda o: "x", lambda o: 5, lambda o: None, lambda o: o | {"colour": 1},
    lambda o: {k: v for k, v in o.items() if k != "id"}, lambda o: {k: v for k, v in o.items() if k != "type"},
    lambda o: o | {"type": ""}, lambda o: o | {"type": 5}, lambda o: o | {"type": None}, lambda o: o | {"type": ["a"]},
    lambda o: o | {"name": 5}, lambda o: o | {"name": {}}, lambda o: o | {"name": True},
    lambda o: o | {"fields": [1]}, lambda o: o | {"fields": "x"}, lambda o: o | {"fields": 5},
    lambda o: o | {"fields": {"a": 1}}, lambda o: o | {"fields": {"a": None}}, lambda o: o | {"fields": {"a": ["b"]}},
    lambda o: o | {"attrs": [1]}, lambda o: o | {"attrs": "x"}, lambda o: o | {"attrs": 5},
    lambda o: o | {"attrs": True}, lambda o: o | {"id": True}, lambda o: o | {"id": False},
]
NODE_KINDS = ["node_id", "node_dup", "node_nul", "node_surrogate", "node_deep", "node_nonfinite", "node_shape",
              "node_malformed", "node_utf8", "nodes_empty", "nodes_blank"]
EDGE_KINDS = ["edge_dangling", "edge_id", "edge_columns", "edge_empty_relation", "edge_nul", "edge_header",
              "edge_utf8", "edges_empty"]
QUERY_KINDS = ["query_dangling", "query_answers", "query_dup", "query_id", "query_header", "query_columns",
               "query_blank", "query_nul", "query_unterminated", "query_bad_quote", "query_utf8", "queries_empty"]


@dataclass
class Bundle:
    """Files to write, and what loading them must give: the stored rows, or the error's place."""

    nodes: list[bytes]                       # one entry a line, without line endings
    edges: list[bytes]
    queries: list[bytes] | None              # one entry a CSV row (it may span lines), with its line ending
    eol: bytes = b"\n"
    bom: bool = False
    want: dict | None = None                 # rows after a successful load
    error: tuple[str, int | None] | None = None
    drop_dangling: bool = False
    dropped: tuple[int, int] = (0, 0)        # edges, queries
    empty: set = field(default_factory=set)  # files written empty

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True)
        bom = "\ufeff".encode() if self.bom else b""
        files = {"nodes.jsonl": [line + self.eol for line in self.nodes],
                 "edges.tsv": [line + self.eol for line in self.edges]}
        if self.queries is not None:
            files["queries.csv"] = self.queries
        for name, lines in files.items():
            (directory / name).write_bytes(b"" if name in self.empty else bom + b"".join(lines))
        return directory


def csv_row(cells, eol: bytes) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator=eol.decode()).writerow(cells)
    return out.getvalue().encode()


def jsonl(obj, ascii_only: bool = False) -> bytes:
    return json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8")


def spelled(draw, i: int) -> str:
    """An id as a file may write it: a plus sign, leading zeros (thousands: more digits than int() takes), spaces."""
    sign = "-" if i < 0 else draw(st.sampled_from(["", "", "+"]))
    pad = draw(st.sampled_from(["", "", " "]))
    return f"{pad}{sign}{'0' * draw(st.sampled_from([0, 0, 0, 2, 4400]))}{abs(i)}{pad}"


def insert_bytes(draw, line: bytes, bad: bytes) -> bytes:
    at = draw(st.integers(0, len(line)))
    return line[:at] + bad + line[at:]


@st.composite
def bundles(draw, kind: str | None = None) -> Bundle:
    """A random bundle, valid (kind None) or with one corruption of the given kind."""
    ids = draw(st.lists(node_ids, min_size=1, max_size=6, unique=True))
    objs = []
    for node_id in ids:
        obj = {"id": node_id, "type": draw(st.text(LABEL, min_size=1, max_size=8))}
        if draw(st.booleans()):
            obj["name"] = draw(st.one_of(st.none(), text))
        if draw(st.booleans()):
            obj["fields"] = draw(st.dictionaries(labels, text, max_size=3))
        if draw(st.booleans()):
            obj["attrs"] = draw(st.one_of(st.none(), st.dictionaries(text, json_values, max_size=3), st.just(DEEP_64)))
        objs.append(obj)
    relation = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00\t\n"), min_size=1,
                       max_size=8)
    edges = draw(st.lists(st.tuples(st.sampled_from(ids), relation, st.sampled_from(ids)), max_size=8))
    splits = st.one_of(st.sampled_from(["train", "val", "test", " human "]),
                       st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00\r"), max_size=6))
    body_chars = st.characters(exclude_categories=("Cs",), exclude_characters="\x00\r")
    bodies = st.builds(lambda a, b, c: a + b + c, st.text(body_chars, max_size=10),
                       st.sampled_from(["q", "é", "漢", "?", "0", '"']), st.text(body_chars, max_size=10))
    queries = draw(st.lists(st.tuples(st.integers(INT8_MIN, INT8_MAX), bodies,
                                      st.lists(st.sampled_from(ids), min_size=1, max_size=3), splits),
                            max_size=5, unique_by=lambda q: q[0]))
    header = draw(st.permutations(["id", "query", "answer_ids"] + (["split"] if draw(st.booleans()) else [])))
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))

    def cells(query_id, body, answers, split):
        value = {"id": spelled(draw, query_id), "query": body, "answer_ids": json.dumps(answers), "split": split}
        return [value[column] for column in header]

    def expected_split(split):
        return (split.strip() or "all") if "split" in header else "all"

    edge_lines = [f"{spelled(draw, s)}\t{r}\t{spelled(draw, d)}".encode() for s, r, d in edges]
    bundle = Bundle(nodes=[jsonl(o) for o in objs], edges=[b"src\trelation\tdst"] + edge_lines, queries=None, eol=eol,
                    bom=draw(st.booleans()), drop_dangling=draw(st.booleans()))
    rows = [csv_row(header, eol)] + [csv_row(cells(*q), eol) for q in queries]
    valid = bundle.want = {
        "nodes": sorted((o["id"], o["type"], o.get("name"), o.get("attrs")) for o in objs),
        "fields": sorted((o["id"], k, v) for o in objs for k, v in (o.get("fields") or {}).items() if v),
        "edges": sorted(edges),
        "queries": sorted((q, expected_split(s), b, a) for q, b, a, s in queries),
    }
    if kind is None or kind.startswith("node"):
        bundle.queries = rows if queries or draw(st.booleans()) else None
    else:
        bundle.queries = rows
    if kind is None:
        return bundle
    bundle.want = None

    def line_of_row(i):                       # the first line of queries row i (0: the header)
        return 1 + sum(r.count(b"\n") for r in rows[:i])

    missing = next(i for i in (max(ids) + 1, min(ids) - 1, *range(7)) if INT8_MIN <= i <= INT8_MAX and i not in ids)
    k = draw(st.integers(0, len(objs) - 1))
    e = draw(st.integers(1, len(bundle.edges)))            # where an edge line goes (1: right after the header)
    r = draw(st.integers(1, len(rows)))                    # where a query row goes
    obj = objs[k]
    if kind == "node_id":
        line = jsonl(obj | {"id": "@ID@"}).replace(b'"@ID@"', draw(st.sampled_from(BAD_JSON_IDS)).encode())
        bundle.nodes[k], bundle.error = line, ("nodes.jsonl", k + 1)
    elif kind == "node_dup":
        bundle.nodes.append(bundle.nodes[k])
        bundle.error = ("nodes.jsonl", len(bundle.nodes))
    elif kind in ("node_nul", "node_surrogate"):
        bad = draw(st.sampled_from(["\x00", "a\x00"])) if kind == "node_nul" else draw(st.sampled_from(
            ["\ud800", "x\udfff", "\udbff!"]))
        where = draw(st.sampled_from(["type", "name", "field", "field name", "attr", "attr name", "deep attr"]))
        changed = {"type": obj | {"type": "t" + bad}, "name": obj | {"name": bad},
                   "field": obj | {"fields": {"f": bad}}, "field name": obj | {"fields": {bad: "body"}},
                   "attr": obj | {"attrs": {"a": bad}}, "attr name": obj | {"attrs": {bad: 1}},
                   "deep attr": obj | {"attrs": {"a": [{"b": [bad]}]}}}[where]
        bundle.nodes[k], bundle.error = jsonl(changed, ascii_only=True), ("nodes.jsonl", k + 1)
    elif kind == "node_deep":
        depth = draw(st.sampled_from([65, 66, 200, 3000, 100_000]))
        line = jsonl(obj | {"attrs": "@A@"}).replace(b'"@A@"', nested(depth).encode())
        bundle.nodes[k], bundle.error = line, ("nodes.jsonl", k + 1)
    elif kind == "node_nonfinite":
        token = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e999"]))
        line = jsonl(obj | {"attrs": "@A@"}).replace(b'"@A@"', b'{"x": [' + token.encode() + b"]}")
        bundle.nodes[k], bundle.error = line, ("nodes.jsonl", k + 1)
    elif kind == "node_shape":
        bundle.nodes[k] = jsonl(draw(st.sampled_from(NODE_SHAPES))(obj))
        bundle.error = ("nodes.jsonl", k + 1)
    elif kind == "node_malformed":
        line = bundle.nodes[k]
        bundle.nodes[k], bundle.error = line[:draw(st.integers(1, len(line) - 1))], ("nodes.jsonl", k + 1)
    elif kind == "node_utf8":
        bundle.nodes[k] = insert_bytes(draw, bundle.nodes[k], draw(st.sampled_from(BAD_UTF8)))
        bundle.error = ("nodes.jsonl", k + 1)
    elif kind == "nodes_empty":
        bundle.empty, bundle.error = {"nodes.jsonl"}, ("nodes.jsonl", None)
    elif kind == "nodes_blank":
        bundle.nodes, bundle.error = [b"", b"  "], ("nodes.jsonl", None)
    elif kind == "edge_dangling":
        src, dst = (missing, ids[k]) if draw(st.booleans()) else (ids[k], missing)
        bundle.edges.insert(e, f"{src}\trel\t{dst}".encode())
        bundle.error = ("edges.tsv", e + 1)
    elif kind == "edge_id":
        bad = draw(st.sampled_from(BAD_INTEGERS))
        cols = [str(ids[k]), "rel", bad] if draw(st.booleans()) else [bad, "rel", str(ids[k])]
        bundle.edges.insert(e, "\t".join(cols).encode())
        bundle.error = ("edges.tsv", e + 1)
    elif kind == "edge_columns":
        line = draw(st.sampled_from([f"{ids[k]}\t{ids[k]}", f"{ids[k]}\tr\t{ids[k]}\t0.5", f"{ids[k]}", "\t\t\t"]))
        bundle.edges.insert(e, line.encode())
        bundle.error = ("edges.tsv", e + 1)
    elif kind in ("edge_empty_relation", "edge_nul"):
        relation = "" if kind == "edge_empty_relation" else draw(st.sampled_from(["\x00", "re\x00l"]))
        bundle.edges.insert(e, f"{ids[k]}\t{relation}\t{ids[k]}".encode())
        bundle.error = ("edges.tsv", e + 1)
    elif kind == "edge_header":
        bundle.edges[0] = draw(st.sampled_from([b"src\tdst", b"SRC\trelation\tdst", b"src relation dst", b"",
                                                b"src\trelation\tdst\t", b"dst\trelation\tsrc", b"src,relation,dst"]))
        bundle.error = ("edges.tsv", 1)
    elif kind == "edge_utf8":
        line = draw(st.integers(0, len(bundle.edges) - 1))
        bundle.edges[line] = insert_bytes(draw, bundle.edges[line], draw(st.sampled_from(BAD_UTF8)))
        bundle.error = ("edges.tsv", line + 1)
    elif kind == "edges_empty":
        bundle.empty, bundle.error = {"edges.tsv"}, ("edges.tsv", None)
    elif kind == "query_dangling":
        answers = draw(st.sampled_from([[missing], [ids[k], missing], [INT8_MAX + 1]]))
        rows.insert(r, csv_row(cells(draw(st.integers(INT8_MIN, INT8_MAX).filter(
            lambda q: q not in {x[0] for x in queries})), "who?", answers, "val"), eol))
        bundle.error = ("queries.csv", line_of_row(r))
    elif kind == "query_answers":
        bad = draw(st.sampled_from(["[]", "[1.5]", "1", '["1"]', "[true]", "nope", "{}", "[null]", "", "[1,]",
                                    "[" + "1" * 5000 + "]", "[1e3]"]))
        row = cells(12345, "who?", [ids[k]], "val")
        row[header.index("answer_ids")] = bad
        rows.insert(r, csv_row(row, eol))
        bundle.error = ("queries.csv", line_of_row(r))
    elif kind == "query_dup":
        if not queries:
            rows.append(csv_row(cells(7, "first", [ids[k]], "val"), eol))
        rows.append(rows[draw(st.integers(1, len(rows) - 1))])
        bundle.error = ("queries.csv", line_of_row(len(rows) - 1))
    elif kind == "query_id":
        row = cells(0, "who?", [ids[k]], "val")
        row[header.index("id")] = draw(st.sampled_from(BAD_INTEGERS))
        rows.insert(r, csv_row(row, eol))
        bundle.error = ("queries.csv", line_of_row(r))
    elif kind == "query_header":
        rows[0] = csv_row(draw(st.sampled_from([["id", "query"], ["id", "query", "answer_ids", "colour"],
                                                ["id", "query", "answer_ids", "id"], ["ID", "query", "answer_ids"],
                                                ["id", " query", "answer_ids"], []])), eol)
        bundle.error = ("queries.csv", 1)
    elif kind == "query_columns":
        row = cells(12345, "who?", [ids[k]], "val")
        rows.insert(r, csv_row(row[:-1] if draw(st.booleans()) else row + ["extra"], eol))
        bundle.error = ("queries.csv", line_of_row(r))
    elif kind == "query_blank":
        rows.insert(r, csv_row(cells(12345, draw(st.sampled_from(["", " ", "\n", "\u3000", "\t\n "])), [ids[k]],
                                     "val"), eol))
        bundle.error = ("queries.csv", line_of_row(r))
    elif kind == "query_nul":
        row = cells(12345, "who?", [ids[k]], "val")
        column = draw(st.sampled_from(header))
        row[header.index(column)] = row[header.index(column)][:1] + "\x00" + row[header.index(column)][1:]
        rows.insert(r, csv_row(row, eol))
        bundle.error = ("queries.csv", line_of_row(r))
    elif kind == "query_unterminated":         # a quote opened in the last column of the last row, never closed
        row = cells(12345, "who?", [ids[k]], "val")
        rows.append((",".join(row[:-1] + ['"' + row[-1]])).encode() + eol)
        bundle.error = ("queries.csv", line_of_row(len(rows) - 1))
    elif kind == "query_bad_quote":            # text after a closing quote: `"who"?`
        row = [c if c != "who?" else "@Q@" for c in cells(12345, "who?", [ids[k]], "val")]
        rows.insert(r, csv_row(row, eol).replace(b"@Q@", b'"who"?'))
        bundle.error = ("queries.csv", line_of_row(r))
    elif kind == "query_utf8":
        rows.insert(r, insert_bytes(draw, csv_row(cells(12345, "who?", [ids[k]], "val"), eol)[:-len(eol)],
                                    draw(st.sampled_from(BAD_UTF8))) + eol)
        bundle.error = ("queries.csv", line_of_row(r))
    elif kind == "queries_empty":
        bundle.empty, bundle.error = {"queries.csv"}, ("queries.csv", None)
    bundle.queries = rows
    if bundle.drop_dangling and kind in ("edge_dangling", "query_dangling"):
        bundle.want, bundle.error = valid, None            # --drop-dangling drops the one added
        bundle.dropped = (1, 0) if kind == "edge_dangling" else (0, 1)
    return bundle


BASELINE = Bundle(nodes=[b'{"id": 1, "type": "drug", "name": "Aspirin", "fields": {"description": "pain"}}',
                         b'{"id": 2, "type": "gene/protein", "attrs": {"x": [1, 2.5, null]}}'],
                  edges=[b"src\trelation\tdst", b"1\ttarget\t2"],
                  queries=[b"id,query,answer_ids,split\n", b'10,"What targets\nPTGS2?",[1],train\n'])


NAMES = st.sampled_from(["skb", "skb", "skb", "fresh ünï"])
IF_EXISTS = st.sampled_from(["replace", "replace", "replace", "skip", "fail"])


@settings(max_examples=80, **SETTINGS)
@given(bundle=bundles(), name=NAMES, if_exists=IF_EXISTS)
def test_a_valid_bundle_loads_exactly(load_conn, bundle, name, if_exists):
    check_load(load_conn, bundle, name, if_exists)


@pytest.mark.parametrize("kind", NODE_KINDS + EDGE_KINDS + QUERY_KINDS)
@settings(max_examples=15, **SETTINGS)
@given(data=st.data(), name=NAMES, if_exists=IF_EXISTS)
def test_a_corrupted_bundle_fails_cleanly_and_changes_nothing(load_conn, kind, data, name, if_exists):
    check_load(load_conn, data.draw(bundles(kind), label="bundle"), name, if_exists)


def check_load(conn, bundle: Bundle, name: str, if_exists: str) -> None:
    """Loading `bundle` as `name` either stores exactly what it holds, or (bad input) raises a LoadError
    naming the file and line at fault and leaves every table as it was."""
    before, other = fingerprint(conn), stored(conn, "other")
    exists = stored(conn, name) is not None
    with tempfile.TemporaryDirectory() as tmp:
        source = BundleSource(bundle.write(Path(tmp) / "bundle"))
        try:
            summary = load_skb(conn, source, name, if_exists=if_exists, drop_dangling=bundle.drop_dangling)
        except SkbExists:
            assert exists and if_exists == "fail"
            assert fingerprint(conn) == before
            return
        except LoadError as exc:
            message = str(exc)
            assert bundle.error is not None, f"a valid bundle was refused: {message}"
            label, line = bundle.error
            assert message.startswith(f"{label} line {line}: " if line else f"{label}: "), message
            assert "\n" not in message and "at at" not in message, message
            assert fingerprint(conn) == before, "a failed load changed the database"
            return
    if exists and if_exists == "skip":
        assert summary.status == "skipped" and fingerprint(conn) == before
        return
    assert bundle.error is None, f"loaded, but should have failed at {bundle.error}"
    assert_same(stored(conn, name), bundle.want)
    assert (summary.dropped_edges, summary.dropped_queries) == bundle.dropped
    assert stored(conn, "other") == other


# --- explicit repros of bugs found by the property above ------------------------------------------------------

def _with(**changes) -> Bundle:
    return Bundle(**{"nodes": list(BASELINE.nodes), "edges": list(BASELINE.edges),
                     "queries": list(BASELINE.queries)} | changes)


HEADER = b"id,query,answer_ids,split\n"
BASELINE_ROWS = {"nodes": [(1, "drug", "Aspirin", None), (2, "gene/protein", None, {"x": [1, 2.5, None]})],
                 "fields": [(1, "description", "pain")], "edges": [(1, "target", 2)],
                 "queries": [(10, "train", "What targets\nPTGS2?", [1])]}
FOUND = {   # each was a traceback (ValueError) or a malformed file silently accepted before loaders/ was fixed
    "node id of 5000 digits": _with(nodes=[b'{"id": ' + b"1" * 5000 + b', "type": "t"}'], edges=[b"src\trelation\tdst"],
                                    queries=None, error=("nodes.jsonl", 1)),
    "edge src of 5000 digits": _with(edges=[b"src\trelation\tdst", b"1" * 5000 + b"\tr\t1"], error=("edges.tsv", 2)),
    "query id of 5000 digits": _with(queries=[HEADER, b"1" * 5000 + b",who?,[1],val\n"], error=("queries.csv", 2)),
    "answer id of 5000 digits": _with(queries=[HEADER, b'1,who?,"[' + b"1" * 5000 + b']",val\n'],
                                      error=("queries.csv", 2)),
    "id with 5000 leading zeros": _with(edges=[b"src\trelation\tdst", b"0" * 5000 + b"1\ttarget\t2"],
                                        queries=[HEADER, b"0" * 5000 + b'10,"What targets\nPTGS2?",[1],train\n'],
                                        want=BASELINE_ROWS),
    "quote never closed": _with(queries=[HEADER, b'1,who?,[1],"val\n'], error=("queries.csv", 2)),
    "text after a closing quote": _with(queries=[HEADER, b'1,"who"?,[1],val\n'], error=("queries.csv", 2)),
}


@pytest.mark.parametrize("case", FOUND)
def test_input_the_properties_found_loads_or_fails_cleanly(load_conn, case):
    check_load(load_conn, FOUND[case], "skb", "replace")


@pytest.mark.parametrize("node", [{"id": 1, "type": "a\\nb"}, {"id": 1, "type": "a\\\\b"}, {"id": 1, "type": "a\tb"},
                                  {"id": 1, "type": "a\nb"}, {"id": 1, "type": "t", "fields": {"f\\tx": "body"}},
                                  {"id": 1, "type": "t", "fields": {"f\nx": "body"}}])
def test_type_and_field_names_are_stored_verbatim(load_conn, node):
    bundle = Bundle(nodes=[jsonl(node)], edges=[b"src\trelation\tdst"], queries=None,
                    want={"nodes": [(1, node["type"], None, None)], "edges": [], "queries": [],
                          "fields": [(1, k, v) for k, v in node.get("fields", {}).items()]})
    check_load(load_conn, bundle, "skb", "replace")
