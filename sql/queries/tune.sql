-- stark.tuned_setting: a method's defaults for an SKB, chosen on its train split by `stark-pg tune`.

-- name: tuned_setting(skb_id, method)^
-- The stored setting with where it came from (None when there is none).
select options, query_set, queries, metric, value, run_id, chosen_at
from stark.tuned_setting where skb_id = :skb_id and method = :method;

-- name: store_tuned_setting(skb_id, method, options, query_set, queries, metric, value, run_id, grid)!
insert into stark.tuned_setting (skb_id, method, options, query_set, queries, metric, value, run_id, grid)
values (:skb_id, :method, cast(:options as jsonb), :query_set, :queries, :metric, :value, :run_id,
        cast(:grid as jsonb))
on conflict (skb_id, method) do update
    set options = excluded.options, query_set = excluded.query_set, queries = excluded.queries,
        metric = excluded.metric, value = excluded.value, run_id = excluded.run_id, grid = excluded.grid,
        chosen_at = now();

-- name: forget_tuned_setting(skb_id, method)$
with gone as (delete from stark.tuned_setting where skb_id = :skb_id and method = :method returning 1)
select count(*) from gone;
