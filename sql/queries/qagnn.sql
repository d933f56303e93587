-- Named statements of QA-GNN (stark_pg/train/qagnn_model.py, stark_pg/retrieve/qagnn.py, stark_pg/train/qagnn.py).

-- name: qagnn_subgraph(skb_id, candidates, grams, max_linked, fanout)
-- A query's subgraph in one statement. Seeds: the first stage's candidates (in their order) and the
-- nodes linked from the query's words (a node whose compacted name, stark.focus_compact, equals one of
-- the query's word n-grams `grams`, compacted the same way by Python; the `max_linked` longest names,
-- through node_compact_name_idx). Edges: every edge between two seeds, and one hop out: per seed, at
-- most `fanout` outgoing edges to non-seeds and `fanout` incoming edges from non-seeds (the first by
-- relation in byte order, then node id), whose far ends join the subgraph. Rows are nodes (kind 'node': id, type,
-- candidate rank or null, linked) and edges (kind 'edge': src, relation, dst), nodes first.
with cand as (
    select u.node_id, min(u.ord)::int as ord
    from unnest(cast(:candidates as bigint[])) with ordinality as u(node_id, ord)
    group by u.node_id),
linked as (
    select n.node_id
    from stark.node n
    where n.skb_id = :skb_id and stark.focus_compact(n.name) = any (cast(:grams as text[]))
    order by length(n.name) desc, n.node_id
    limit :max_linked),
seed as (
    select c.node_id from cand c join stark.node n on n.skb_id = :skb_id and n.node_id = c.node_id
    union
    select l.node_id from linked l),
inner_edges as (
    select e.src, e.relation, e.dst
    from seed s
    join stark.edge e on e.skb_id = :skb_id and e.src = s.node_id
    where e.dst in (select node_id from seed)),
out_edges as (
    select s.node_id as src, o.relation, o.dst
    from seed s
    cross join lateral (select e.relation, e.dst from stark.edge e
                        where e.skb_id = :skb_id and e.src = s.node_id and e.dst not in (select node_id from seed)
                        order by e.relation collate "C", e.dst
                        limit :fanout) o),
in_edges as (
    select i.src, i.relation, s.node_id as dst
    from seed s
    cross join lateral (select e.src, e.relation from stark.edge e
                        where e.skb_id = :skb_id and e.dst = s.node_id and e.src not in (select node_id from seed)
                        order by e.relation collate "C", e.src
                        limit :fanout) i),
edges as (
    select * from inner_edges union select * from out_edges union select * from in_edges),
nodes as (
    select node_id from seed union select dst from out_edges union select src from in_edges)
select 'node' as kind, n.node_id as a, n.type as label, null::bigint as b, c.ord as rank,
       l.node_id is not null as linked
from nodes x
join stark.node n on n.skb_id = :skb_id and n.node_id = x.node_id
left join cand c on c.node_id = x.node_id
left join linked l on l.node_id = x.node_id
union all
select 'edge', e.src, e.relation, e.dst, null, null from edges e
order by 1 desc, 2, 3, 4;

-- name: qagnn_vocabulary(skb_id)
-- The SKB's node types and relations (a trained model's embedding tables are indexed by them).
select 'type' as kind, type as name from (select distinct type from stark.node where skb_id = :skb_id) t
union all
select 'relation', relation from (select distinct relation from stark.edge where skb_id = :skb_id) r
order by 1, 2;

-- name: qagnn_save_model(skb_id, name, base_model, path, settings, history, metrics)!
-- Store (or replace) a trained QA-GNN's row; its weights are files under `path`.
insert into stark.trained_model (skb_id, kind, name, base_model, path, settings, history, metrics)
values (:skb_id, 'qagnn', :name, :base_model, :path, cast(:settings as jsonb), cast(:history as jsonb),
        cast(:metrics as jsonb))
on conflict (skb_id, kind, name) do update
    set base_model = excluded.base_model, path = excluded.path, settings = excluded.settings,
        history = excluded.history, metrics = excluded.metrics, trained_at = now();

-- name: qagnn_load_model(skb_id, name)^
-- A trained QA-GNN's row, or nothing.
select name, base_model, path, settings, history, metrics, trained_at::text
from stark.trained_model where skb_id = :skb_id and kind = 'qagnn' and name = :name;

-- name: qagnn_model_names(skb_id)
-- The QA-GNN models trained on an SKB (for the error that names them when one is missing).
select name from stark.trained_model where skb_id = :skb_id and kind = 'qagnn' order by name;
