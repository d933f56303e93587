"""The packages of stark_pg import one way: down the layers below, never up, and never in a cycle.

Why: a search must not walk through the training code, an evaluation must not pick its methods itself
(the CLI and the API hand it `stark_pg.retrieve.get_method`), and a module low in the stack must stay
importable, and testable, without everything above it. The order, top first:

    the package root | __main__    the facade over api (`stark_pg.connect`) | `python -m stark_pg`
    cli                     the commands
    serve                   `stark-pg serve`'s web application: pages and a JSON API over api's code paths
    api                     the Python API (stark_pg.connect, ...)
    loading                 from a source to a loaded SKB, shared by `stark-pg load` and the API
    train                   fitting models; evaluates them with eval, ranks training questions with retrieve
    eval | retrieve         methods it is handed, run over query sets; metrics, reports | the search methods
    models                  trained models as a search loads and scores them
    index                   building the lexical, dense and graph indexes
    embed                   text to vectors
    llm | skb               LLM and embedding-API calls | the SKB's records, catalog and loading
    db                      connections, the embedded server, migrations
    config | resources | options | progress | ranking    settings, SQL files, option parsing, progress, Ranking

Siblings on one line (`|`) import neither each other. Every import statement counts, the ones inside
functions too (a lazy import is still a dependency), and so does importlib.import_module("stark_pg...").
The version string may be read from the package root (`from stark_pg import __version__`), which is
otherwise the facade over api and sits on top.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "stark_pg"

LAYERS: list[tuple[str, ...]] = [
    ("stark_pg", "stark_pg.__main__"),
    ("stark_pg.cli",),
    ("stark_pg.serve",),
    ("stark_pg.results",),
    ("stark_pg.api",),
    ("stark_pg.loading",),
    ("stark_pg.train", "stark_pg.synthesize"),
    ("stark_pg.eval", "stark_pg.retrieve"),
    ("stark_pg.models",),
    ("stark_pg.index",),
    ("stark_pg.embed",),
    ("stark_pg.llm", "stark_pg.skb"),
    ("stark_pg.db",),
    ("stark_pg.config", "stark_pg.resources", "stark_pg.options", "stark_pg.progress", "stark_pg.ranking"),
]
FACADE_NAMES = {"__version__"}     # what any module may import from the package root

KNOWN_CYCLES: list[list[str]] = []
"""Cycles inside one package that predate the check; a new one fails it, and so does fixing one of these
(take it off the list)."""


def module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, root: Path) -> bool:
    rel = Path(*name.split(".")[1:])
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def imports(path: Path, root: Path) -> list[tuple[str, int]]:
    """(module imported, line) for every import of the package in `path`, wherever the statement is."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = root.name
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == top]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != top:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if is_module(sub, root):
                    out.append((sub, node.lineno))
                elif not (target == top and alias.name in FACADE_NAMES):
                    out.append((target, node.lineno))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.split(".")[0] == top):
            out.append((node.args[0].value, node.lineno))
    return sorted(out)


def layer_of(module: str, layers) -> tuple[int, str] | None:
    """(layer index, component) of a module: the longest component name it falls under."""
    best = None
    for i, components in enumerate(layers):
        for c in components:
            if (module == c or module.startswith(c + ".")) and (best is None or len(c) > len(best[1])):
                best = (i, c)
    return best


def graph(root: Path) -> dict[str, list[tuple[str, int]]]:
    return {module_name(p, root): imports(p, root) for p in sorted(root.rglob("*.py"))}


def violations(root: Path, layers=LAYERS) -> list[str]:
    """Every import that runs up a layer or sideways between siblings, and every module that no layer holds."""
    found = []
    for module, targets in graph(root).items():
        here = layer_of(module, layers)
        if here is None:
            found.append(f"{module}: in no layer (add it to LAYERS in tests/test_layers.py)")
            continue
        for target, line in targets:
            there = layer_of(target, layers)
            if there is None or there[1] == here[1]:
                continue
            if there[0] < here[0]:
                found.append(f"{module}:{line} imports {target}, a layer above ({there[1]} over {here[1]})")
            elif there[0] == here[0]:
                found.append(f"{module}:{line} imports {target}, a sibling ({there[1]} beside {here[1]})")
    return found


def cycles(root: Path) -> list[list[str]]:
    """Groups of modules that import each other, directly or round a loop (Tarjan's strongly connected
    components of the import graph, lazy imports included)."""
    edges = {m: sorted({t for t, _ in targets if t != m}) for m, targets in graph(root).items()}
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return sorted(out)


def test_every_import_runs_down_the_layers():
    assert violations(ROOT) == []


def test_no_import_cycles_beyond_the_known_ones():
    assert cycles(ROOT) == KNOWN_CYCLES


def test_the_check_finds_an_upward_import_a_lazy_one_and_a_cycle(tmp_path):
    """The checks above can fail: a small package with an import up a layer (inside a function, as
    lazy imports are written), one between siblings, and a cycle."""
    pkg = tmp_path / "stark_pg"
    for name, text in {
        "__init__.py": "",
        "retrieve/__init__.py": "from stark_pg.models import fusion\n",
        "models/__init__.py": "",
        "models/fusion.py": "def load():\n    from stark_pg.retrieve import get_method\n",
        "llm/__init__.py": "from stark_pg.skb import records\n",
        "skb/__init__.py": "",
        "skb/records.py": "import importlib\nimportlib.import_module('stark_pg.skb.other')\n",
        "skb/other.py": "from . import records\n",
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(textwrap.dedent(text))
    layers = [("stark_pg.retrieve",), ("stark_pg.models",), ("stark_pg.llm", "stark_pg.skb"), ("stark_pg",)]
    assert violations(pkg, layers) == [
        "stark_pg.llm:1 imports stark_pg.skb.records, a sibling (stark_pg.skb beside stark_pg.llm)",
        "stark_pg.models.fusion:2 imports stark_pg.retrieve, a layer above (stark_pg.retrieve over stark_pg.models)",
    ]
    assert cycles(pkg) == [["stark_pg.models.fusion", "stark_pg.retrieve"], ["stark_pg.skb.other", "stark_pg.skb.records"]]
