"""Recorded results: the figures the docs report, as data (results/SKB.yaml), and the tables made from them.

One YAML file per SKB holds, per method and setting, the `stark-pg eval` command that measured it, the
split, the date, the stark-pg version, the figures it gave (Hit@1, Hit@5, R@20, MRR; latency p50/p95
and LLM seconds a question where recorded) and where the docs discuss it. The result tables of the
README and of the docs pages are rendered from these files between marker comments:

    <!-- results stark-prime-ibd methods: generated from results/stark-prime-ibd.yaml by python -m stark_pg.results --write -->
    | method | ... |
    <!-- end results -->

so a figure is typed once. `python -m stark_pg.results --write` regenerates every marked table;
tests/test_results.py fails when a checked-in table differs from what its file renders.
`stark-pg reproduce SKB` re-runs the rows' commands and compares (stark_pg/cli/reproduce.py).

A malformed file is one `ResultsError` line naming the file and line.
"""

from __future__ import annotations

import argparse
import datetime
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "results"
METRICS = ("hit@1", "hit@5", "recall@20", "mrr")
KINDS = {
    "exact": "the same data, index and settings give the same rankings: checked to the tolerance",
    "trained": "scores a stored trained model: checked to the tolerance when that model is the one measured",
    "llm": "an LLM's answers: compared for information only (a new call may answer differently)",
}
ROW_KEYS = {"id", "command", "split", "kind", "date", "version", "metrics", "latency_ms", "llm_s_per_question",
            "source", "note", "shown"}
ROW_TEXT = ("id", "command", "split", "kind", "date", "version", "source", "note")
REQUIRED = ("id", "command", "split", "kind", "date", "version", "metrics")
MARKER = re.compile(r"^<!-- results (?P<skb>[\w.+-]+) (?P<table>[\w.+-]+):[^>]*-->\n(?P<body>.*?)<!-- end results -->",
                    re.S | re.M)
PLACEHOLDER = re.compile(r"\{(?P<row>[\w.+=-]+):(?P<metric>[\w@]+)\}")


class ResultsError(ValueError):
    """A results file that cannot be read, or a table that cannot be rendered: one line naming file:line."""


@dataclass
class Row:
    id: str
    command: str
    split: str
    kind: str
    date: str
    version: str
    metrics: dict[str, float]
    latency_ms: dict[str, float] = field(default_factory=dict)
    llm_s_per_question: float | None = None
    source: str = ""
    note: str = ""
    shown: dict[str, dict] = field(default_factory=dict)
    line: int = 0

    def args(self) -> list[str]:
        """The command's arguments after `stark-pg`."""
        return shlex.split(self.command)[1:]


@dataclass
class Results:
    path: Path
    skb: str
    rows: list[Row]
    tables: dict[str, dict]

    def row(self, row_id: str) -> Row:
        for row in self.rows:
            if row.id == row_id:
                return row
        raise ResultsError(f"{self.path}: no row {row_id!r} (rows: {', '.join(r.id for r in self.rows)})")


class _Mapping(dict):
    line = 0


def _loader():
    import yaml

    class LineLoader(yaml.SafeLoader):
        """A mapping remembers the line it starts on; dates stay text (YYYY-MM-DD as written)."""

        def construct_mapping(self, node, deep=False):
            mapping = _Mapping(super().construct_mapping(node, deep=deep))
            mapping.line = node.start_mark.line + 1
            return mapping

    LineLoader.add_constructor("tag:yaml.org,2002:map", LineLoader.construct_mapping)
    LineLoader.add_constructor("tag:yaml.org,2002:timestamp", LineLoader.construct_yaml_str)
    return LineLoader


def path_for(skb: str) -> Path:
    return RESULTS_DIR / f"{skb}.yaml"


