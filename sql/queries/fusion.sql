-- Named statements for learned fusion (stark_pg/train/fusion.py, stark_pg/retrieve/fusion.py).

-- name: fusion_feature_names(skb, model, trained_dense)$
select stark.fusion_feature_names(:skb, :model, :trained_dense);

-- name: fusion_features(skb, query, embedding, model, pool, knn, link, dense_models, dense_qvecs, pool_splits, pair_fields, pair_scorers, engine)
-- pair_fields and pair_scorers NULL: the SKB's pairs (stark.fusion_pairs, a scan of its fields, relations
-- and chunk kinds); training passes them, read once for all its questions. engine: the BM25 engine of the
-- lexical shortlists (the same features on either; 'auto' takes the pg_textsearch indexes)
select node_id, f from stark.fusion_features(:skb, :query, :embedding, :model, :pool, :knn, :link,
                                             dense_models => :dense_models, dense_qvecs => :dense_qvecs,
                                             pool_splits => :pool_splits, pair_fields => :pair_fields,
                                             pair_scorers => :pair_scorers, engine => :engine)
order by node_id;

-- name: save_fusion_model(skb_id, name, embed_model, features, boosters, score_sql, settings, metrics, importance)!
insert into stark.fusion_model (skb_id, name, embed_model, features, boosters, score_sql, settings, metrics, importance)
values (:skb_id, :name, :embed_model, cast(:features as text[]), cast(:boosters as text[]), :score_sql,
        cast(:settings as jsonb), cast(:metrics as jsonb), cast(:importance as jsonb))
on conflict (skb_id, name) do update
    set embed_model = excluded.embed_model, features = excluded.features, boosters = excluded.boosters,
        score_sql = excluded.score_sql, settings = excluded.settings, metrics = excluded.metrics,
        importance = excluded.importance, trained_at = now();

-- name: load_fusion_model(skb_id, name)^
select name, embed_model, features, boosters, score_sql, settings, metrics, importance, trained_at
from stark.fusion_model where skb_id = :skb_id and name = :name;

-- name: fusion_model_version(skb_id, name)^
-- Which version of the stored row is visible: the transaction that wrote it and its place (an update
-- writes a new version, elsewhere); search keeps a loaded model while this stays the same.
select xmin::text, ctid::text from stark.fusion_model where skb_id = :skb_id and name = :name;

-- name: fusion_model_names(skb_id)
select name from stark.fusion_model where skb_id = :skb_id order by name;

-- name: fusion_embed_models(skb_id)
-- The query encoders of the SKB's fusion models: each needs the training questions embedded with it.
select distinct embed_model from stark.fusion_model where skb_id = :skb_id order by embed_model;

-- name: hold_out_queries(skb_id, query_ids)!
-- Cross-validation's held-out fold (stark_pg/train/fusion.py), inside a transaction that is rolled back:
-- out of the training split, so that no question's nearest-question features draw on them.
update stark.query set split = 'holdout' where skb_id = :skb_id and query_id = any(:query_ids) and split = 'train';

-- name: link_queries(skb, split, depth)$
-- The best name matches of the split's questions that have none stored for their text (stark.query_link:
-- the ent_* features find the training questions naming an entity through them); rows added.
select stark.link_queries(:skb, :split, :depth);
