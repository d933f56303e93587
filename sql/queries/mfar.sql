-- Named statements of mFAR: fields, per-pair scores, the weighted ranking, trained models.

-- name: mfar_fields(skb, model)
select field, lexical, dense from stark.mfar_fields(:skb, :model);

-- name: mfar_field_scores(skb, query, embedding, model, lexical, dense, pool, include, k1, b, engine)
select node_id, field, scorer, score
from stark.mfar_field_scores(:skb, :query, :embedding, :model, cast(:lexical as text[]), cast(:dense as text[]),
                             :pool, cast(:include as bigint[]), :k1, :b, :engine);

-- name: mfar_top(skb, query, embedding, model, fields, scorers, weights, means, scales, k, pool, k1, b, engine)
select node_id, score
from stark.mfar(:skb, :query, :embedding, :model, cast(:fields as text[]), cast(:scorers as text[]),
                cast(:weights as float8[]), cast(:means as float8[]), cast(:scales as float8[]), cast(:k as int), :pool, :k1, :b,
                :engine);

-- name: save_mfar_model(skb_id, name, variant, embed_model, fields, scorers, gate_weight, gate_bias, means, scales, gammas, settings, history, metrics)!
insert into stark.mfar_model (skb_id, name, variant, embed_model, fields, scorers, gate_weight, gate_bias, means,
                              scales, gammas, settings, history, metrics)
values (:skb_id, :name, :variant, :embed_model, :fields, :scorers, :gate_weight, :gate_bias, :means, :scales,
        :gammas, cast(:settings as jsonb), cast(:history as jsonb), cast(:metrics as jsonb))
on conflict (skb_id, name) do update
    set variant = excluded.variant, embed_model = excluded.embed_model, fields = excluded.fields,
        scorers = excluded.scorers, gate_weight = excluded.gate_weight, gate_bias = excluded.gate_bias,
        means = excluded.means, scales = excluded.scales, gammas = excluded.gammas, settings = excluded.settings,
        history = excluded.history, metrics = excluded.metrics, trained_at = now();

-- name: load_mfar_model(skb_id, name)^
select name, variant, embed_model, fields, scorers, gate_weight, gate_bias, means, scales, gammas, settings,
       history, metrics, trained_at
from stark.mfar_model where skb_id = :skb_id and name = :name;

-- name: list_mfar_models(skb_id)
select name, variant, cardinality(fields), metrics, trained_at from stark.mfar_model
where skb_id = :skb_id order by name;
