#!/usr/bin/env bash
# Start a PostgreSQL server on loopback for the tracking tests and print the URL to use.
#   eval "$(bash .ci/start-postgres.sh)"   ->  exports MLINFRA_PG_URL
# Needs Debian's `postgresql` package (apt-get install postgresql). Idempotent.
set -euo pipefail
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PGDATA=${MLINFRA_PGDATA:-/tmp/mlinfra-pg}
PORT=${MLINFRA_PG_PORT:-54329}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA"
  su postgres -s /bin/sh -c "$PGBIN/initdb -D $PGDATA -A trust -U postgres" >/dev/null
fi
if ! su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $PGDATA status" >/dev/null 2>&1; then
  su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $PGDATA -o '-p $PORT -k /tmp -c listen_addresses=127.0.0.1' -l $PGDATA/server.log -w start" >/dev/null
fi
if ! su postgres -s /bin/sh -c "psql -h 127.0.0.1 -p $PORT -U postgres -tAc \"SELECT 1 FROM pg_database WHERE datname='mlinfra'\"" | grep -q 1; then
  su postgres -s /bin/sh -c "psql -h 127.0.0.1 -p $PORT -U postgres -qc 'CREATE DATABASE mlinfra'" >/dev/null
fi
echo "export MLINFRA_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$PORT/mlinfra"
