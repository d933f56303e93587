"""Relation templates as data, checked against an SKB and compiled to one SQL statement each.

STaRK builds its questions from relation templates (a metapath from one or two anchor entities to the
answer: "drugs that target the genes expressed in <anatomy>"): each instantiation of the anchors gives a
set of candidate answers. Here a template is a YAML entry (the shipped files are STaRK's, under
`templates/`; users add their own with `--templates FILE`): anchors by name and node type, the answer's
type, paths of typed hops from an anchor to the answer, an optional `without` (STaRK's [!relation]) and
the question pattern. Compiling one gives a statement that returns every instantiation with its
answers, read by the sampler (pipeline.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import psycopg
import yaml
from psycopg import sql as pgsql

from stark_pg.resources import template_sections

SHIPPED = ("prime", "mag", "amazon")
_SLOT = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")


class TemplateError(ValueError):
    """A template file or template that cannot be used: the message names the file and the template."""


@dataclass(frozen=True)
class Hop:
    relation: str
    to: str                      # the node type reached
    direction: str = "out"       # out: the edge is stored from the node before to the node reached


@dataclass(frozen=True)
class Path_:
    start: str                   # an anchor's name
    hops: tuple[Hop, ...]


@dataclass(frozen=True)
class Without:
    relation: str
    type: str
    direction: str = "in"        # in: the excluded edge is stored from a node of `type` to the answer


@dataclass(frozen=True)
class Template:
    id: str
    anchors: dict[str, str]      # name -> node type, in the pattern's order
    answer: str                  # the answer's node type
    paths: tuple[Path_, ...]
    question: str
    without: tuple[Without, ...] = ()
    source: str = ""             # the file it came from

    @property
    def hops(self) -> int:
        """The longest path's hops: 1 is a one-hop question, more is multi-hop."""
        return max(len(p.hops) for p in self.paths)

    @property
    def relations(self) -> set[str]:
        return {h.relation for p in self.paths for h in p.hops} | {w.relation for w in self.without}

    @property
    def types(self) -> set[str]:
        return set(self.anchors.values()) | {self.answer} | {h.to for p in self.paths for h in p.hops} | {
            w.type for w in self.without}

    def question_for(self, names: dict[str, str]) -> str:
        """The pattern with each <anchor> slot filled with that anchor's name."""
        return _SLOT.sub(lambda m: names[m.group(1)], self.question)


@dataclass(frozen=True)
class Role:
    """Whose voice a question with textual requirements takes (STaRK's roles: Prime's doctor, medical
    scientist and patient; MAG's searcher of arXiv; Amazon's customer)."""
    name: str
    instruction: str


DEFAULT_ROLES = (Role("user of this knowledge base",
                      "Ask as someone who knows what they need but not which entry has it."),)


@dataclass
class TemplateSet:
    dataset: str
    templates: list[Template] = field(default_factory=list)
    roles: tuple[Role, ...] = DEFAULT_ROLES
    negatives: bool = False          # the extraction also lists what the answer lacks (Amazon's reviews)


def shipped_path(dataset: str) -> Path:
    return Path(str(resources.files("stark_pg.synthesize") / "templates" / f"{dataset}.yaml"))


def load_templates(path: Path) -> TemplateSet:
    """Parse and check a template file; a TemplateError names the file (and template) otherwise."""
    label = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TemplateError(f"{label}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise TemplateError(f"{label}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("templates"), list):
        raise TemplateError(f"{label}: expected a mapping with a `templates` list")
    unknown = set(data) - {"dataset", "templates", "roles", "negatives"}
    if unknown:
        raise TemplateError(f"{label}: unknown key(s) {', '.join(sorted(unknown))} (expected dataset, templates, "
                            "roles, negatives)")
    found = TemplateSet(dataset=str(data.get("dataset") or Path(path).stem), roles=_roles(data.get("roles"), label),
                        negatives=bool(data.get("negatives", False)))
    seen: set[str] = set()
    for position, entry in enumerate(data["templates"], start=1):
        template = _template(entry, f"{label}: template {position}", label)
        if template.id in seen:
            raise TemplateError(f"{label}: template {template.id!r} is defined twice")
        seen.add(template.id)
        found.templates.append(template)
    if not found.templates:
        raise TemplateError(f"{label}: no templates")
    return found


