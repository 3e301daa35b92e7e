#!/usr/bin/env bash
# Runs one tier of `make test` (the command after its name) and prints its wall time, passed or not,
# so that CI's log gives each tier's time (docs/testing.md keeps them).
# Usage: tools/tier.sh NAME COMMAND [ARGS...]
set -uo pipefail
name="$1"
shift
start=$SECONDS
"$@"
status=$?
echo "=== tier $name: $((SECONDS - start)) s (exit status $status)"
exit "$status"
