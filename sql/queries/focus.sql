-- Named statements of 4StepFocus (stark_pg/retrieve/focus/); its functions are in sql/functions/focus.sql.

-- name: focus_skb_version(skb_id)$
-- When the SKB was (re)loaded: the key under which its schema summary is cached in-process.
select loaded_at::text from stark.skb where skb_id = :skb_id;

-- name: focus_node_types(skb_id)
-- The node types the triplet prompt offers, most frequent first.
select type, count(*) as n from stark.node where skb_id = :skb_id group by type order by n desc, type;

-- name: focus_relation_types(skb_id)
-- Relation names with the node types they join (head type -> tail type), for the triplet prompt.
select e.relation, h.type as head_type, t.type as tail_type, count(*) as n
from stark.edge e
join stark.node h on h.skb_id = e.skb_id and h.node_id = e.src
join stark.node t on t.skb_id = e.skb_id and t.node_id = e.dst
where e.skb_id = :skb_id
group by e.relation, h.type, t.type
order by n desc, e.relation, h.type, t.type;

-- name: focus_example_edges(skb_id, relations)
-- One real edge per relation (the one between the lowest node ids with names), to build few-shot
-- examples from the SKB's own entities.
select distinct on (e.relation) e.relation, h.name as head, h.type as head_type, t.name as tail, t.type as tail_type,
       e.src, e.dst
from stark.edge e
join stark.node h on h.skb_id = e.skb_id and h.node_id = e.src
join stark.node t on t.skb_id = e.skb_id and t.node_id = e.dst
where e.skb_id = :skb_id and e.relation = any(:relations) and h.name is not null and t.name is not null
  and h.type <> t.type
order by e.relation, e.src, e.dst;

-- name: focus_second_hop(skb_id, node_id, exclude_type, exclude_node)
-- An edge onward from a node to a node of another type (not the one we came from): the second hop
-- of a two-hop example.
select e.relation, t.name, t.type
from stark.edge e
join stark.node t on t.skb_id = e.skb_id and t.node_id = e.dst
where e.skb_id = :skb_id and e.src = :node_id and t.name is not null and t.type <> :exclude_type
  and e.dst <> :exclude_node
order by e.relation, e.dst
limit 1;

-- name: focus_name_candidates(skb, constant, pool)
-- Nodes a triplet's constant may link to: same lower-cased name, or among the best BM25 name matches.
select node_id, type, name, exact, bm25 from stark.focus_name_candidates(:skb, :constant, :pool);

-- name: focus_substitute(skb, problem, respect_relations, directed, max_cost)
-- Algorithm 2: each variable's candidate set after applying the triplets until no set changes (cut:
-- the revisions left out over max_cost).
select variable, node_type, unconstrained, size, node_ids, rounds, cut
from stark.focus_substitute(:skb, cast(:problem as jsonb), respect_relations => :respect_relations,
                            directed => :directed, max_cost => cast(:max_cost as double precision));

-- name: focus_rank(skb, embedding, candidates, type_names, type_probs, type_weight, k, model)
-- Step 3: the filtered candidates by cosine first, then the other nodes by cosine plus the type bonus.
select node_id, score, filtered
from stark.focus_rank(:skb, :embedding, cast(:candidates as bigint[]), cast(:type_names as text[]),
                      cast(:type_probs as double precision[]), :type_weight, :k, :model);

-- name: focus_run_summary(run_id)
-- 4StepFocus figures of an evaluation run from its traces: the share of queries whose triplets linked
-- (at least one triplet left for substitution), the median candidate-set size over those, the
-- median and mean LLM seconds per query, the LLM requests sent (0 when replayed from the cache) and
-- those answered from the cache.
select count(*) as queries,
       avg(case when (trace ->> 'linked')::boolean then 1.0 else 0.0 end) as linked_share,
       percentile_cont(0.5) within group (order by (trace ->> 'candidate_count')::float)
           filter (where (trace ->> 'linked')::boolean) as median_candidates,
       percentile_cont(0.5) within group (order by (trace -> 'llm' ->> 'seconds')::float) as median_llm_seconds,
       avg((trace -> 'llm' ->> 'seconds')::float) as mean_llm_seconds,
       sum((trace -> 'llm' ->> 'calls')::int) as llm_network_calls,
       sum((trace -> 'llm' ->> 'cache_hits')::int) as llm_cache_hits,
       count(*) filter (where error is not null) as failed
from stark.eval_result where run_id = :run_id;

-- name: stale_query_vectors(skb, split, model)
-- Queries of a split with no embedding for `model`, or one computed from different text.
select q.query_id, q.body
from stark.query q
left join stark.query_vector v on v.skb_id = q.skb_id and v.query_id = q.query_id and v.model = :model
where q.skb_id = stark.skb_id(:skb) and q.split = :split and (v.body_md5 is distinct from md5(q.body))
order by q.query_id;

-- name: store_query_vector(skb, query_id, model, body, vec)*!
-- One query's embedding, replacing an older one.
insert into stark.query_vector (skb_id, query_id, model, body_md5, vec)
values (stark.skb_id(:skb), :query_id, :model, md5(:body), :vec)
on conflict (skb_id, query_id, model) do update set body_md5 = excluded.body_md5, vec = excluded.vec;

-- name: answer_type_votes(skb, embedding, splits, k, model, question)
-- The answer types the k nearest queries of some splits vote for (sql/functions/answer_type.sql).
select node_type, share, voters
from stark.answer_type_votes(:skb, :embedding, :splits::text[], :k, :model, :question);
