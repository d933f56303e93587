#!/bin/sh
# Run once by the postgres image when it creates the primary's cluster (docker-entrypoint-initdb.d):
# a role the standby streams WAL as, and a rule letting it in with a password from any address.
set -e
psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" \
     -v password="$STARK_PG_REPLICATION_PASSWORD" <<'SQL'
create role replicator with replication login password :'password';
SQL
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
