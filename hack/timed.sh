#!/usr/bin/env bash
# timed.sh NAME COMMAND...: run COMMAND, then print and record (in $REPORTS/timings.tsv) how
# long it took; the suite report (hack/suite_report.py) prints the table at the end of CI.
set -uo pipefail
name="$1"; shift
reports="${REPORTS:-.reports}"
mkdir -p "${reports}"
start="$(date +%s.%N)"
rc=0
"$@" || rc=$?
took="$(awk -v s="${start}" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')"
printf '%s\t%s\t%s\n' "${name}" "${took}" "${rc}" >> "${reports}/timings.tsv"
printf '[timed %s] %s: %ss (exit %s)\n' "$(date +%H:%M:%S)" "${name}" "${took}" "${rc}" >&2
exit "${rc}"
