-- Removing an SKB: every table of schema `stark` that has an skb_id column, and every per-SKB index.
-- One general mechanism instead of a list to keep in step: tables added by later migrations (lexical
-- postings, embeddings, evaluation runs) are covered as soon as they exist. Per-SKB partial indexes
-- (e.g. HNSW over one SKB's vectors) and per-SKB partitions (stark.edge__skb<id>) follow the naming
-- convention `<anything>__skb<skb_id>`: they are dropped rather than emptied.

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
        select t.relname as table_name
        from pg_class t join pg_namespace ns on ns.oid = t.relnamespace
        where ns.nspname = 'stark' and t.relkind = 'r' and t.relname like '%\_\_skb' || target
    loop
        execute format('drop table if exists stark.%I', tbl.table_name);
    end loop;
    for tbl in
        select t.relname as table_name
        from pg_class t
        join pg_namespace ns on ns.oid = t.relnamespace
        join pg_attribute a on a.attrelid = t.oid and a.attname = 'skb_id' and not a.attisdropped
        where ns.nspname = 'stark' and t.relkind in ('r', 'p') and not t.relispartition and t.relname <> 'skb'
        order by t.relname
    loop
        execute format('delete from stark.%I where skb_id = $1', tbl.table_name) using target;
    end loop;
    delete from stark.skb where skb_id = target;
end
$$;
comment on function stark.delete_skb_rows(int) is
    'Deletes every row of one SKB (by skb_id) from every stark table, and its per-SKB indexes. Prefer `stark-pg drop NAME`.';

-- Edges are partitioned by SKB (see schema/0001_core.sql): a load creates the SKB's partition as a
-- plain table, fills it with COPY, then attaches it with its indexes built in bulk.
create or replace function stark.create_edge_partition(target int) returns text
language plpgsql as $$
declare
    part text := 'edge__skb' || target;
begin
    execute format('create table stark.%I (like stark.edge)', part);
    return 'stark.' || part;
end
$$;

create or replace function stark.attach_edge_partition(target int) returns void
language plpgsql as $$
declare
    part text := 'edge__skb' || target;
begin
    execute format('create index %I on stark.%I (skb_id, src, relation, dst)', part || '_out', part);
    execute format('create index %I on stark.%I (skb_id, dst, relation, src)', part || '_in', part);
    execute format('alter table stark.%I add constraint %I check (skb_id = %s)', part, part || '_key', target);
    execute format('alter table stark.edge attach partition stark.%I for values in (%s)', part, target);
end
$$;
comment on function stark.attach_edge_partition(int) is
    'Indexes a freshly loaded edge partition in bulk and attaches it to stark.edge (used by loads).';
