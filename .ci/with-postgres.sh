#!/usr/bin/env bash
# Run a command (make test's stages) with a PostgreSQL server for the tracking suite, then
# print the summary of what ran on which backend.
#   bash .ci/with-postgres.sh make test-stages
# - MLINFRA_PG_URL already set: that server is used as it is.
# - Else, where PostgreSQL's server programs exist (.ci/start-postgres.sh --bin finds them):
#   a throwaway server in a fresh temporary folder on a free loopback port, exported as
#   MLINFRA_PG_URL, stopped and deleted when this script exits, whatever the outcome.
# - Else the tracking suite runs on SQLite only, and the summary says how to enable it.
# Exits with the command's status.
set -uo pipefail
cd "$(dirname "$0")/.."
here=$(pwd)

pgdata=""
stop_server() {
  if [ -n "$pgdata" ]; then
    MLINFRA_PGDATA=$pgdata bash "$here/.ci/start-postgres.sh" --stop
    rm -rf "$pgdata"
    pgdata=""
  fi
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "${MLINFRA_PG_URL:-}" ]; then
  postgres="ran on SQLite and on PostgreSQL (the server at MLINFRA_PG_URL, set by the caller)"
elif bash .ci/start-postgres.sh --bin >/dev/null 2>&1; then
  pgdata=$(mktemp -d "${TMPDIR:-/tmp}/mlinfra-pg.XXXXXX")
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if ! env_line=$(MLINFRA_PGDATA=$pgdata MLINFRA_PG_PORT=$port bash .ci/start-postgres.sh); then
    echo "make test: PostgreSQL is installed but a throwaway server did not start (above)." >&2
    echo "  Fix it, or point the suite at a server: MLINFRA_PG_URL=postgresql+psycopg://USER@HOST:PORT/DB make test" >&2
    exit 1
  fi
  eval "$env_line"
  export MLINFRA_PG_URL
  echo "make test: throwaway PostgreSQL server for the tracking suite: $MLINFRA_PG_URL"
  postgres="ran on SQLite and on PostgreSQL (a throwaway server on 127.0.0.1:$port, stopped at the end)"
else
  echo "make test: no PostgreSQL server programs found: the tracking suite runs on SQLite only (see the summary at the end)"
  postgres="SKIPPED on PostgreSQL, ran on SQLite only: no PostgreSQL server programs (initdb, pg_ctl) found. To enable it: apt-get install postgresql (then rerun make test), or set MLINFRA_PG_URL=postgresql+psycopg://USER@HOST:PORT/DB"
fi

"$@"
status=$?
stop_server

echo
echo "== make test summary =="
if [ "$status" -eq 0 ]; then
  echo "result: every stage passed"
else
  echo "result: FAILED (exit status $status; the first failing stage is reported above)"
fi
echo "tracking suite: $postgres"
exit "$status"
