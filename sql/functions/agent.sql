-- The agent's toolkit: what a retrieval program written by the LLM may read and call. One SKB at a
-- time: the views and functions read the SKB named by the setting `stark.agent_skb`, which the
-- sandbox sets for each run (stark_pg/retrieve/agent/sandbox.py). The views run with their owner's
-- rights over the stark tables; the functions are SECURITY DEFINER with a fixed search_path. The
-- role stark_agent gets SELECT on the views and EXECUTE on the functions, nothing else: no schema
-- stark (so no answers, no LLM cache, no training history), no writes.

create schema if not exists agent;
revoke all on schema agent from public;

create or replace view agent.node as
select n.node_id, n.type, n.name
from stark.node n
where n.skb_id = (select s.skb_id from stark.skb s where s.name = current_setting('stark.agent_skb', true));
comment on view agent.node is 'Agent toolkit: the nodes of the current SKB (id, type, name).';

create or replace view agent.node_text as
select f.node_id, f.field, f.body
from stark.node_field f
where f.skb_id = (select s.skb_id from stark.skb s where s.name = current_setting('stark.agent_skb', true));
comment on view agent.node_text is 'Agent toolkit: the text fields of the current SKB''s nodes.';

create or replace view agent.edge as
select e.src, e.relation, e.dst
from stark.edge e
where e.skb_id = (select s.skb_id from stark.skb s where s.name = current_setting('stark.agent_skb', true));
comment on view agent.edge is 'Agent toolkit: the typed edges of the current SKB (src -relation-> dst).';

create or replace function agent.current_skb() returns text
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
    name text := current_setting('stark.agent_skb', true);
begin
    if name is null or name = '' then
        raise exception 'no SKB chosen for the agent toolkit (set stark.agent_skb)';
    end if;
    return name;
end
$$;

create or replace function agent.bm25(query text, k int default 100, field text default null)
returns table (node_id bigint, score double precision)
language sql stable security definer set search_path = pg_catalog, stark, public, pg_temp as $$
    select b.node_id, b.score from stark.bm25(agent.current_skb(), query, least(greatest(k, 1), 1000), field) b
$$;
comment on function agent.bm25(text, int, text) is
    'Agent toolkit: the top k (at most 1000) nodes by BM25 of `query` over whole documents or one field (''name'', ''description'', ...).';

create or replace function agent.vss(query vector, k int default 100)
returns table (node_id bigint, score double precision)
language sql stable security definer set search_path = pg_catalog, stark, public, pg_temp as $$
    select v.node_id, v.score from stark.vss(agent.current_skb(), query, least(greatest(k, 1), 1000)) v
$$;
comment on function agent.vss(vector, int) is
    'Agent toolkit: the top k (at most 1000) nodes by cosine similarity of their document vector to `query`.';

create or replace function agent.similarity(node_ids bigint[], query vector)
returns table (node_id bigint, score double precision)
language plpgsql stable security definer set search_path = pg_catalog, stark, public, pg_temp as $$
declare
    t record := stark.dense_target(agent.current_skb(), 'all-MiniLM-L6-v2', query, false);
begin
    return query execute format(
        'select d.node_id, 1 - (d.vec <=> $1) from stark.%I d where d.skb_id = %s and d.node_id = any ($2)',
        t.tbl, t.skb) using query, node_ids;
end
$$;
comment on function agent.similarity(bigint[], vector) is
    'Agent toolkit: cosine similarity of the given nodes'' document vectors to `query` (one row per node that has a vector).';

create or replace function agent.neighbours(node_ids bigint[], relation text default null)
returns table (src bigint, relation text, dst bigint)
language sql stable security definer set search_path = pg_catalog, stark, public, pg_temp as $$
    -- every edge touching one of node_ids, turned so that src is that node (edges are followed either way)
    with skb as (select stark.skb_id(agent.current_skb()) as id)
    select e.src, e.relation, e.dst from stark.edge e, skb
    where e.skb_id = skb.id and e.src = any (node_ids) and (neighbours.relation is null or e.relation = neighbours.relation)
    union
    select e.dst, e.relation, e.src from stark.edge e, skb
    where e.skb_id = skb.id and e.dst = any (node_ids) and (neighbours.relation is null or e.relation = neighbours.relation)
$$;
comment on function agent.neighbours(bigint[], text) is
    'Agent toolkit: the edges (src, relation, dst) touching any of `node_ids`, either direction, turned so that src is one of them (of one relation if given).';

create or replace function agent.neighbours(node_id bigint, relation text default null)
returns table (src bigint, relation text, dst bigint)
language sql stable security definer set search_path = pg_catalog, stark, public, pg_temp as $$
    select n.src, n.relation, n.dst from agent.neighbours(array[node_id], relation) n
$$;
comment on function agent.neighbours(bigint, text) is
    'Agent toolkit: agent.neighbours of a single node (small models write it this way).';

create or replace function agent.match_name(name text, k int default 5)
returns table (node_id bigint, type text, name text, exact boolean)
language sql stable security definer set search_path = pg_catalog, stark, public, pg_temp as $$
    select c.node_id, c.type, c.name, c.exact
    from stark.focus_name_candidates(agent.current_skb(), match_name.name, greatest(k, 1)) c
    limit greatest(k, 1)
$$;
comment on function agent.match_name(text, int) is
    'Agent toolkit: the nodes whose name matches `name` (same name but for case and punctuation first, then the best BM25 name matches).';

revoke all on all functions in schema agent from public;
grant usage on schema agent to stark_agent;
grant select on agent.node, agent.node_text, agent.edge to stark_agent;
grant execute on function agent.bm25(text, int, text), agent.vss(vector, int), agent.similarity(bigint[], vector),
    agent.neighbours(bigint[], text), agent.neighbours(bigint, text), agent.match_name(text, int) to stark_agent;
