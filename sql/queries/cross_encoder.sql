-- Named statements of the cross-encoder (stark_pg/models/cross_encoder.py, stark_pg/train/cross_encoder.py):
-- the documents it reads, its stored row in stark.trained_model, and the training questions taken out of
-- fusion's pool while fusion ranks them.

-- name: cross_encoder_documents(skb, node_ids)
-- The document of each candidate node, as stark.render_document writes it (in no particular order).
select n.node_id, stark.render_document(n.skb_id, n.node_id, false)
from stark.node n
where n.skb_id = stark.skb_id(:skb) and n.node_id = any(:node_ids);

-- name: cross_encoder_save(skb_id, name, base_model, path, settings, history, metrics)!
-- Store (or replace) a trained cross-encoder's row; its weights are files under `path`.
insert into stark.trained_model (skb_id, kind, name, base_model, path, settings, history, metrics)
values (:skb_id, 'cross-encoder', :name, :base_model, :path, cast(:settings as jsonb), cast(:history as jsonb),
        cast(:metrics as jsonb))
on conflict (skb_id, kind, name) do update
    set base_model = excluded.base_model, path = excluded.path, settings = excluded.settings,
        history = excluded.history, metrics = excluded.metrics, trained_at = now();

-- name: cross_encoder_load(skb_id, name)^
-- A trained cross-encoder's row, or nothing.
select name, base_model, path, settings, history, metrics, trained_at::text
from stark.trained_model where skb_id = :skb_id and kind = 'cross-encoder' and name = :name;

-- name: cross_encoder_names(skb_id)
-- The cross-encoders trained on an SKB (for the error that names them when one is missing).
select name from stark.trained_model where skb_id = :skb_id and kind = 'cross-encoder' order by name;

-- name: cross_encoder_out_of_pool(skb_id, query_ids)!
-- Inside a transaction that is rolled back (stark_pg/train/cross_encoder.py): these questions leave
-- whatever split they are in, so that fusion's nearest-question features rank them as new questions
-- (what a val question sees of train), never finding themselves or the other questions set apart.
update stark.query set split = 'holdout' where skb_id = :skb_id and query_id = any(:query_ids);
