#!/usr/bin/env bash
# Runs a CPU-bound command beside a main one that leaves cores idle, under Linux's idle scheduling
# policy (SCHED_IDLE: it runs only on a core nothing else wants), so that it takes only what the main
# command leaves (`make test`: vLLM's scheduler suites beside the e2e tier, which waits on servers
# and engines ~40% of the time on 2 cores). The side command's output is printed whole once it ends,
# after the main command's; if the main command fails, the side one is stopped and its output so far
# printed. Exit status: the main command's if it failed, else the side command's.
# Usage: tools/beside.sh "SIDE COMMAND" MAIN COMMAND [ARGS...]
set -uo pipefail
side="$1"
shift
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# Its own process group, so that stopping it stops everything it started.
setsid chrt --idle 0 bash -c "$side" >"$log" 2>&1 &
side_pid=$!
"$@"
status=$?
[[ $status -ne 0 ]] && kill -TERM -- "-$side_pid" 2>/dev/null
wait "$side_pid"
side_status=$?
cat "$log"
if [[ $status -ne 0 ]]; then
    echo "=== beside: stopped \"$side\" (the main command failed)"
    exit "$status"
fi
exit "$side_status"