def _roles(raw, label: str) -> tuple[Role, ...]:
    if raw is None:
        return DEFAULT_ROLES
    if not isinstance(raw, list) or not raw or not all(
            isinstance(r, dict) and isinstance(r.get("name"), str) and r["name"].strip()
            and isinstance(r.get("instruction"), str) and set(r) <= {"name", "instruction"} for r in raw):
        raise TemplateError(f"{label}: `roles` must be a list of {{name, instruction}} (both text)")
    return tuple(Role(r["name"].strip(), r["instruction"].strip()) for r in raw)


def _template(entry, where: str, source: str) -> Template:
    if not isinstance(entry, dict):
        raise TemplateError(f"{where}: expected a mapping")
    ident = entry.get("id")
    if not isinstance(ident, str) or not ident.strip():
        raise TemplateError(f"{where}: needs an `id`")
    where = f"{source}: template {ident!r}"
    unknown = set(entry) - {"id", "anchors", "answer", "paths", "question", "without"}
    if unknown:
        raise TemplateError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    anchors = entry.get("anchors")
    if not isinstance(anchors, dict) or not 1 <= len(anchors) <= 2 or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in anchors.items()):
        raise TemplateError(f"{where}: `anchors` must map one or two anchors' names to their node types")
    answer = entry.get("answer")
    if not isinstance(answer, str) or not answer:
        raise TemplateError(f"{where}: needs the `answer`'s node type")
    raw_paths = entry.get("paths")
    if not isinstance(raw_paths, list) or not raw_paths:
        raise TemplateError(f"{where}: needs `paths`, each from an anchor to the answer")
    paths = []
    for number, raw in enumerate(raw_paths, start=1):
        if not isinstance(raw, dict) or not isinstance(raw.get("hops"), list) or not raw["hops"]:
            raise TemplateError(f"{where}: path {number} needs `from` (an anchor) and `hops`")
        start = raw.get("from")
        if start not in anchors:
            raise TemplateError(f"{where}: path {number} starts at {start!r}, which is not an anchor "
                                f"({', '.join(anchors)}): a path with no anchor admits every node")
        hops = tuple(_hop(h, f"{where}: path {number} hop {i}") for i, h in enumerate(raw["hops"], start=1))
        if hops[-1].to != answer:
            raise TemplateError(f"{where}: path {number} ends at {hops[-1].to!r}, not at the answer type {answer!r}")
        paths.append(Path_(start, hops))
    unused = set(anchors) - {p.start for p in paths}
    if unused:
        raise TemplateError(f"{where}: anchor(s) {', '.join(sorted(unused))} start no path")
    without = tuple(_without(w, f"{where}: without {i}") for i, w in enumerate(entry.get("without") or [], start=1))
    question = entry.get("question")
    if not isinstance(question, str) or not question.strip():
        raise TemplateError(f"{where}: needs a `question` pattern")
    slots = set(_SLOT.findall(question))
    if slots != set(anchors):
        raise TemplateError(f"{where}: the question's slots {sorted(slots)} must be its anchors {sorted(anchors)}")
    return Template(ident, dict(anchors), answer, tuple(paths), question.strip(), without, source)


def _hop(raw, where: str) -> Hop:
    if not isinstance(raw, dict) or not isinstance(raw.get("relation"), str) or not isinstance(raw.get("to"), str):
        raise TemplateError(f"{where}: needs `relation` and `to` (a node type)")
    direction = raw.get("direction", "out")
    if direction not in ("out", "in"):
        raise TemplateError(f"{where}: direction must be out or in, not {direction!r}")
    return Hop(raw["relation"], raw["to"], direction)


def _without(raw, where: str) -> Without:
    if not isinstance(raw, dict) or not isinstance(raw.get("relation"), str) or not isinstance(raw.get("type"), str):
        raise TemplateError(f"{where}: needs `relation` and `type`")
    direction = raw.get("direction", "in")
    if direction not in ("out", "in"):
        raise TemplateError(f"{where}: direction must be out or in, not {direction!r}")
    return Without(raw["relation"], raw["type"], direction)


# --- the SKB's vocabulary --------------------------------------------------------------------------

