-- Removing an SKB: every table of schema `stark` that has an skb_id column, and every per-SKB index.
-- One general mechanism instead of a list to keep in step: tables added by later migrations (lexical
-- postings, embeddings, evaluation runs) are covered as soon as they exist. Per-SKB partial indexes
-- (e.g. HNSW over one SKB's vectors) follow the naming convention `<anything>__skb<skb_id>`.

create or replace function stark.delete_skb_rows(target int) returns void
language plpgsql as $$
declare
    tbl record;
    idx record;
begin
    for idx in
        select i.relname
        from pg_class i join pg_namespace ns on ns.oid = i.relnamespace
        where ns.nspname = 'stark' and i.relkind = 'i' and i.relname like '%\_\_skb' || target
    loop
        execute format('drop index if exists stark.%I', idx.relname);
    end loop;
    for tbl in
        select c.table_name
        from information_schema.columns c
        join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name
        where c.table_schema = 'stark' and c.column_name = 'skb_id' and t.table_type = 'BASE TABLE'
          and c.table_name <> 'skb'
        order by c.table_name
    loop
        execute format('delete from stark.%I where skb_id = $1', tbl.table_name) using target;
    end loop;
    delete from stark.skb where skb_id = target;
end
$$;
comment on function stark.delete_skb_rows(int) is
    'Deletes every row of one SKB (by skb_id) from every stark table, and its per-SKB indexes. Prefer `stark-pg drop NAME`.';
