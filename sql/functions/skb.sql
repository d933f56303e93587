-- Removing an SKB: every table of schema `stark` that has an skb_id column, and every per-SKB index.
-- One general mechanism instead of a list to keep in step: tables added by later migrations (lexical
-- postings, embeddings, evaluation runs) are covered as soon as they exist. Per-SKB partial indexes
-- (e.g. HNSW over one SKB's vectors) and per-SKB partitions (stark.edge__skb<id>) follow the naming
-- convention `<anything>__skb<skb_id>`: they are dropped rather than emptied.
--
-- Rows are deleted first, and the drops come last: dropping an index or a partition takes an
-- AccessExclusive lock on its table (stark.edge, stark.emb_doc_<m>) that every other SKB's queries
-- wait for until the transaction ends, so those locks are taken just before the commit. A partitioned
-- table (stark.edge) is not emptied row by row: its rows live in the per-SKB partition that is dropped.
-- A replacing load empties the old version's per-SKB tables (its edge partition) row by row with
-- `keep_tables` instead of dropping them: dropping a table is not MVCC-safe (a query whose snapshot
-- predates the commit would see the old SKB's nodes but none of its edges), deleting rows is. The
-- empty table is dropped later, in a short transaction of its own (stark.drop_orphan_tables, after
-- the next load or at a drop).
drop function if exists stark.delete_skb_rows(int);
create or replace function stark.delete_skb_rows(target int, keep_tables boolean default false) returns void
language plpgsql as $$
declare
    tbl record;
    idx record;
begin
    for tbl in
        select t.relname as table_name
        from pg_class t
        join pg_namespace ns on ns.oid = t.relnamespace
        join pg_attribute a on a.attrelid = t.oid and a.attname = 'skb_id' and not a.attisdropped
        where ns.nspname = 'stark' and t.relkind = 'r' and not t.relispartition and t.relname <> 'skb'
          and t.relname not like '%\_\_skb%'
        order by t.relname
    loop
        execute format('delete from stark.%I where skb_id = $1', tbl.table_name) using target;
    end loop;
    delete from stark.skb where skb_id = target;
    -- a replaced version's per-SKB indexes stay with its emptied tables: a search whose snapshot predates
    -- the replace resolved its name to this skb_id and reads them by name (pg_textsearch's index, the
    -- HNSW index's settings) after the commit; stark.drop_orphan_tables drops them with the tables
    for idx in
        select i.relname
        from pg_class i join pg_namespace ns on ns.oid = i.relnamespace
        where ns.nspname = 'stark' and i.relkind = 'i' and i.relname like '%\_\_skb' || target
          and not keep_tables
    loop
        execute format('drop index if exists stark.%I', idx.relname);
    end loop;
    for tbl in
        select t.relname as table_name
        from pg_class t join pg_namespace ns on ns.oid = t.relnamespace
        where ns.nspname = 'stark' and t.relkind = 'r' and t.relname like '%\_\_skb' || target
    loop
        if keep_tables then
            execute format('delete from stark.%I', tbl.table_name);
        else
            execute format('drop table if exists stark.%I', tbl.table_name);
        end if;
    end loop;
end
$$;
comment on function stark.delete_skb_rows(int, boolean) is
    'Deletes every row of one SKB (by skb_id) from every stark table, and its per-SKB indexes and tables. Prefer `stark-pg drop NAME`.';

-- Per-SKB tables and indexes (`..__skb<id>`) whose SKB no longer exists, but `keep` (the one a load has
-- just emptied: older snapshots may still read it): what replacing loads left behind, empty.
create or replace function stark.drop_orphan_tables(keep int default null) returns int
language plpgsql as $$
declare
    tbl record;
    dropped int := 0;
begin
    for tbl in
        select t.relname as table_name
        from pg_class t join pg_namespace ns on ns.oid = t.relnamespace
        where ns.nspname = 'stark' and t.relkind = 'r' and t.relname ~ '__skb[0-9]+$'
          and substring(t.relname from '__skb([0-9]+)$')::int is distinct from keep
          and not exists (select 1 from stark.skb s where s.skb_id = substring(t.relname from '__skb([0-9]+)$')::int)
    loop
        execute format('drop table if exists stark.%I', tbl.table_name);
        dropped := dropped + 1;
    end loop;
    -- and the per-SKB indexes over shared tables (HNSW, DiskANN over stark.emb_*) of such SKBs
    for tbl in
        select i.relname as index_name
        from pg_class i join pg_namespace ns on ns.oid = i.relnamespace
        where ns.nspname = 'stark' and i.relkind = 'i' and i.relname ~ '__skb[0-9]+$'
          and substring(i.relname from '__skb([0-9]+)$')::int is distinct from keep
          and not exists (select 1 from stark.skb s where s.skb_id = substring(i.relname from '__skb([0-9]+)$')::int)
    loop
        execute format('drop index if exists stark.%I', tbl.index_name);
        dropped := dropped + 1;
    end loop;
    return dropped;
end
$$;
comment on function stark.drop_orphan_tables(int) is
    'Drops the per-SKB tables (edge partitions, emptied) and indexes of SKBs that no longer exist, left by replacing loads.';

-- Replacing an SKB builds the new version beside the old one (a new skb_id), then hands over what
-- was derived from the old one and is worth keeping, then deletes the old one, all in one transaction
-- (stark_pg/skb/store.py). The load itself writes the *source* tables (node, node_field, edge, query);
-- every other table with an skb_id holds derived data: lexical postings and vectors (keyed by node,
-- with the hash of the text they were made from, so the incremental index builds re-do only what
-- changed), evaluation runs (history), trained models, query vectors (re-embedded when the query's
-- text changed: body_md5). Those rows move to the new skb_id; per-SKB indexes (`__skb<id>`) are not
-- moved: they are rebuilt by the next index build. Nor is the typed-link summary of the old edges
-- (stark.edge_type_link) or their symmetry (stark.edge_symmetry): they describe edges the new version
-- may not have, and go with the old one.
-- Returns {table: rows moved} for the tables that had any.
create or replace function stark.carry_over_skb(old_id int, new_id int) returns jsonb
language plpgsql as $$
declare
    tbl record;
    moved bigint;
    report jsonb := '{}'::jsonb;
begin
    for tbl in
        select t.relname as table_name
        from pg_class t
        join pg_namespace ns on ns.oid = t.relnamespace
        join pg_attribute a on a.attrelid = t.oid and a.attname = 'skb_id' and not a.attisdropped
        where ns.nspname = 'stark' and t.relkind = 'r' and not t.relispartition
          and t.relname not in ('skb', 'node', 'node_field', 'edge', 'query', 'edge_type_link', 'edge_symmetry')
          and t.relname not like '%\_\_skb%'
        order by t.relname
    loop
        execute format('update stark.%I set skb_id = $2 where skb_id = $1', tbl.table_name)
            using old_id, new_id;
        get diagnostics moved = row_count;
        if moved > 0 then
            report := report || jsonb_build_object(tbl.table_name, moved);
        end if;
    end loop;
    return report;
end
$$;
comment on function stark.carry_over_skb(int, int) is
    'Moves the derived rows (indexes, vectors, eval runs, models) of SKB old_id to new_id (used by a replacing load).';

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