def vocabulary(conn: psycopg.Connection, skb_id: int) -> tuple[set[str], set[str]]:
    """The SKB's relation names and node types."""
    from stark_pg.resources import queries

    relations = {r[0] for r in queries().synth_relations(conn, skb_id=skb_id)}
    types = {r[0] for r in queries().synth_node_types(conn, skb_id=skb_id)}
    return relations, types


def missing(template: Template, relations: set[str], types: set[str]) -> list[str]:
    """What the SKB lacks for this template (empty: it can be instantiated)."""
    lacks = [f"relation {r!r}" for r in sorted(template.relations - relations)]
    return lacks + [f"node type {t!r}" for t in sorted(template.types - types)]


# --- compiling ----------------------------------------------------------------------------------------

def compile_sql(template: Template) -> pgsql.Composed:
    """One statement returning (anchors bigint[], answers bigint[]) per instantiation, %(skb)s bound."""
    sections = template_sections("synthesize.sql")
    names = list(template.anchors)
    ctes, joined = [], []
    for number, path in enumerate(template.paths):
        alias = f"n{number}_"
        hops = []
        prev = f"{alias}0"
        for step, hop in enumerate(path.hops, start=1):
            node = f"{alias}{step}"
            hops.append(pgsql.SQL(sections["hop_out" if hop.direction == "out" else "hop_in"]).format(
                edge=pgsql.Identifier(f"e{number}_{step}"), prev=pgsql.Identifier(prev), node=pgsql.Identifier(node),
                relation=pgsql.Literal(hop.relation), type=pgsql.Literal(hop.to)))
            prev = node
        ctes.append(pgsql.SQL(sections["path"]).format(
            name=pgsql.Identifier(f"p{number}"), start=pgsql.Identifier(f"{alias}0"), finish=pgsql.Identifier(prev),
            hops=pgsql.SQL("\n    ").join(hops), type=pgsql.Literal(template.anchors[path.start])))
        joined.append(number)
    first = pgsql.Identifier("p0")
    answer = pgsql.SQL("{}.answer").format(first)
    anchor_of = {}                      # anchor name -> the first path column holding it
    conditions: list[pgsql.Composable] = []
    froms: list[pgsql.Composable] = [first]
    for number, path in enumerate(template.paths):
        column = pgsql.SQL("{}.anchor").format(pgsql.Identifier(f"p{number}"))
        if number:
            on = [pgsql.SQL("{}.answer = {}").format(pgsql.Identifier(f"p{number}"), answer)]
            if path.start in anchor_of:
                on.append(pgsql.SQL("{} = {}").format(column, anchor_of[path.start]))
            froms.append(pgsql.SQL("join {} on {}").format(pgsql.Identifier(f"p{number}"), pgsql.SQL(" and ").join(on)))
        anchor_of.setdefault(path.start, column)
    anchor_columns = [anchor_of[name] for name in names]
    for column in anchor_columns:
        conditions.append(pgsql.SQL("{} <> {}").format(answer, column))
    if len(names) == 2:
        # two anchors whose paths are alike (drug1, drug2 sharing a carrier) give each pair once
        alike = [tuple(p.hops) for p in template.paths if p.start == names[0]] == [
            tuple(p.hops) for p in template.paths if p.start == names[1]]
        conditions.append(pgsql.SQL("{} < {}" if alike else "{} <> {}").format(*anchor_columns))
    for w in template.without:
        conditions.append(pgsql.SQL(sections["without_in" if w.direction == "in" else "without_out"]).format(
            answer=answer, relation=pgsql.Literal(w.relation), type=pgsql.Literal(w.type)))
    return pgsql.SQL(sections["instantiations"]).format(
        paths=pgsql.SQL(",\n").join(ctes), anchors=pgsql.SQL(", ").join(anchor_columns), answer=answer,
        joined=pgsql.SQL("\n").join(froms), conditions=pgsql.SQL(" and ").join(conditions),
        anchor_columns=pgsql.SQL(", ").join(anchor_columns))


def instantiations(conn: psycopg.Connection, skb_id: int, template: Template) -> list[tuple[list[int], list[int]]]:
    """Every instantiation of the template on the SKB: (anchor ids in the template's order, answer ids)."""
    return [(list(a), list(b)) for a, b in conn.execute(compile_sql(template), {"skb": skb_id})]
