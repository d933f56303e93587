-- The agent retriever's runs and programs (tables: sql/schema/0011_agent.sql).

-- name: create_agent_run(skb_id, settings)$
insert into stark.agent_run (skb_id, settings) values (:skb_id, :settings) returning run_id;

-- name: finish_agent_run(run_id, categories, llm, seconds)!
update stark.agent_run set finished_at = now(), categories = :categories, llm = :llm, seconds = :seconds
where run_id = :run_id;

-- name: insert_agent_program(run_id, category, iteration, author, sql, status, error, batch_metrics, feedback)$
insert into stark.agent_program (run_id, category, iteration, author, sql, status, error, batch_metrics, feedback)
values (:run_id, :category, :iteration, :author, :sql, :status, :error, :batch_metrics, :feedback)
returning program_id;

-- name: set_agent_program_feedback(program_id, feedback)!
update stark.agent_program set feedback = :feedback where program_id = :program_id;

-- name: set_agent_program_holdout(program_id, holdout_metrics)!
update stark.agent_program set holdout_metrics = :holdout_metrics where program_id = :program_id;

-- name: choose_agent_program(program_id)!
update stark.agent_program set chosen = true where program_id = :program_id;

-- name: latest_agent_run(skb_id)$
-- The newest finished run of an SKB (NULL if none).
select max(run_id) from stark.agent_run where skb_id = :skb_id and finished_at is not null;

-- name: agent_run_of(skb_id, run_id)^
select run_id, settings, categories, llm, seconds, finished_at is not null as finished
from stark.agent_run where skb_id = :skb_id and run_id = :run_id;

-- name: chosen_agent_programs(run_id)
select category, program_id, iteration, sql, holdout_metrics
from stark.agent_program where run_id = :run_id and chosen order by category;

-- name: agent_programs(run_id)
select program_id, category, iteration, author, status, error, batch_metrics, holdout_metrics, chosen, sql
from stark.agent_program where run_id = :run_id order by category, iteration, program_id;

-- name: train_queries_with_answers(skb_id, split)
-- A split's queries with their answers and the answers' majority type (ties: the type's name).
select q.query_id, q.body, q.answer_ids,
       (select n.type from unnest(q.answer_ids) a(node_id)
        join stark.node n on n.skb_id = q.skb_id and n.node_id = a.node_id
        group by n.type order by count(*) desc, n.type limit 1) as answer_type
from stark.query q where q.skb_id = :skb_id and q.split = :split order by q.query_id;

-- name: agent_answer_context(skb_id, node_ids)
-- What feedback shows of an answer the program missed: its name, type and a few of its edges.
select n.node_id, n.type, n.name,
       (select array_agg(r order by r) from (
           select e.relation || ' -> ' || coalesce(m.name, e.dst::text) as r
           from stark.edge e left join stark.node m on m.skb_id = e.skb_id and m.node_id = e.dst
           where e.skb_id = n.skb_id and e.src = n.node_id order by e.relation, e.dst limit 4) x) as edges
from stark.node n where n.skb_id = :skb_id and n.node_id = any (:node_ids);
