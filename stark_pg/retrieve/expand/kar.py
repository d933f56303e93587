"""KAR (Xia et al. 2024, "Knowledge-Aware Query Expansion with Large Language Models for Textual and
Relational Retrieval"), section 4, with the graph work in PostgreSQL:

1. Entity parsing: the LLM names the entities the query mentions, each with a node type from the
   SKB's document structures; the query itself is a pseudo-entity.
2. Entity documents: an entity the SKB has a node of that very name (but for case) is that node;
   any other, written as a document ("name: ...\\ntype: ..."), is matched to the node whose document
   vector is nearest (of the entity's type when it has one and a node of that type is among the
   `match_pool` nearest); the pseudo-entity to the query's nearest node. (The paper matches by
   embedding alone; on a synthetic SKB MiniLM put the gene LOLA15 first for "LOLA20".)
3-4. Relation propagation and document-based relation filtering (DRF) in one call of
   `stark.kar_neighbours` (sql/functions/kar.sql): the `hops`-hop neighbours of those nodes with
   their relation paths, capped at `per_hop_cap` per hop, and per anchor the `top_k` most similar
   to the query by their document vectors.
   `drf=false` (KAR w/o DRF) ranks the neighbours by the similarity of their *names* to the query
   instead; `kg=false` (KAR w/o KG) uses no relations at all, only the entities' documents.
5. Document triples `(document of node, relation path, document of neighbour)` as text, cut to
   `budget` characters.
6. Expansion: the LLM reads the triples and writes `n` expansions in one call; the query plus the
   expansions is retrieved (stark_pg.retrieve.expand.retrieve).

`anchors=retrieved` replaces steps 1-2: the anchors are the first retrieval's top `max_entities` nodes,
and the LLM is called once. On an SKB that holds a slice of its knowledge graph, most entities a small
model names have no node, so their "neighbours" are those of a look-alike, while RAR and AGR, which
show the LLM the first retrieval's documents, were the expansions that did best (docs/kar.md). This
grounds KAR's relations in nodes the SKB does hold. It did not help there (the model's expansions
still name other entities; docs/kar.md), so the paper's entity parsing stays the default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import psycopg
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from stark_pg.embed import canonical_name, encode, encode_query, skb_encoder
from stark_pg.options import LLMOptions, OptionError
from stark_pg.resources import queries as sql
from stark_pg.retrieve import Ranking
from stark_pg.retrieve.expand import (SYSTEM, Context, Document, RetrieverOptions, ask_texts, clip,
                                      documents, run)

ENTITIES = """{structure}

Question: {query}

List the entities the question names explicitly (for example a gene, a drug, a disease, a
pathway), each with its type from the list above. Write each name exactly as in the question. Do
not list the entity the question asks for. If the question names none, reply {{"entities": []}}.
Reply with only {{"entities": [{{"name": "...", "type": "..."}}, ...]}}."""

EXPANSION = """{structure}

Question: {query}

{source}: their documents and, after
"->", documents of entities related to them, with the relation.
{knowledge}

