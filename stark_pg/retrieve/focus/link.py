"""Step 2a of 4StepFocus, Prepare (the paper's Algorithm 3): constants linked to nodes, triplets
that cannot be used dropped, what is left turned into a substitution problem.

Linking a constant (an entity name the LLM copied from the question):
1. nodes whose normalised name (stark.focus_normalize: lower case, punctuation as spaces) equals the
   constant's, of the constant's type if any such node has it, else of any type;
2. failing that, the one best node among a shortlist from the database (same lower-cased name, or
   the best BM25 matches over names; stark.focus_name_candidates) whose name is similar enough by
   string similarity (difflib's ratio, as the paper's code used) or by embedding cosine similarity
   (names embedded on the fly, so no name index is needed), the constant's type preferred;
3. otherwise the constant is not linked, and its triplets are dropped.
Before linking, a constant must be named in the question (`grounded`): small models copy entities
from the prompt's examples into their triplets, and such a constant links to a real node that has
nothing to do with the question.
Triplets between two constants are skipped (nothing to substitute), unknown relations and node
types are ignored (None), and triplets not connected to the target variable are left out: they
cannot change the target's candidates.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field

import psycopg

from stark_pg.embed import encode
from stark_pg.resources import queries as sql
from stark_pg.skb.names import normalize
from stark_pg.retrieve.focus.substitute import Problem, Triplet
from stark_pg.retrieve.focus.triplets import Schema, TripletReply, variable_name


@dataclass(frozen=True)
class LinkSettings:
    pool: int = 20               # BM25 name matches considered besides the exact names
    ratio: float = 0.8           # difflib ratio of normalised names needed to link
    cosine: float = 0.85         # or the embedding cosine similarity of the names
    model: str | None = None     # embedding model for names (default all-MiniLM-L6-v2)
    grounding: float = 0.5       # share of a constant's words the question must contain (0: no check)


@dataclass
class Link:
    constant: str
    node_type: str | None
    node_ids: tuple[int, ...] = ()
    how: str | None = None               # exact | string | embedding; None: not linked
    names: list[str] = field(default_factory=list)
    score: float | None = None
    grounded: bool = True                # False: the question does not name it, so it was not linked

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class Prepared:
    problem: Problem | None              # None: nothing left to substitute
    target: str
    target_type: str | None
    links: list[Link]
    dropped: list[dict]                  # triplets left out, each with the reason

    @property
    def linked(self) -> bool:
        return self.problem is not None and len(self.problem.triplets) > 0

    def with_target_type(self, node_type: str | None) -> "Prepared":
        """The same problem with the target variable given `node_type` (answer_type.choose)."""
        problem = self.problem
        if problem is not None:
            problem = Problem(problem.variables | {self.target: node_type}, problem.triplets)
        return Prepared(problem, self.target, node_type, self.links, self.dropped)


def grounded(constant: str, question: str, share: float) -> bool:
    """Whether at least `share` of the constant's words occur in the question. A word of five or
    more characters also counts when a question word shares its first five (plural, -ase/-ases)."""
    words = normalize(constant).split()
    if share <= 0:
        return True
    if not words:
        return False
    present = set(normalize(question).split())
    stems = {w[:5] for w in present if len(w) >= 5}
    found = sum(1 for w in words if w in present or (len(w) >= 5 and w[:5] in stems))
    return found / len(words) >= share


def link_constant(conn: psycopg.Connection, skb: str, constant: str, node_type: str | None,
                  settings: LinkSettings) -> Link:
    rows = list(sql().focus_name_candidates(conn, skb=skb, constant=constant, pool=settings.pool))
    link = Link(constant, node_type)
    exact = [r for r in rows if r[3]]
    if exact:
        typed = [r for r in exact if r[1] == node_type]
        chosen = sorted(typed or exact, key=lambda r: r[0])
        link.node_ids, link.how, link.names, link.score = tuple(int(r[0]) for r in chosen), "exact", \
            [r[2] for r in chosen], 1.0
        return link
    named = [r for r in rows if r[2]]
    if not named:
        return link
    target = normalize(constant)
    ratios = [difflib.SequenceMatcher(None, target, normalize(r[2])).ratio() for r in named]
    vectors = encode([constant] + [r[2] for r in named], settings.model)
    cosines = (vectors[1:] @ vectors[0]).astype(float)
    best = None
    for r, ratio, cos in zip(named, ratios, cosines):
        how = "string" if ratio >= settings.ratio else "embedding" if cos >= settings.cosine else None
        if how is None:
            continue
        key = (r[1] == node_type, max(ratio, float(cos)), -int(r[0]))
        if best is None or key > best[0]:
            best = (key, r, how, max(ratio, float(cos)))
    if best is not None:
        _, r, how, score = best
        link.node_ids, link.how, link.names, link.score = (int(r[0]),), how, [r[2]], round(float(score), 4)
    return link


def prepare(conn: psycopg.Connection, skb: str, reply: TripletReply, skb_schema: Schema,
            settings: LinkSettings, question: str | None = None) -> Prepared:
    """The substitution problem of `reply`; with `question`, constants it does not name are dropped."""
    node_types, relations = set(skb_schema.node_types), skb_schema.relation_names
    variables: dict[str, str | None] = {}
    links: dict[tuple[str, str | None], Link] = {}
    kept: list[tuple[object, str | None, object, dict]] = []
    dropped: list[dict] = []
    for raw in reply.triplets:
        ends, off_question = [], False
        for end, end_type in ((raw.head, raw.head_type), (raw.tail, raw.tail_type)):
            end_type = end_type if end_type in node_types else None
            name = variable_name(end)
            if name is not None:
                if variables.get(name) is None:
                    variables[name] = end_type
                ends.append(name)
            else:
                key = (end, end_type)
                if key not in links:
                    if question is not None and not grounded(end, question, settings.grounding):
                        links[key] = Link(end, end_type, grounded=False)
                    else:
                        links[key] = link_constant(conn, skb, end, end_type, settings)
                ends.append(links[key].node_ids)
                off_question |= not links[key].grounded
        shown = raw.model_dump()
        if off_question:
            dropped.append(shown | {"reason": "a constant the question does not name"})
            continue
        if any(isinstance(e, tuple) and not e for e in ends):
            dropped.append(shown | {"reason": "a constant links to no node"})
            continue
        if all(isinstance(e, tuple) for e in ends):
            dropped.append(shown | {"reason": "two constants: nothing to substitute"})
            continue
        relation = raw.relation if raw.relation in relations else None
        kept.append((ends[0], relation, ends[1], shown))
    target = variable_name(reply.target) or "x1"
    target_type = reply.target_type if reply.target_type in node_types else None
    if variables.get(target) is None:
        variables[target] = target_type
    target_type = variables[target]
    reach, changed = {target}, True
    while changed:
        changed = False
        for h, _, t, _ in kept:
            vs = {e for e in (h, t) if isinstance(e, str)}
            if vs & reach and not vs <= reach:
                reach |= vs
                changed = True
    triplets = []
    for h, relation, t, shown in kept:
        if {e for e in (h, t) if isinstance(e, str)} <= reach:
            triplets.append(Triplet(h, relation, t))
        else:
            dropped.append(shown | {"reason": "not connected to the target"})
    problem = Problem({v: variables[v] for v in sorted(reach)}, tuple(triplets)) if triplets else None
    return Prepared(problem, target, target_type, list(links.values()), dropped)
