#!/usr/bin/env bash
# The integration suite in its two groups, on one local cluster (docs/testing.md):
#   1. parallel: every test not marked `serial`, on IT_WORKERS pytest-xdist workers (default 3),
#      each test in its own namespace;
#   2. serial: the tests marked `serial`, one at a time with nothing else running (the real
#      engine; tests that hold or change what every test shares: a CRD, whole GPU nodes).
# The cluster is started once before both groups and stopped after them, unless it was already
# up (then it is left running). Arguments go to both pytest runs (a file, -k, ...); a group that
# selects no test is not a failure. Each group's JUnit XML goes to $REPORTS (default .reports/).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-.venv/bin}"
WORKERS="${IT_WORKERS:-3}"
REPORTS="${REPORTS:-.reports}"
mkdir -p "${REPORTS}"

log() { printf '[test-integration %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

was_up=0
"${BIN}/llmservice-dev" cluster status >/dev/null 2>&1 && was_up=1
start=$SECONDS
"${BIN}/llmservice-dev" cluster up || { log "the local cluster did not start"; exit 1; }
log "cluster up in $((SECONDS - start))s"
if [[ ${was_up} == 0 && "${LLMSERVICE_KEEP_CLUSTER:-}" != 1 ]]; then
  trap '"${BIN}/llmservice-dev" cluster down >/dev/null' EXIT
fi

# pytest's exit 5 is "no test selected": a group an argument filtered out entirely.
run_group() { # name, pytest args...
  local name="$1"; shift
  local t0=$SECONDS rc=0
  log "group ${name}: start"
  "${BIN}/pytest" tests/integration -q -p no:cacheprovider --durations=15 \
    --junitxml="${REPORTS}/integration-${name}.xml" "$@" || rc=$?
  [[ ${rc} == 5 ]] && rc=0
  log "group ${name}: exit ${rc} in $((SECONDS - t0))s"
  return "${rc}"
}

rc=0
run_group parallel -m "not serial" -n "${WORKERS}" --dist load --maxschedchunk 1 "$@" || rc=1
run_group serial -m serial "$@" || rc=1
exit "${rc}"
