#!/usr/bin/env bash
# make test's long stages in two lanes at once: the unit tests in this terminal, and beside
# them the stages named (make passes BESIDE_UNIT: notebooks, validate, book, browser), one
# after another, into a log file that is printed whole when both lanes have ended.
#   bash .ci/lanes.sh STAGE...   (make test-stages runs it with BESIDE_UNIT, after lint and
#                                check-lock; a lane stops at its first failing stage)
# Why: the unit stage keeps a 2-core machine about half busy (measured: 387 s of CPU in
# 709 s; it waits on pip, on kernels starting and on subprocesses), and the other stages do
# not depend on it, so running them beside it takes minutes off `make test` (a fresh-clone
# .ci/run on 2 cores, 2026-12-07: 1434 s one after another, 930 s in two lanes). The lanes
# share nothing but the PostgreSQL server (the notebooks do not use it) and the grading
# sandbox's uid blocks (each grading process locks its own).
# MAKE: the make to run (set by make itself). LANES=1 runs the stages one after another.
# Exits 0 only when both lanes passed; says which one failed.
set -uo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
if [ "$#" = 0 ]; then
  echo "usage: bash .ci/lanes.sh STAGE... (the make targets to run beside \`make unit\`)" >&2
  exit 2
fi
other_stages=("$@")

if [ "${LANES:-2}" = 1 ]; then
  exec "$make" --no-print-directory unit "${other_stages[@]}"
fi

log=$(mktemp "${TMPDIR:-/tmp}/mlinfra-lane.XXXXXX")
echo "make test: ${other_stages[*]} run beside the unit tests (LANES=1: one after another);"
echo "  their output goes to $log and is printed when both lanes end"
set -m  # the other lane gets a process group of its own, so an interrupt stops all of it
"$make" --no-print-directory -j1 "${other_stages[@]}" >"$log" 2>&1 &
other=$!
set +m
trap 'kill -- "-$other" 2>/dev/null; rm -f "$log"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

unit=0
"$make" --no-print-directory unit || unit=$?
stages=0
wait "$other" || stages=$?
echo
echo "---- ${other_stages[*]} (run beside the unit tests) ----"
cat "$log"
echo "---- lanes: unit exit $unit; ${other_stages[*]} exit $stages ----"
[ "$unit" = 0 ] && [ "$stages" = 0 ]
