#!/usr/bin/env bash
# Start a PostgreSQL server on loopback for the tracking tests and print the URL to use.
#   eval "$(bash .ci/start-postgres.sh)"   ->  exports MLINFRA_PG_URL (idempotent)
#   bash .ci/start-postgres.sh --stop      ->  stops that server (its data stays)
#   bash .ci/start-postgres.sh --bin       ->  prints the folder of initdb/pg_ctl, or fails
# MLINFRA_PGDATA (default /tmp/mlinfra-pg) and MLINFRA_PG_PORT (default 54329) choose the
# data folder and the port; `make test` uses .ci/with-postgres.sh, which picks a fresh
# folder and a free port and stops the server at the end.
# Needs PostgreSQL's server programs: apt-get install postgresql (Debian puts them under
# /usr/lib/postgresql/N/bin), or any initdb/pg_ctl on PATH. Trust authentication on
# 127.0.0.1 only, fsync off: a throwaway test server, never a place for real data.
# PostgreSQL refuses to run as root: root runs it as the `postgres` user (which Debian's
# package creates), a normal user runs it as themself.
set -euo pipefail
PGDATA=${MLINFRA_PGDATA:-/tmp/mlinfra-pg}
PORT=${MLINFRA_PG_PORT:-54329}

pg_bin() {
  local dir
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    # The real folder (PATH may hold symlinks), where createdb sits beside initdb.
    dir=$(dirname "$(readlink -f "$(command -v initdb)")")
    if [ -x "$dir/pg_ctl" ] && [ -x "$dir/createdb" ]; then
      echo "$dir"
      return
    fi
  fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin /usr/pgsql-*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/createdb" ]; then
      echo "$dir"
      return
    fi
  done
  echo "no PostgreSQL server programs (initdb, pg_ctl): apt-get install postgresql" >&2
  return 1
}

# Run a command line as the server's owner: `postgres` when we are root, else ourselves.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    su postgres -s /bin/sh -c "cd / && $1"
  else
    sh -c "$1"
  fi
}

PGBIN=$(pg_bin)
case "${1:-}" in
  --bin) echo "$PGBIN"; exit 0 ;;
  --stop)
    if [ -s "$PGDATA/PG_VERSION" ]; then
      as_owner "'$PGBIN/pg_ctl' -D '$PGDATA' -m fast -w stop" >/dev/null 2>&1 || true
    fi
    exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--bin|--stop]" >&2; exit 2 ;;
esac

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$PGDATA"; fi
  chmod 700 "$PGDATA"
  as_owner "'$PGBIN/initdb' -D '$PGDATA' -A trust -U postgres" >/dev/null
fi
if ! as_owner "'$PGBIN/pg_ctl' -D '$PGDATA' status" >/dev/null 2>&1; then
  # The Unix socket lives in the data folder: servers started side by side never collide.
  opts="-p $PORT -k $PGDATA -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
  if ! as_owner "'$PGBIN/pg_ctl' -D '$PGDATA' -o '$opts' -l '$PGDATA/server.log' -w start" >/dev/null; then
    echo "PostgreSQL did not start; the end of $PGDATA/server.log:" >&2
    tail -n 20 "$PGDATA/server.log" >&2 || true
    exit 1
  fi
fi
if ! out=$(as_owner "'$PGBIN/createdb' -h 127.0.0.1 -p $PORT -U postgres mlinfra" 2>&1); then
  case "$out" in
    *"already exists"*) ;;
    *) echo "$out" >&2; exit 1 ;;
  esac
fi
echo "export MLINFRA_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$PORT/mlinfra"
