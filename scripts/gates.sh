#!/usr/bin/env bash
# The quality gates (scripts/lint.sh) and the unit tests on Python 3.13 (scripts/unit-py313.sh) side by side: each
# is mostly one process on one core (ansible-test, pytest), so on CI's 2 cores the pair takes the longer one's time
# instead of the sum (~4 min of `make test`). Each writes its own log under .cache/logs; both logs are printed, in
# order, once both have ended, and the exit code is non-zero if either failed.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=.cache/logs
mkdir -p "$logs"
gates=(lint unit-py313)
declare -A pids
for gate in "${gates[@]}"; do
    bash "scripts/$gate.sh" >"$logs/$gate.log" 2>&1 &
    pids[$gate]=$!
done
trap 'kill "${pids[@]}" 2>/dev/null' INT TERM
failed=()
for gate in "${gates[@]}"; do
    wait "${pids[$gate]}" || failed+=("$gate")
done
for gate in "${gates[@]}"; do
    echo "=== $gate ($logs/$gate.log)"
    cat "$logs/$gate.log"
done
if ((${#failed[@]})); then
    echo "failed: ${failed[*]} (see $logs/)" >&2
    exit 1
fi
