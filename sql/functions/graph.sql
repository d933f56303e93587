-- The graph part of the SQL API: names to ids, neighbours, summaries. Stable, documented in README.

create or replace function stark.skb_id(skb_name text) returns int
language sql stable strict as $$
    select skb_id from stark.skb where name = skb_name
$$;
comment on function stark.skb_id(text) is 'The numeric key of the SKB with this name (NULL if none).';

create or replace function stark.neighbors(skb_name text, start_node bigint, rel text default null, hops int default 1)
returns table (node_id bigint, type text, name text, hop int)
language sql stable as $$
    -- Nodes reachable from start_node in at most `hops` outgoing edges (of relation `rel` if given),
    -- each at its shortest distance; the start node itself is not returned.
    with recursive walk(node_id, hop) as (
        select e.dst, 1
        from stark.edge e
        where e.skb_id = stark.skb_id(skb_name) and e.src = start_node and (rel is null or e.relation = rel)
        union
        select e.dst, w.hop + 1
        from walk w
        join stark.edge e on e.skb_id = stark.skb_id(skb_name) and e.src = w.node_id
        where w.hop < hops and (rel is null or e.relation = rel)
    )
    select n.node_id, n.type, n.name, min(w.hop)::int as hop
    from walk w
    join stark.node n on n.skb_id = stark.skb_id(skb_name) and n.node_id = w.node_id
    where w.node_id <> start_node
    group by n.node_id, n.type, n.name
    order by hop, n.node_id
$$;
comment on function stark.neighbors(text, bigint, text, int) is
    'Nodes within `hops` outgoing edges of a node, optionally of one relation, with their distance.';

create or replace view stark.skb_summary as
select s.name,
       s.format,
       s.source,
       s.loaded_at,
       (select count(*) from stark.node n where n.skb_id = s.skb_id) as nodes,
       (select count(*) from stark.edge e where e.skb_id = s.skb_id) as edges,
       (select count(*) from stark.query q where q.skb_id = s.skb_id) as queries
from stark.skb s;
comment on view stark.skb_summary is 'One line per SKB: where it came from and its node, edge and query counts.';
