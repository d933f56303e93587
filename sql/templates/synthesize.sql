-- Statements of `stark-pg synthesize` (stark_pg/synthesize/templates.py): a relation template compiles
-- to one statement over stark.node and stark.edge that returns every instantiation of its anchors with
-- the answers it admits. The shapes differ per template (its paths, hops and directions), so these are
-- fragments filled with psycopg.sql: {aliases} are identifiers, {relation} and {type} literals; the
-- SKB is the bound parameter %(skb)s. A section runs from its `-- name:` line to the next.

-- name: hop_out
-- One hop along an edge stored from the previous node ({prev}) to the next ({node}) of a type.
join stark.edge {edge} on {edge}.skb_id = %(skb)s and {edge}.src = {prev}.node_id and {edge}.relation = {relation}
join stark.node {node} on {node}.skb_id = %(skb)s and {node}.node_id = {edge}.dst and {node}.type = {type}

-- name: hop_in
-- One hop against an edge's direction: stored from the next node to the previous one.
join stark.edge {edge} on {edge}.skb_id = %(skb)s and {edge}.dst = {prev}.node_id and {edge}.relation = {relation}
join stark.node {node} on {node}.skb_id = %(skb)s and {node}.node_id = {edge}.src and {node}.type = {type}

-- name: path
-- Every (anchor, answer) pair one path connects; distinct, since several routes may join them.
{name} as (
    select distinct {start}.node_id as anchor, {finish}.node_id as answer
    from stark.node {start}
    {hops}
    where {start}.skb_id = %(skb)s and {start}.type = {type}
)

-- name: without_in
-- STaRK's [!relation]: no node of the type has such an edge to the answer.
not exists (select 1 from stark.edge w join stark.node wn on wn.skb_id = w.skb_id and wn.node_id = w.src
            where w.skb_id = %(skb)s and w.dst = {answer} and w.relation = {relation} and wn.type = {type})

-- name: without_out
-- ...and none from the answer to a node of the type.
not exists (select 1 from stark.edge w join stark.node wn on wn.skb_id = w.skb_id and wn.node_id = w.dst
            where w.skb_id = %(skb)s and w.src = {answer} and w.relation = {relation} and wn.type = {type})

-- name: instantiations
-- The template's instantiations: its anchors (in the template's order) and the answers, sorted, of
-- every path at once (the paths joined on the answer and on the anchors they share), none of them an
-- anchor itself, minus those a `without` excludes.
with {paths}
select array[{anchors}]::bigint[] as anchors, array_agg(distinct {answer} order by {answer}) as answers
from {joined}
where {conditions}
group by {anchor_columns}
order by 1