Using this knowledge where it helps, write {n} different short knowledge-base documents (at most
{words} words each: "name: ...", "type: ...", then text) of entities that would answer the question:
their type, their properties, and their relations to the entities above. Reply with only
{{"expansions": ["...", ...]}}."""


class Entity(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    type: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data):
        return {"name": data} if isinstance(data, str) else data

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, value):
        if not isinstance(value, str) or not value.strip():
            raise ValueError("an entity needs a non-empty name")
        return value.strip()

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value):
        return value.strip() or None if isinstance(value, str) else None


class EntityReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    entities: list[Entity] = []

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data):
        return {"entities": data} if isinstance(data, list) else data


# How stark.kar_neighbours builds the last hop: every frontier node scored (exact), or the first nodes of
# the frontier met walking the HNSW index in order of similarity (index: approximate; docs/kar.md).
LAST_HOPS = ("exact", "index")

# Where KAR's anchor nodes come from: the entities the LLM names in the query (the paper's steps 1-2), or
# the first retrieval's top nodes (no entity call); and how the expansion prompt introduces them.
ANCHORS = {"entities": "Knowledge from the knowledge base about the entities in the question",
           "retrieved": "Entities the search engine found for the question (they may or may not answer it)"}

NEEDS = ("llm",)  # an LLM at query time (see README: LLMs)


@dataclass
class Options(LLMOptions, RetrieverOptions):
    hops: int = 2                 # relation propagation depth
    top_k: int = 10               # neighbours kept per entity node by DRF
    per_hop_cap: int = 100        # nodes kept per entity node and hop (by similarity), so hubs cannot explode
    max_frontier: int = 10000     # a hop's new nodes scored per entity node (most linked first); the tail's bound
    n: int = 3                    # expansions the LLM writes
    words: int = 60               # length asked of each expansion
    doc_chars: int = 140          # characters of each document in a triple
    budget: int = 1600            # characters of all triples together
    anchors: str = "entities"     # entities: the LLM names them (the paper's); retrieved: the first retrieval's top nodes
    max_entities: int = 4         # entities kept from the LLM's list (the pseudo-entity comes on top), or nodes retrieved
    match_pool: int = 10          # nearest nodes searched for one of the entity's type
    kg: bool = True               # false: KAR w/o KG (entity documents only, no relations)
    drf: bool = True              # false: KAR w/o DRF (neighbours ranked by their names' similarity)
    directed: bool = False        # follow edges only from source to destination
    last_hop: str = "exact"       # index: the last hop walks the HNSW index (approximate, faster at Prime's size)
    max_tokens: int = 400         # the expansion reply's limit (three documents as JSON objects need ~300)

    def check(self) -> None:
        super().check()
        for name in ("hops", "top_k", "per_hop_cap", "max_frontier", "n", "doc_chars", "budget", "match_pool"):
            if getattr(self, name) <= 0:
                raise OptionError(f"kar {name} must be positive, not {getattr(self, name)}")
        if self.hops > 6:
            raise OptionError(f"kar hops must be at most 6, not {self.hops}")
        if self.last_hop not in LAST_HOPS:
            raise OptionError(f"kar last_hop must be {' or '.join(LAST_HOPS)}, not {self.last_hop!r}")
        if self.anchors not in ANCHORS:
            raise OptionError(f"kar anchors must be {' or '.join(ANCHORS)}, not {self.anchors!r}")
        if self.anchors == "retrieved" and self.max_entities <= 0:
            raise OptionError(f"kar max_entities must be positive with anchors=retrieved, not {self.max_entities}")


def search(conn: psycopg.Connection, skb: str, query: str, k: int = 10, options: Options | None = None) -> Ranking:
    o = options or Options()

    def expand(ctx: Context) -> list[str]:
        model = canonical_name(o.model)
        vector = encode_query(query, model, skb_encoder(conn, skb, model))
        structure = ctx.structure()
        if o.anchors == "retrieved":
            anchors = retrieved_anchors(ctx.first_pass(o.max_entities))
        else:
            # 1. entity parsing
            entities = parse_entities(ctx.client, structure, query, o.max_entities)
            # 2. entity documents
            anchors = match_entities(conn, skb, query, vector, entities, structure.type_names, o)
        ctx.trace["entities"] = anchors
        anchor_ids = list(dict.fromkeys(a["node_id"] for a in anchors if a["node_id"] is not None))
        # 3-4. relation propagation + DRF
        rows = []
        if o.kg and anchor_ids:
            rows, frontier = neighbours(conn, skb, anchor_ids, vector if o.drf else None, o, model)
            cut = {a: n for a, n in frontier.items() if n > o.max_frontier}
            if cut:
                ctx.trace["frontier_cut"] = {"max_frontier": o.max_frontier, "reached": cut}
            if not o.drf:
                rows = rank_by_names(conn, skb, query, rows, o.top_k, model)
            ctx.trace["sql"] = sql().kar_neighbours_sql(conn, skb=skb, hops=o.hops, model=model, with_query=o.drf,
                                                        directed=o.directed, last_hop=o.last_hop)
        ctx.trace["neighbours"] = [{"anchor": a, "hop": h, "relations": r, "path": p, "node_id": n,
                                    "similarity": s, "rank": i} for a, h, r, p, n, s, i in rows]
        # 5. document triples
        knowledge, sent = triples(conn, skb, anchor_ids, rows, o)
        ctx.trace["triples"] = {"sent": sent, "of": len(rows) + len(anchor_ids), "chars": len(knowledge)}
        ctx.explain.update(explain(anchors, rows, knowledge, o, ctx.trace.get("frontier_cut", {}).get("reached")))
        ctx.explain["   SQL"] = ctx.trace.get("sql", "(no relation propagation)")
        # 6. expansion
        expansions = ask_texts(ctx.client, EXPANSION.format(structure=structure.text(), query=query,
                                                            source=ANCHORS[o.anchors],
                                                            knowledge=knowledge or "(nothing found)", n=o.n,
                                                            words=o.words), o.max_tokens)
        return expansions[:o.n]

    return run(conn, skb, query, k, o, "kar", expand)


def parse_entities(client, structure, query: str, max_entities: int) -> list[Entity]:
    """The entities the LLM finds named in the query (distinct names, at most `max_entities`)."""
    reply, _ = client.chat_json(
        [{"role": "system", "content": SYSTEM},
         {"role": "user", "content": ENTITIES.format(structure=structure.text(), query=query)}],
        EntityReply, max_tokens=160)
    return list({e.name.lower(): e for e in reply.entities}.values())[:max_entities]


def match_entities(conn: psycopg.Connection, skb: str, query: str, vector: np.ndarray, entities: list[Entity],
                   type_names: set[str], o: Options) -> list[dict]:
    """Each entity's node: the node of that very name, else the nearest document (of the entity's type
    if one is in the pool) by the embedding of the entity written as a document; first the query
    itself (the pseudo-entity). Each anchor says `how` it was matched and its cosine."""
    model = canonical_name(o.model)
    out = []
    top = list(sql().vss_top(conn, skb=skb, embedding=vector, k=1, model=model, exact=False))
    out.append({"entity": query, "type": None, "pseudo": True, "node_id": int(top[0][0]) if top else None,
                "similarity": float(top[0][1]) if top else None, "how": "embedding"})
    if not entities:
        return _named(conn, skb, out)
    named: dict[str, list[tuple[int, str]]] = {}
    for name, node_id, node_type in sql().kar_named_nodes(conn, skb=skb, names=[e.name.lower() for e in entities]):
        named.setdefault(name, []).append((int(node_id), node_type))
    texts = [f"name: {e.name}" + (f"\ntype: {e.type}" if e.type in type_names else "") for e in entities]
    for entity, entity_vector in zip(entities, encode(texts, model)):
        known_type = entity.type if entity.type in type_names else None
        same_name = named.get(entity.name.lower(), [])
        if same_name:                   # named exactly: that node (of the entity's type if several)
            node_id = next((n for n, t in same_name if t == known_type), same_name[0][0])
            node_vector = _node_vector(conn, skb, node_id, model)
            similarity = float(entity_vector @ node_vector) if node_vector.size else None
            out.append({"entity": entity.name, "type": known_type, "pseudo": False, "node_id": node_id,
                        "similarity": similarity, "how": "name"})
            continue
        pool = list(sql().vss_top(conn, skb=skb, embedding=entity_vector, k=o.match_pool, model=model, exact=False))
        kinds = {} if known_type is None else _types(conn, skb, [int(n) for n, _ in pool])
        chosen = next((row for row in pool if kinds.get(int(row[0])) == known_type), pool[0] if pool else None)
        out.append({"entity": entity.name, "type": known_type, "pseudo": False,
                    "node_id": int(chosen[0]) if chosen else None,
                    "similarity": float(chosen[1]) if chosen else None, "how": "embedding"})
    return _named(conn, skb, out)


def retrieved_anchors(first: list[Document]) -> list[dict]:
    """`anchors=retrieved`: the first retrieval's top nodes, in rank order, as anchors (no entity call)."""
    return [{"entity": d.name or str(d.node_id), "type": d.type, "pseudo": False, "node_id": d.node_id,
             "similarity": None, "how": f"retrieval rank {i}", "name": d.name, "node_type": d.type}
            for i, d in enumerate(first, 1)]


