#!/bin/sh
# The standby: on first start, copy the primary with pg_basebackup -R (which writes standby.signal and
# primary_conninfo) into a physical replication slot of its own; then run PostgreSQL as the image does.
# hot_standby_feedback keeps the primary's cleanup from cancelling a long search on the standby.
set -e
PGDATA="${PGDATA:-/var/lib/postgresql/18/docker}"
export PGDATA
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 0700 "$PGDATA"
    export PGPASSWORD="$STARK_PG_REPLICATION_PASSWORD"
    copy() { gosu postgres pg_basebackup -h "$STARK_PG_PRIMARY_HOST" -U replicator -D "$PGDATA" -R -X stream \
                 -S "$STARK_PG_SLOT" -c fast "$@"; }
    # the slot is made with the copy; kept on the primary from an earlier standby, it is reused
    until copy -C || copy; do
        echo "waiting for the primary at $STARK_PG_PRIMARY_HOST..."
        rm -rf "${PGDATA:?}"/*
        sleep 2
    done
    unset PGPASSWORD
    # spelled out (the last value in the file wins): the password, and the slot's name as application_name,
    # which pg_stat_replication and `stark-pg db status` show
    echo "primary_conninfo = 'host=$STARK_PG_PRIMARY_HOST user=replicator password=$STARK_PG_REPLICATION_PASSWORD application_name=$STARK_PG_SLOT'" \
        >> "$PGDATA/postgresql.auto.conf"
fi
exec docker-entrypoint.sh postgres -c hot_standby_feedback=on
