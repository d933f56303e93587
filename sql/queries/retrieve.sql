-- Named statements the retrieval methods and the search command run.

-- name: hybrid_top(skb, query, embedding, k, fusion, weight, pool, rrf_k, model)
select node_id, score from stark.hybrid(:skb, :query, :embedding, cast(:k as int), :fusion, :weight, :pool, :rrf_k, :model);

-- name: describe_nodes(skb_id, node_ids)
-- Type and name of the given nodes, for printing results.
select node_id, type, name from stark.node where skb_id = :skb_id and node_id = any(:node_ids);
