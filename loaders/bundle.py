"""The portable bundle: stark-pg's documented import format for custom SKBs.

A directory holding
- `nodes.jsonl`: one JSON object a line, `{"id": int, "type": str, "name": str, "fields": {str: str}}`,
  optionally `"attrs": {...}` for non-text attributes;
- `edges.tsv`: a `src<TAB>relation<TAB>dst` header, then one typed edge a line;
- `queries.csv` (optional): `id,query,answer_ids[,split]`, answer ids as a JSON list.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterator

from loaders.queries_csv import read_queries
from loaders.textfiles import decoded_lines, parse_int
from stark_pg.skb.records import LoadError, Node, Query

NODE_KEYS = {"id", "type", "name", "fields", "attrs"}
EDGE_HEADER = ["src", "relation", "dst"]


def is_bundle(path: Path) -> bool:
    return path.is_dir() and (path / "nodes.jsonl").is_file()


class BundleSource:
    format = "bundle"
    nodes_label = "nodes.jsonl"
    edges_label = "edges.tsv"
    queries_label = "queries.csv"

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        if not is_bundle(self.directory):
            raise LoadError(f"{self.directory} is not a bundle: it has no nodes.jsonl")
        if not (self.directory / "edges.tsv").is_file():
            raise LoadError(f"{self.directory} has no edges.tsv", "edges.tsv")
        self.location = str(self.directory.resolve())
        self.default_name = self.directory.resolve().name
        self.meta: dict = {}

    def nodes(self) -> Iterator[tuple[int, Node]]:
        label = self.nodes_label
        for line, text in decoded_lines(self.directory / "nodes.jsonl", label):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                # json's own message may end in "at" ("Unterminated string starting at"): say it once
                what = exc.msg.removesuffix(" at")
                raise LoadError(f"malformed JSON ({what} at column {exc.colno})", label, line) from None
            except RecursionError:
                raise LoadError("JSON nested too deeply", label, line) from None
            except ValueError:          # an integer longer than Python converts (sys.get_int_max_str_digits)
                limit = sys.get_int_max_str_digits()
                raise LoadError(f"a number has more than {limit} digits", label, line) from None
            yield line, _node(obj, label, line)

    def edges(self) -> Iterator[tuple[int, int, str, int]]:
        label = self.edges_label
        lines = decoded_lines(self.directory / "edges.tsv", label)
        _, header = next(lines)
        if header.split("\t") != EDGE_HEADER:
            raise LoadError(f"header must be {'<TAB>'.join(EDGE_HEADER)}, found {header[:80]!r}", label, 1)
        for line, text in lines:
            if not text:
                continue
            parts = text.split("\t")
            if len(parts) != 3:
                raise LoadError(f"expected 3 tab-separated columns, found {len(parts)}", label, line)
            src, relation, dst = parts
            if not relation:
                raise LoadError("empty relation", label, line)
            yield line, parse_int(src, "src", label, line), relation, parse_int(dst, "dst", label, line)

    def queries(self) -> Iterator[tuple[int, Query]]:
        path = self.directory / "queries.csv"
        if path.is_file():
            yield from read_queries(path, self.queries_label)


def _node(obj, label: str, line: int) -> Node:
    if not isinstance(obj, dict):
        raise LoadError("each line must be a JSON object", label, line)
    extra = set(obj) - NODE_KEYS
    if extra:
        raise LoadError(f"unexpected keys {sorted(extra)} (allowed: {sorted(NODE_KEYS)})", label, line)
    for key in ("id", "type"):
        if key not in obj:
            raise LoadError(f"missing key {key!r}", label, line)
    node_id = obj["id"]
    if not isinstance(node_id, int) or isinstance(node_id, bool):
        raise LoadError(f"id {node_id!r} is not an integer", label, line)
    node_type, name = obj["type"], obj.get("name")
    if not isinstance(node_type, str) or not node_type:
        raise LoadError(f"type {node_type!r} is not a non-empty string", label, line)
    if name is not None and not isinstance(name, str):
        raise LoadError(f"name {name!r} is not a string", label, line)
    fields = obj.get("fields") or {}
    if not isinstance(fields, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items()):
        raise LoadError("fields must be an object of strings", label, line)
    attrs = obj.get("attrs")
    if attrs is not None and not isinstance(attrs, dict):
        raise LoadError("attrs must be an object", label, line)
    return Node(node_id=node_id, type=node_type, name=name, fields=fields, attrs=attrs)