def load(path: Path | str) -> Results:
    """Read and check a results file; every problem is a ResultsError naming `path:line`."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read the results file ({exc.strerror or exc})") from None
    try:
        data = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ResultsError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None

    def bad(node, message: str):
        raise ResultsError(f"{path}:{getattr(node, 'line', 1) or 1}: {message}")

    if not isinstance(data, dict):
        bad(data, "the file must be a mapping with skb, tables and results")
    unknown = set(data) - {"skb", "split", "questions", "tables", "results"}
    if unknown:
        bad(data, f"unknown top-level keys {sorted(unknown)} (skb, split, questions, tables, results)")
    skb = data.get("skb")
    if not isinstance(skb, str) or not skb:
        bad(data, "'skb' (the SKB's name) is missing")
    if skb != path.stem:
        bad(data, f"skb {skb!r} differs from the file's name ({path.stem}.yaml)")
    tables = data.get("tables") or {}
    if not isinstance(tables, dict):
        bad(data, "'tables' must map a table's name to its columns")
    for name, table in tables.items():
        if not isinstance(table, dict) or not isinstance(table.get("columns"), list) or not table["columns"]:
            bad(table if isinstance(table, dict) else data, f"table {name!r} needs a list of columns")
        for column in table["columns"]:
            if not isinstance(column, dict) or "title" not in column or len({"text", "metric", "value"} & set(column)) != 1:
                bad(column if isinstance(column, dict) else table,
                    f"table {name!r}: a column is {{title, and one of text, metric, value}}")
            if "row" in column and ("metric" not in column or "{id}" not in str(column["row"])):
                bad(column, f"table {name!r}: a column's row names another row of a metric, like {{id}}-train")
            if column.get("value") not in (None, "p50", "p95", "llm_s_per_question"):
                bad(column, f"table {name!r}: value {column['value']!r} is not one of p50, p95, llm_s_per_question")
        if table.get("rows") is not None and table["rows"] != "all" and not isinstance(table["rows"], list):
            bad(table, f"table {name!r}: rows must list row ids, or be all")
    raw_rows = data.get("results")
    if not isinstance(raw_rows, list) or not raw_rows:
        bad(data, "'results' must be a list of rows")
    rows, seen = [], set()
    for raw in raw_rows:
        if not isinstance(raw, dict):
            bad(data, f"a row must be a mapping, not {raw!r}")
        unknown = set(raw) - ROW_KEYS
        if unknown:
            bad(raw, f"row {raw.get('id', '?')!r}: unknown keys {sorted(unknown)} ({', '.join(sorted(ROW_KEYS))})")
        missing = [k for k in REQUIRED if raw.get(k) in (None, "", {})]
        if missing:
            bad(raw, f"row {raw.get('id', '?')!r}: missing {', '.join(missing)}")
        row_id = str(raw["id"])
        if row_id in seen:
            bad(raw, f"row id {row_id!r} appears twice")
        seen.add(row_id)
        if raw["kind"] not in KINDS:
            bad(raw, f"row {row_id!r}: kind {raw['kind']!r} is not one of {', '.join(KINDS)}")
        try:
            datetime.date.fromisoformat(str(raw["date"]))
        except ValueError:
            bad(raw, f"row {row_id!r}: date {raw['date']!r} is not YYYY-MM-DD")
        args = shlex.split(str(raw["command"]))
        if args[:2] != ["stark-pg", "eval"] or len(args) < 3 or args[2] != skb:
            bad(raw, f"row {row_id!r}: command must be `stark-pg eval {skb} ...`, not {raw['command']!r}")
        split = _option_value(args, "--split") or "val"
        if split != str(raw["split"]):
            bad(raw, f"row {row_id!r}: split {raw['split']!r} differs from the command's --split {split}")
        metrics = raw["metrics"]
        if not isinstance(metrics, dict):
            bad(raw, f"row {row_id!r}: metrics must map a metric to its value")
        for name, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                bad(metrics, f"row {row_id!r}: metric {name} must be a number from 0 to 1, not {value!r}")
        latency = raw.get("latency_ms") or {}
        if not isinstance(latency, dict) or set(latency) - {"p50", "p95"} or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in latency.values()):
            bad(latency if isinstance(latency, dict) else raw,
                f"row {row_id!r}: latency_ms holds p50 and p95, numbers of milliseconds")
        llm = raw.get("llm_s_per_question")
        if llm is not None and (isinstance(llm, bool) or not isinstance(llm, (int, float))):
            bad(raw, f"row {row_id!r}: llm_s_per_question must be a number, not {llm!r}")
        shown = raw.get("shown") or {}
        if not isinstance(shown, dict):
            bad(raw, f"row {row_id!r}: shown maps a table's name to the row's cells there")
        for table_name, cells in shown.items():
            if table_name not in tables:
                bad(shown, f"row {row_id!r}: shown in table {table_name!r}, which 'tables' does not define")
            if not isinstance(cells, dict):
                bad(shown, f"row {row_id!r}: its cells in table {table_name!r} must be a mapping")
        rows.append(Row(id=row_id, command=str(raw["command"]), split=str(raw["split"]), kind=raw["kind"],
                        date=str(raw["date"]), version=str(raw["version"]),
                        metrics={k: float(v) for k, v in metrics.items()},
                        latency_ms={k: float(v) for k, v in latency.items()}, llm_s_per_question=llm,
                        source=str(raw.get("source") or ""), note=str(raw.get("note") or ""),
                        shown=shown, line=raw.line))
    results = Results(path=path, skb=skb, rows=rows, tables=tables)
    for name, table in tables.items():
        for row_id in table.get("rows") if isinstance(table.get("rows"), list) else []:
            if str(row_id) not in seen:
                bad(table, f"table {name!r} lists row {row_id!r}, which 'results' does not hold")
    for name, table in tables.items():
        listed = table.get("rows")
        shown_rows = (rows if listed == "all" else [results.row(str(r)) for r in listed] if listed
                      else [r for r in rows if name in r.shown])
        for column in table["columns"]:
            for row in shown_rows if "row" in column else []:
                other = column["row"].format(id=row.id)
                if other not in seen:
                    bad(column, f"table {name!r}, column {column['title']!r}: row {row.id!r} needs a row {other!r}")
    for row in rows:                       # placeholders name rows and metrics that exist
        for cells in row.shown.values():
            for value in cells.values():
                for match in PLACEHOLDER.finditer(str(value)):
                    _figure(results, match["row"], match["metric"], row.line)
    return results


def _option_value(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _figure(results: Results, row_id: str, metric: str, line: int) -> str:
    row = next((r for r in results.rows if r.id == row_id), None)
    if row is None:
        raise ResultsError(f"{results.path}:{line}: {{{row_id}:{metric}}} names no row")
    if metric in row.metrics:
        return f"{row.metrics[metric]:.3f}"
    if metric in ("p50", "p95") and metric in row.latency_ms:
        return f"{row.latency_ms[metric]:g}"
    raise ResultsError(f"{results.path}:{line}: row {row_id!r} records no {metric}")


def render_table(results: Results, name: str) -> str:
    """The Markdown table `name`: its columns, one line per row shown in it, in the file's order."""
    if name not in results.tables:
        raise ResultsError(f"{results.path}: no table {name!r} (tables: {', '.join(results.tables)})")
    columns = results.tables[name]["columns"]
    lines = ["| " + " | ".join(c["title"] for c in columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    order = results.tables[name].get("rows")
    if order == "all":
        chosen = list(results.rows)
    else:
        chosen = [results.row(r) for r in order] if order else [r for r in results.rows if name in r.shown]
    for row in chosen:                     # a row listed in `rows` may have no cells of its own there
        cells = row.shown.get(name) or {}
        bold = set(cells.get("bold") or [])
        out = []
        for column in columns:
            if "text" in column:
                key = column["text"]
                value = str(cells.get(key, "") or "")
                if not value and key in ROW_TEXT:               # the row's own id, kind, date, ...
                    value = f"`{getattr(row, key)}`" if key == "command" else str(getattr(row, key))
                value = PLACEHOLDER.sub(lambda m: _figure(results, m["row"], m["metric"], row.line), value)
            elif "metric" in column:
                metric = column["metric"]
                # the figure of another row ("row": "{id}-train": the same method on train), or a cell of
                # the row's own (e.g. "see page") in place of the figure
                source = results.row(column["row"].format(id=row.id)) if "row" in column else row
                value = str(cells[metric]) if metric in cells and "row" not in column else (
                    f"{source.metrics[metric]:.3f}" if metric in source.metrics else "")
                if value and (column["title"] in bold or (metric in bold and "row" not in column)):
                    value = f"**{value}**"
            else:
                key = column["value"]
                number = row.latency_ms.get(key) if key in ("p50", "p95") else getattr(row, key, None)
                value = "" if number is None else format(number, column.get("format", ".1f" if key == "llm_s_per_question" else "g"))
                value += str(cells.get(f"{key}_after", "") or "")
            out.append(value)
        lines.append("|" + "".join(f" {cell} |" if cell else " |" for cell in out))
    return "\n".join(lines) + "\n"


def pages(root: Path = ROOT) -> list[Path]:
    """The Markdown pages that may hold generated tables: the README and docs/ (history included)."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def regenerate(text: str, where: str = "page", results_dir: Path = RESULTS_DIR) -> str:
    """The page's text with every marked table rendered anew from its results file."""
    cache: dict[str, Results] = {}

    def replace(match: re.Match) -> str:
        skb = match["skb"]
        if skb not in cache:
            cache[skb] = load(results_dir / f"{skb}.yaml")
        head = match.group(0)[: match.start("body") - match.start()]
        return head + render_table(cache[skb], match["table"]) + "<!-- end results -->"

    opened = len(re.findall(r"^<!-- results ", text, flags=re.M))
    if opened != len(MARKER.findall(text)):
        raise ResultsError(f"{where}: a `<!-- results SKB TABLE: ... -->` marker has no `<!-- end results -->`")
    return MARKER.sub(replace, text)


def stale_pages(root: Path = ROOT) -> list[Path]:
    return [page for page in pages(root)
            if regenerate(page.read_text(encoding="utf-8"), str(page.relative_to(root)), root / "results")
            != page.read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the result tables of README.md and docs/ from results/*.yaml: "
                                                 "list the pages that differ, or --write them.")
    parser.add_argument("--write", action="store_true", help="rewrite the pages whose tables differ")
    args = parser.parse_args(argv)
    try:
        stale = stale_pages()
        for page in stale:
            if args.write:
                page.write_text(regenerate(page.read_text(encoding="utf-8"), str(page)), encoding="utf-8")
            print(f"{'wrote' if args.write else 'differs'}: {page.relative_to(ROOT)}")
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    raise SystemExit(main())
