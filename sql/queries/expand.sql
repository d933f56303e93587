-- Named statements of the query-expansion methods (stark_pg/retrieve/expand/: prf, hyde, rar, agr, kar);
-- KAR's graph function is in sql/functions/kar.sql.

-- name: expand_type_fields(skb_id)
-- Each node type with its node count and the text fields its nodes carry (most common first): the
-- "document structures" the expansion prompts describe.
with typed as (select n.type, count(*) as nodes from stark.node n where n.skb_id = :skb_id group by n.type),
fields as (select n.type, f.field, count(*) as n
           from stark.node_field f join stark.node n on n.skb_id = f.skb_id and n.node_id = f.node_id
           where f.skb_id = :skb_id group by n.type, f.field)
select t.type, t.nodes,
       coalesce((select array_agg(f.field order by f.n desc, f.field) from fields f where f.type = t.type), '{}')
from typed t
order by t.nodes desc, t.type;

-- name: expand_documents(skb, node_ids)
-- The rendered documents (name, type, text fields) of some nodes, with their names and types.
select n.node_id, n.name, n.type, stark.render_document(n.skb_id, n.node_id, false)
from stark.node n
where n.skb_id = stark.skb_id(:skb) and n.node_id = any(:node_ids);

-- name: kar_neighbours(skb, node_ids, hops, embedding, k, per_hop_cap, model, directed, last_hop, max_frontier)
-- KAR steps 3-4: per anchor, the k neighbours within `hops` most similar to the query (frontier: the most
-- new nodes a hop of the anchor reached, before max_frontier).
select anchor, hop, relations, path, neighbour, similarity, rank, frontier
from stark.kar_neighbours(:skb, cast(:node_ids as bigint[]), :hops, :embedding, :k, :per_hop_cap, :model,
                          :directed, :last_hop, :max_frontier);

-- name: kar_neighbours_sql(skb, hops, model, with_query, directed, last_hop)$
-- The statement stark.kar_neighbours runs, for traces (without a query its last hop is the exact one).
select stark.kar_neighbours_sql(stark.skb_id(:skb),
                                case when :with_query then (select doc_table from stark.embedding_model
                                                            where name = :model) end,
                                :hops, :directed, case when :with_query then :last_hop else 'exact' end);

-- name: kar_named_nodes(skb, names)
-- Nodes whose name equals one of `names` but for case (through node_lower_name_idx): an entity the
-- query names exactly is that node, whatever the embedding search says (embeddings confuse SMAD2 and SMAD3).
select lower(n.name), n.node_id, n.type
from stark.node n
where n.skb_id = stark.skb_id(:skb) and lower(n.name) = any(:names)
order by n.node_id;

-- name: kar_node_vector(skb, node_id, model)$
-- A node's document vector (NULL if it has none), for the cosine of an entity matched by name.
select stark.node_vector(:skb, :node_id, :model);
