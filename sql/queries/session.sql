-- Named statements about one connection's own settings (stark_pg/db/settings.py).

-- name: setting_value(name)$
-- The setting's value now; null for a custom setting (such as stark.ef_search) never set.
select current_setting(:name, true);

-- name: set_local_setting(name, value)$
-- SET LOCAL: until the transaction ends (a savepoint's release keeps it). A null value resets it.
select set_config(:name, :value, true);
