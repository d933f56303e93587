-- Removing an SKB: every table that holds its rows, in one call (there are no cascading foreign keys
-- on the bulk tables, so that loads stay fast). Later migrations extend this function as they add
-- per-SKB tables (indexes, embeddings, evaluation runs).

create or replace function stark.delete_skb_rows(target int) returns void
language plpgsql as $$
begin
    delete from stark.edge where skb_id = target;
    delete from stark.node_field where skb_id = target;
    delete from stark.query where skb_id = target;
    delete from stark.node where skb_id = target;
    delete from stark.skb where skb_id = target;
end
$$;
comment on function stark.delete_skb_rows(int) is 'Deletes every row of one SKB (by skb_id). Prefer `stark-pg drop NAME`.';
