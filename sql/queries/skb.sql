-- Named statements for storing, listing and dropping SKBs (loaded with aiosql by stark_pg.resources).

-- One writer per SKB name (stark_pg.skb.locks): loads, drops and index builds of a name queue behind
-- each other. The `$` suffix makes aiosql run the statement and read its value (without a suffix it
-- returns a lazy cursor that never runs, and no lock is taken). Session and transaction locks on the
-- same key exclude each other.

-- name: try_lock_skb_name(name)$
-- The name's lock until the transaction ends, if no one holds it: true when taken.
select pg_try_advisory_xact_lock(hashtext('stark-pg skb ' || :name));

-- name: lock_skb_name(name)$
-- The name's lock until the transaction ends, waiting for whoever holds it.
select pg_advisory_xact_lock(hashtext('stark-pg skb ' || :name));

-- name: try_lock_skb_name_session(name)$
-- The same lock held until released (index builds commit many transactions), if no one holds it.
select pg_try_advisory_lock(hashtext('stark-pg skb ' || :name));

-- name: lock_skb_name_session(name)$
select pg_advisory_lock(hashtext('stark-pg skb ' || :name));

-- name: unlock_skb_name_session(name)$
select pg_advisory_unlock(hashtext('stark-pg skb ' || :name));

-- name: find_skb_id(name)$
select skb_id from stark.skb where name = :name;

-- name: create_skb(name, source, format, meta)$
insert into stark.skb (name, source, format, meta)
values (:name, :source, :format, cast(:meta as jsonb))
returning skb_id;

-- name: update_skb_meta(skb_id, meta)!
update stark.skb set meta = cast(:meta as jsonb), loaded_at = now() where skb_id = :skb_id;

-- name: delete_skb_rows(skb_id)!
select stark.delete_skb_rows(:skb_id);

-- name: retire_replaced_skb(skb_id)!
-- The old version of a replaced SKB: its rows go, its emptied edge partition stays until drop_orphan_tables.
select stark.delete_skb_rows(:skb_id, keep_tables => true);

-- name: drop_orphan_tables(keep)$
select stark.drop_orphan_tables(:keep);

-- name: carry_over_skb(old_id, new_id)$
-- A replacing load hands the old SKB's derived rows to the new one: {table: rows moved}.
select stark.carry_over_skb(:old_id, :new_id);

-- name: rename_skb(skb_id, name)!
-- The last step of a replacing load: the new SKB takes the name (clock time: an eval run started
-- while the load ran is older than the data it would resume on).
update stark.skb set name = :name, loaded_at = clock_timestamp() where skb_id = :skb_id;

-- name: delete_queries_of_splits(skb_id, splits)!
delete from stark.query where skb_id = :skb_id and split = any(:splits);

-- name: list_skbs()
select skb_id, name, format, source, loaded_at, meta from stark.skb order by name;

-- name: count_nodes_by_type(skb_id)
select type, count(*) as n from stark.node where skb_id = :skb_id group by type order by n desc, type;

-- name: count_edges_by_relation(skb_id)
select relation, count(*) as n from stark.edge where skb_id = :skb_id group by relation order by n desc, relation;

-- name: count_queries_by_split(skb_id)
select split, count(*) as n from stark.query where skb_id = :skb_id group by split order by split;

-- name: count_what_drop_removes(skb_id)^
select (select count(*) from stark.node where skb_id = :skb_id) as nodes,
       (select count(*) from stark.query where skb_id = :skb_id) as queries,
       (select count(*) from stark.eval_run where skb_id = :skb_id) as runs;

-- name: count_fields(skb_id)
select field, count(*) as n from stark.node_field where skb_id = :skb_id group by field order by n desc, field;

-- name: node_ids(skb_id)
select node_id from stark.node where skb_id = :skb_id;

-- name: create_edge_partition(skb_id)$
-- A new SKB's edge partition, as a plain table to COPY into; returns its qualified name.
select stark.create_edge_partition(:skb_id);

-- name: attach_edge_partition(skb_id)$
-- The partition filled by the load gets its indexes (built in bulk), a check constraint that lets
-- ATTACH skip its validation scan, and joins stark.edge; the parent's indexes adopt the new ones.
select stark.attach_edge_partition(:skb_id);

-- name: build_edge_type_link(skb_name, rebuild)$
-- The typed-link summary of the SKB's graph (stark.edge_type_link) and its symmetry
-- (stark.edge_symmetry); returns the summary's rows. Built once per loaded version unless `rebuild`.
select stark.edge_type_link_build(:skb_name, :rebuild);

-- name: edge_type_link_rows(skb_id)$
select count(*) from stark.edge_type_link where skb_id = :skb_id;

-- name: edge_one_way(skb_id)$
-- How many of the SKB's edges lack their reverse (null: not checked yet; 0: all stored both ways).
select (select one_way from stark.edge_symmetry where skb_id = :skb_id);
