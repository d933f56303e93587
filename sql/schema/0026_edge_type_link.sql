-- A summary of each SKB's graph by node type: for every (type of a node, relation, direction, type of
-- the node at the edge's other end), the ids of the nodes of that type with at least one such edge,
-- and how many. It answers "which of these nodes have an edge to some node of type T" by reading a few
-- arrays where the edge table would need an index probe per node. 4StepFocus's substitution uses it
-- (sql/functions/focus.sql): revising a candidate set against a set nothing has narrowed yet ("every
-- node of type T") becomes an array intersection; a large set drops the members with no edge to T
-- before any probing; and a set revised against most of a type is revised through the few nodes of
-- the type it lacks (a member is lost only if each of its edges to the type goes to one of those,
-- which the counts tell). Built by `stark-pg index` (stark.edge_type_link_build). An SKB's edges never
-- change once loaded (a replacing load writes a new skb_id), so a summary stays exact for as long as
-- its skb_id exists; a replacing load does not carry it over (stark.carry_over_skb).

create table stark.edge_type_link (
    skb_id      int     not null,
    node_type   text    not null,
    relation    text    not null,
    out         boolean not null,      -- true: the node is the edge's source (src); false: its target (dst)
    other_type  text    not null,      -- the type of the node at the edge's other end
    node_ids    bigint[] not null,     -- sorted, distinct
    edges       int[]    not null,     -- each node's number of such edges (node_ids' order)
    primary key (skb_id, node_type, other_type, relation, out)
);
comment on table stark.edge_type_link is
    'Per SKB, node type, relation, direction and type at the other end: the nodes with at least one such edge (built by stark-pg index).';
