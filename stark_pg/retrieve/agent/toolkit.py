"""What the LLM is told about the toolkit, and the seed program every category starts from.

The description is generated from the same lists the validator enforces (sandbox.py), plus the
SKB's document structures from the database, so the prompt can never promise what the sandbox
refuses."""

from __future__ import annotations

from stark_pg.retrieve.agent.sandbox import ENTITY_SLOTS

TOOLKIT = """You write one PostgreSQL SELECT that ranks the nodes of a knowledge base for a question.
It must return two columns, node_id and score, best first (ORDER BY score DESC), at most 1000 rows.

Tables (read only):
  agent.node(node_id bigint, type text, name text)
  agent.node_text(node_id bigint, field text, body text)       -- text fields of nodes
  agent.edge(src bigint, relation text, dst bigint)            -- typed edges src -relation-> dst
Functions (use in FROM, e.g. FROM agent.bm25(:query, 100) b):
  agent.bm25(text, k int) -> (node_id, score)                  -- BM25 keyword search over documents
  agent.bm25(text, k int, field text) -> (node_id, score)      -- over one field only, e.g. 'name'
  agent.vss(vector, k int) -> (node_id, score)                 -- embedding search (cosine, 0..1)
  agent.similarity(bigint[], vector) -> (node_id, score)       -- cosine of given nodes to a vector
  agent.neighbours(bigint[] or bigint, relation text) -> (src, relation, dst)  -- the edges of the
                                          given nodes either way, src being a given node; relation NULL: any
  agent.match_name(text, k int) -> (node_id, type, name, exact) -- nodes named like the text
Values bound for each question (NULL when unknown):
  :query (text), :query_vector (vector of the question), :answer_type (text: the node type the
  question most likely asks for), {entities}
Allowed: WITH (not recursive), JOIN, UNION, GROUP BY, window functions, CASE, COALESCE, GREATEST,
LN, EXP, casts. Not allowed: any other table or function, writes, several statements.
Correct pieces to build from:
  -- the nodes linked to the first entity, scored by their similarity to the question
  with linked as (select e.dst as node_id from agent.neighbours(:entity_1_node, null) e)
  select s.node_id, s.score from agent.similarity(array(select node_id from linked), :query_vector) s
  -- functions that return rows go in FROM or JOIN, never in CASE or WHERE:
  --   from agent.match_name(:entity_1, 5) m     join agent.bm25(:query, 100) b on b.node_id = n.node_id
  -- a bonus for nodes of the asked type: + case when n.type = :answer_type then 1 else 0 end

{structure}"""

ENTITY_DOC = ", ".join(f":entity_{i}, :entity_{i}_type, :entity_{i}_node" for i in range(1, ENTITY_SLOTS + 1))
ENTITY_NOTE = ("(the entities the question names, their types, and the id of the node each was matched to)")

SEED = """with lexical as (select node_id, score from agent.bm25(:query, 200)),
dense as (select node_id, score from agent.vss(:query_vector, 200)),
top as (select max(score) as best from lexical),
candidates as (select node_id from lexical union select node_id from dense)
select n.node_id,
       0.5 * coalesce(l.score / nullif(t.best, 0), 0) + coalesce(d.score, 0)
         + case when n.type = :answer_type then 1 else 0 end as score
from candidates c
join agent.node n on n.node_id = c.node_id
cross join top t
left join lexical l on l.node_id = c.node_id
left join dense d on d.node_id = c.node_id
order by score desc, n.node_id
limit 1000"""


def describe(structure_text: str) -> str:
    """The toolkit for a prompt, with the SKB's types, fields and relations."""
    return TOOLKIT.format(entities=f"{ENTITY_DOC} {ENTITY_NOTE}", structure=structure_text)


# One direction per iteration (cycled): a 1.5B model asked only to "improve" returns the program
# unchanged; asked for one concrete change, it writes a different program. Each names toolkit parts.
DIRECTIONS = (
    "Follow the graph: take the nodes linked to :entity_1_node (and :entity_2_node) with "
    "agent.neighbours(array[:entity_1_node, :entity_2_node]::bigint[], null), keep those of type "
    ":answer_type, score them with agent.similarity(array(select ...), :query_vector), and rank them "
    "above the other candidates.",
    "Change how the scores are combined: other weights for the BM25 and dense scores, or a bonus for "
    "candidates whose name matches an entity (agent.match_name(:entity_1, 5)).",
    "Two hops: the neighbours of the neighbours of :entity_1_node, of type :answer_type, ranked by "
    "agent.similarity to :query_vector, then the other candidates.",
    "Use BM25 over the 'name' field (agent.bm25(:query, 100, 'name')) or over the entity names "
    "together with the question, next to the dense score.",
)


def direction(iteration: int) -> str:
    """What the LLM is asked to try in this iteration (1-based)."""
    return DIRECTIONS[(iteration - 1) % len(DIRECTIONS)]
