-- Named statements about the embedded server's own settings (stark_pg/db/embedded.py).

-- name: reset_synchronous_commit()!
-- Earlier versions tuned new clusters with synchronous_commit = off, server-wide: a commit could be
-- reported before it was on disk. ALTER SYSTEM cannot run in a transaction: use an autocommit connection.
alter system reset synchronous_commit;

-- name: reload_configuration()$
select pg_reload_conf();
