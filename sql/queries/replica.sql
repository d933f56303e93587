-- Named statements about hot standbys of the embedded server (stark_pg/db/replica.py) and the
-- replication lag `stark-pg db status` shows for any primary.

-- name: replication_settings()^
-- Whether the server can feed standbys: wal_level must be replica (or logical) and a WAL sender free.
select current_setting('wal_level') as wal_level,
       current_setting('max_wal_senders')::int as max_wal_senders,
       current_setting('max_replication_slots')::int as max_replication_slots;

-- name: set_wal_level_replica()!
-- ALTER SYSTEM cannot run in a transaction: use an autocommit connection. Takes effect at a restart.
alter system set wal_level = 'replica';

-- name: set_max_wal_senders()!
alter system set max_wal_senders = 10;

-- name: set_max_replication_slots()!
alter system set max_replication_slots = 10;

-- name: set_max_slot_wal_keep_size()!
-- A stopped standby's slot keeps the WAL it has not received; past this much the slot is given up
-- (wal_status 'lost', shown by `stark-pg db replica list`) instead of filling the disk.
alter system set max_slot_wal_keep_size = '4GB';

-- name: drop_replication_slot(slot)$
-- The slot of a removed standby: how many were dropped (0 or 1). PostgreSQL refuses an active one
-- (object_in_use): the WAL sender of a standby just stopped may need a moment to exit.
select count(pg_drop_replication_slot(slot_name)) from pg_replication_slots where slot_name = :slot;

-- name: in_recovery()$
select pg_is_in_recovery();

-- name: standbys()
-- Every standby the server knows, connected or not: the WAL senders (pg_stat_replication) and the
-- physical replication slots (a stopped standby of the embedded server keeps its slot). Bytes behind
-- count from the primary's current WAL position to what the standby replayed (for a disconnected slot:
-- to what it still needs); replay_lag is PostgreSQL's measured delay of the last replayed WAL (null
-- once caught up and idle).
select coalesce(r.application_name, s.slot_name) as name,
       s.slot_name,
       coalesce(r.state, 'disconnected') as state,
       r.client_addr::text as client_addr,
       pg_wal_lsn_diff(pg_current_wal_lsn(), coalesce(r.replay_lsn, s.restart_lsn))::bigint as bytes_behind,
       extract(epoch from r.replay_lag)::float8 as replay_lag_s,
       s.wal_status
from pg_stat_replication r
full join (select * from pg_replication_slots where slot_type = 'physical') s on s.active_pid = r.pid
order by 1;

-- name: caught_up(name)$
-- Whether the standby `name` (its application name) has replayed everything the primary wrote so far.
select coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false)
from pg_stat_replication where application_name = :name;
