-- Named statements for training the dense retriever (`stark-pg train dense`, stark_pg/train/dense.py).

-- name: dense_shortlists(skb, query_ids, embeddings, model, k, exclude_answers)
-- Each query's exact VSS ranking under `model` (its vector given, in the order of `query_ids`), the
-- first `k` nodes kept. With exclude_answers, the query's answers are skipped before the `k` are
-- counted: the hard negatives, VSS's top false positives, never an answer. Without it, the plain
-- top k: the candidates the held-out queries are re-ranked among at each epoch.
select u.query_id, s.node_id, s.rank
from unnest(cast(:query_ids as bigint[]), cast(:embeddings as vector[])) with ordinality as u(query_id, vec, ord)
join stark.query q on q.skb_id = stark.skb_id(:skb) and q.query_id = u.query_id
cross join lateral (
    select v.node_id, row_number() over (order by v.score desc, v.node_id) as rank
    from stark.vss(:skb, u.vec,
                   cast(:k as int) + case when :exclude_answers then cardinality(q.answer_ids) else 0 end,
                   :model, true) v
    where not (:exclude_answers and v.node_id = any(q.answer_ids))
    order by v.score desc, v.node_id
    limit cast(:k as int)
) s
order by u.ord, s.rank;

-- name: save_trained_model(skb_id, kind, name, base_model, path, settings, history, metrics)!
insert into stark.trained_model (skb_id, kind, name, base_model, path, settings, history, metrics)
values (:skb_id, :kind, :name, :base_model, :path, cast(:settings as jsonb), cast(:history as jsonb),
        cast(:metrics as jsonb))
on conflict (skb_id, kind, name) do update
    set base_model = excluded.base_model, path = excluded.path, settings = excluded.settings,
        history = excluded.history, metrics = excluded.metrics, trained_at = now();

-- name: trained_model_skbs(kind, name)
-- The SKBs that have a trained model of this kind and name (a dense model's files are global, by name).
select s.name from stark.trained_model t join stark.skb s on s.skb_id = t.skb_id
where t.kind = :kind and t.name = :name
order by s.name;

-- name: trained_dense_fold(skb_id, name)^
-- Whether the SKB has a trained dense model of this name, and the fold it was trained without
-- (`train dense --fold k/n`: [k, n]; NULL when trained on the whole split).
select settings -> 'fold' from stark.trained_model
where skb_id = :skb_id and kind = 'dense' and name = :name;