def _node_vector(conn, skb: str, node_id: int, model: str) -> np.ndarray:
    vector = sql().kar_node_vector(conn, skb=skb, node_id=node_id, model=model)
    return np.zeros(0, dtype=np.float32) if vector is None else np.asarray(vector.to_numpy(), dtype=np.float32)


def _types(conn, skb: str, node_ids: list[int]) -> dict[int, str]:
    return {n: d.type for n, d in documents(conn, skb, node_ids).items()}


def _named(conn, skb: str, anchors: list[dict]) -> list[dict]:
    docs = documents(conn, skb, [a["node_id"] for a in anchors if a["node_id"] is not None])
    for a in anchors:
        d = docs.get(a["node_id"])
        a["name"], a["node_type"] = (d.name, d.type) if d else (None, None)
    return anchors


def neighbours(conn: psycopg.Connection, skb: str, anchor_ids: list[int], vector: np.ndarray | None, o: Options,
               model: str) -> tuple[list[tuple], dict[int, int]]:
    """Rows (anchor, hop, relations, path, neighbour, similarity, rank) of stark.kar_neighbours, and per
    anchor the most new nodes one of its hops reached (above max_frontier: not all were scored); without
    a vector (w/o DRF) every neighbour within the cap comes back, unranked."""
    rows = [tuple(r) for r in sql().kar_neighbours(conn, skb=skb, node_ids=anchor_ids, hops=o.hops,
                                                   embedding=vector, k=o.top_k if vector is not None else None,
                                                   per_hop_cap=o.per_hop_cap, model=model, directed=o.directed,
                                                   last_hop=o.last_hop, max_frontier=o.max_frontier)]
    frontier: dict[int, int] = {}
    for r in rows:
        frontier[r[0]] = max(frontier.get(r[0], 0), int(r[7] or 0))
    return [r[:7] for r in rows], frontier


