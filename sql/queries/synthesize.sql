-- `stark-pg synthesize` (stark_pg/synthesize/): the SKB's vocabulary, a split's settings and questions.

-- name: synth_relations(skb_id)
select distinct relation from stark.edge where skb_id = :skb_id;

-- name: synth_node_types(skb_id)
select distinct type from stark.node where skb_id = :skb_id;

-- name: synth_node_names(skb_id, node_ids)
select node_id, name from stark.node where skb_id = :skb_id and node_id = any(:node_ids);

-- name: synth_run_settings(skb_id, split)$
select settings from stark.synth_run where skb_id = :skb_id and split = :split;

-- name: synth_create_run(skb_id, split, settings)!
insert into stark.synth_run (skb_id, split, settings) values (:skb_id, :split, cast(:settings as jsonb));

-- name: synth_done(skb_id, split)
-- Every planned item already taken, kept or dropped (a re-run skips them), with its outcome.
select seq, outcome from stark.synth_question where skb_id = :skb_id and split = :split;

-- name: synth_documents(skb_id, node_ids)
-- The documents the LLM steps read, as the rerankers read them (no relations: the template says those).
select node_id, stark.render_document(skb_id, node_id, false) from stark.node
where skb_id = :skb_id and node_id = any(:node_ids);

-- name: synth_document_lengths(skb_id, node_ids)
-- How much text each candidate has: a gold answer needs enough to read requirements from.
select node_id, length(stark.render_document(skb_id, node_id, false)) from stark.node
where skb_id = :skb_id and node_id = any(:node_ids);

-- name: synth_mean_call_seconds(provider, model)$
-- This model's mean time per call so far, for a dry run's estimate (NULL: no call timed yet).
select avg(seconds) from stark.llm_cache where provider = :provider and model = :model and seconds is not null;

-- name: synth_outcomes(skb_id, split)
-- A synthesized split's items by outcome, with their LLM requests and seconds.
select outcome, count(*), sum(calls), sum(seconds) from stark.synth_question
where skb_id = :skb_id and split = :split group by outcome order by outcome;

-- name: synth_add_query(skb_id, query_id, split, body, answer_ids)!
insert into stark.query (skb_id, query_id, split, body, answer_ids)
values (:skb_id, :query_id, :split, :body, :answer_ids);

-- name: synth_add_question(skb_id, split, seq, query_id, template, hops, anchors, anchor_names, candidates, answers, mode, outcome, gold, requirements, verdicts, model, prompt_version, calls, seconds)!
insert into stark.synth_question (skb_id, split, seq, query_id, template, hops, anchors, anchor_names, candidates,
                                  answers, mode, outcome, gold, requirements, verdicts, model, prompt_version, calls,
                                  seconds)
values (:skb_id, :split, :seq, :query_id, :template, :hops, :anchors, :anchor_names, :candidates, :answers, :mode,
        :outcome, :gold, cast(:requirements as jsonb), cast(:verdicts as jsonb), :model, :prompt_version, :calls,
        :seconds);

-- name: synth_questions(skb_id, split)
-- A synthesized split's questions with their provenance, in plan order.
select q.query_id, q.body, q.answer_ids, s.seq, s.template, s.hops, s.anchors, s.anchor_names, s.candidates,
       s.mode, s.gold, s.requirements, s.verdicts, s.model, s.prompt_version, s.calls, s.seconds
from stark.synth_question s join stark.query q on q.skb_id = s.skb_id and q.query_id = s.query_id
where s.skb_id = :skb_id and s.split = :split
order by s.seq;

-- name: synth_split_queries(skb_id, split)
-- Any split's questions (real or synthesized) with their template and hops where known.
select q.query_id, q.body, q.answer_ids, s.template, s.hops
from stark.query q left join stark.synth_question s on s.skb_id = q.skb_id and s.query_id = q.query_id
where q.skb_id = :skb_id and q.split = :split
order by q.query_id;

-- name: synth_fully_verified(skb_id, split)
-- LLM items kept with every candidate verified (none prefiltered): the sample the prefilter's recall is measured on.
select seq, gold, candidates, answers, requirements -> 'textual' as requirements
from stark.synth_question
where skb_id = :skb_id and split = :split and mode = 'llm' and outcome = 'kept'
  and not exists (select 1 from jsonb_each(verdicts) v where v.value ? 'prefiltered')
order by seq;
