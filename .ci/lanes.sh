#!/usr/bin/env bash
# make test's long stages in lanes that run at once: each argument is one lane, a quoted list
# of make targets run one after another (a lane stops at its first failing stage). The first
# lane prints to this terminal; the others write to log files printed whole when every lane
# has ended. Every stage's wall time is printed, and a summary line per lane at the end.
#   bash .ci/lanes.sh "unit-quick book browser" "unit-waiting" "validate"
# (make test-stages passes TEST_LANES, after lint and check-lock).
# Why lanes: most stages keep a 2-core machine far from busy (the unit tests wait on pip, on
# sandboxed kernels starting, on timeouts and on subprocesses; the grading tests are mostly
# waiting), and no stage depends on another lane's, so running them side by side takes
# minutes off `make test` (a fresh-clone .ci/run on 2 cores, 2026-12-07: 1434 s one after
# another, 930 s in two lanes). The lanes share nothing but the PostgreSQL server (only the
# tracking tests use it) and the grading sandbox's uid blocks (each grading process locks
# its own).
# MAKE: the make to run (set by make itself). LANES=1 runs every stage one after another.
# Exits 0 only when every lane passed; says which one failed.
set -uo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
if [ "$#" = 0 ]; then
  echo "usage: bash .ci/lanes.sh LANE... (each LANE a quoted list of make targets)" >&2
  exit 2
fi

# run_lane "STAGE STAGE ...": the stages one after another, each timed; stops at a failure.
run_lane() {
  local stage start status=0 lane_start
  lane_start=$(date +%s)
  for stage in $1; do
    start=$(date +%s)
    "$make" --no-print-directory "$stage"
    status=$?
    echo "lanes: stage $stage: $(( $(date +%s) - start )) s, exit $status"
    [ "$status" = 0 ] || break
  done
  echo "lanes: lane \"$1\": $(( $(date +%s) - lane_start )) s, exit $status"
  return "$status"
}

if [ "${LANES:-}" = 1 ]; then
  for lane in "$@"; do
    run_lane "$lane" || exit $?
  done
  exit 0
fi

logs=() pids=()
first=$1
shift
echo "make test: ${#} lane(s) beside \"$first\" (LANES=1: one after another); their output"
echo "  is printed when every lane has ended:"
set -m  # each lane gets a process group of its own, so an interrupt stops all of it
for lane in "$@"; do
  log=$(mktemp "${TMPDIR:-/tmp}/mlinfra-lane.XXXXXX")
  echo "  \"$lane\" -> $log"
  run_lane "$lane" >"$log" 2>&1 &
  pids+=("$!") logs+=("$log")
done
set +m
cleanup() {
  for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null; done
  rm -f "${logs[@]}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

run_lane "$first"
statuses=("$?") names=("$first")
for k in "${!pids[@]}"; do
  wait "${pids[$k]}"
  statuses+=("$?") names+=("${*:k+1:1}")
  echo
  echo "---- lane \"${names[-1]}\" (run beside \"$first\") ----"
  cat "${logs[$k]}"
done
echo
failed=0
for k in "${!names[@]}"; do
  echo "---- lanes: \"${names[$k]}\": exit ${statuses[$k]}"
  [ "${statuses[$k]}" = 0 ] || failed=1
done
exit "$failed"
