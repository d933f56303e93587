-- Named statements about the embedded server's own settings (stark_pg/db/embedded.py).

-- name: reset_synchronous_commit()!
-- Earlier versions tuned new clusters with synchronous_commit = off, server-wide: a commit could be
-- reported before it was on disk. ALTER SYSTEM cannot run in a transaction: use an autocommit connection.
alter system reset synchronous_commit;

-- name: reload_configuration()$
select pg_reload_conf();

-- name: extensions(names)
-- The extensions asked about (in that order): the version the server offers (null: not on the server)
-- and the one created in this database (null: not created), and whether the library is in
-- shared_preload_libraries (pg_textsearch only loads from there; null where this role may not read
-- that setting: pg_settings hides it, where current_setting() would raise).
select n.name,
       e.default_version as available,
       e.installed_version as installed,
       n.name = any (string_to_array(replace((select s.setting from pg_settings s
                                              where s.name = 'shared_preload_libraries'), ' ', ''), ',')) as preloaded
from unnest(cast(:names as text[])) with ordinality as n(name, ord)
left join pg_available_extensions e on e.name = n.name
order by n.ord;

-- name: memory_settings(names)
-- The server's values of the resource profile's settings (stark_pg/db/profile.py), with their units.
select name, current_setting(name) from pg_settings where name = any(:names) order by name;