def rank_by_names(conn: psycopg.Connection, skb: str, query: str, rows: list[tuple], top_k: int,
                  model: str) -> list[tuple]:
    """KAR w/o DRF: per anchor, the top_k neighbours by the cosine of their *name* to the query."""
    if not rows:
        return []
    docs = documents(conn, skb, list({r[4] for r in rows}))
    names = sorted({docs[r[4]].name or str(r[4]) for r in rows if r[4] in docs})
    encoder = skb_encoder(conn, skb, model)
    similarity = dict(zip(names, (encode(names, model, encoder=encoder) @ encode_query(query, model, encoder)).tolist()))
    scored = [(a, h, rel, p, n, similarity.get(docs[n].name or str(n)) if n in docs else None)
              for a, h, rel, p, n, _, _ in rows]
    out = []
    for anchor in dict.fromkeys(r[0] for r in scored):
        mine = sorted((r for r in scored if r[0] == anchor),
                      key=lambda r: (-(r[5] if r[5] is not None else -2.0), r[1], r[4]))[:top_k]
        out.extend((*r, i) for i, r in enumerate(mine, 1))
    return out


def triples(conn: psycopg.Connection, skb: str, anchor_ids: list[int], rows: list[tuple],
            o: Options) -> tuple[str, int]:
    """The knowledge text: each entity node's document, then its kept neighbours as
    `-> relation path -> document`, cut to `budget` characters (whole lines only). Also returns how many
    documents made it in. Neighbours are interleaved across anchors by rank, so every entity gets room."""
    docs = documents(conn, skb, list({*anchor_ids, *(r[4] for r in rows), *(m for r in rows for m in r[3][:-1])}))
    name = {n: (d.name or str(n)) for n, d in docs.items()}
    lines: list[str] = []
    for a in anchor_ids:
        if a in docs:
            lines.append(f"[{len(lines) + 1}] {clip(docs[a].text, o.doc_chars)}")
    order = sorted(rows, key=lambda r: (r[6], anchor_ids.index(r[0]) if r[0] in anchor_ids else 0))
    shown = set(anchor_ids)
    for a, _, relations, path, n, _, _ in order:
        if n not in docs or n in shown:          # a document is shown once, by its best-ranked path
            continue
        shown.add(n)
        steps = "".join(f" -[{rel}]-> {name.get(mid, mid)}" for rel, mid in zip(relations[:-1], path[:-1]))
        lines.append(f"[{len(lines) + 1}] {name.get(a, a)}{steps} -[{relations[-1]}]-> "
                     f"{clip(docs[n].text, o.doc_chars)}")
    kept, size = [], 0
    for line in lines:
        if size + len(line) + 1 > o.budget:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept), len(kept)


def explain(anchors: list[dict], rows: list[tuple], knowledge: str, o: Options, cut: dict | None = None) -> dict:
    entity_lines = []
    for a in anchors:
        label = "the query itself" if a["pseudo"] else f"{a['entity']!r}" + (f" ({a['type']})" if a["type"] else "")
        node = (f"{a['node_id']} {a['name']!r} ({a['node_type']}), by {a['how']}"
                + (f", cosine {a['similarity']:.3f}" if a["similarity"] is not None else "")
                if a["node_id"] is not None else "no node")
        entity_lines.append(f"{label} -> {node}")
    steps = {("1-2. anchors: the first retrieval's top nodes" if o.anchors == "retrieved"
              else "1-2. entities and their nodes"): entity_lines}
    if not o.kg:
        steps["3-4. neighbours"] = ["none: kg=false (KAR w/o KG)"]
    else:
        how = "document similarity (DRF)" if o.drf else "name similarity (w/o DRF)"
        lines = [f"{o.hops} hops, at most {o.per_hop_cap} nodes per hop and entity, top {o.top_k} by {how}"]
        for a, n in (cut or {}).items():
            lines.append(f"{a}: a hop reached {n} new nodes; the {o.max_frontier} most linked were scored (max_frontier)")
        for a, h, rel, p, n, s, i in rows:
            lines.append(f"{a} -> {' -> '.join(rel)} -> {n} (hop {h}, "
                         + (f"similarity {s:.3f}" if s is not None else "no similarity") + f", rank {i})")
        steps["3-4. neighbours"] = lines
    steps["5. triples sent"] = knowledge.splitlines() or ["none"]
    return steps
