#!/usr/bin/env bash
# `make test`: the integration tests (tests/integration, Python 3.11) in the foreground, and beside them, one after
# another on the other core, the quality gates (scripts/lint.sh), the unit and conformance tests on Python 3.11 and
# the unit tests and sanity on 3.13 with the highest supported ansible-core (scripts/unit-py313.sh). The integration tests wait on sandbox hosts much of the time
# (~35 min alone); the gates are each one busy process (~16 min in a row alone, ~20 beside them), so on CI's 2 cores
# they run in the integration tests' idle time instead of before them: a clean clone's `make test` took 33 min
# (the integration tests 31 of them) where the gates followed by every test on 3.11 took 48. The integration
# modules that assert on measured throughput run last (marker `measuring`, tests/integration/conftest.py), after
# the gates have ended, so the gates' load cannot tip a verdict. Each background gate
# writes its own log under .cache/logs; the logs are printed, in order, once all have ended, and the exit code is
# non-zero if anything failed. Where the integration tests cannot run (not root, no namespaces) it fails at once,
# before any gate starts, unless LLMOPS_SKIP_INTEGRATION=1 skips them on purpose (scripts/integration.sh); the
# run's last line then says they were not run.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/integration.sh --check || exit 1
logs=.cache/logs
mkdir -p "$logs"
gates=(lint unit-py311 unit-py313)
# At a lower priority: the integration tests are the longer path and wait on timeouts of their own, the gates have
# time to spare.
run_gate() {
    case $1 in
        unit-py311) nice -n 10 bash scripts/pytest.sh tests/unit tests/conformance ;;
        *) nice -n 10 bash "scripts/$1.sh" ;;
    esac
}
rm -f "$logs/failed"
# In a process group of its own (job control on for this one job), so that an interrupt stops every process of it.
set -m
(
    failed=()
    for gate in "${gates[@]}"; do
        run_gate "$gate" >"$logs/$gate.log" 2>&1 || failed+=("$gate")
    done
    printf '%s\n' "${failed[@]}" >"$logs/failed"
) &
background=$!
set +m
trap 'kill -- -"$background" 2>/dev/null; exit 130' INT TERM
# Its own pytest base directory: pytest empties the one it is given, and the gates use the default one meanwhile.
bash scripts/integration.sh --basetemp=.cache/pytest-integration
integration=$?
wait "$background"
for gate in "${gates[@]}"; do
    echo "=== $gate ($logs/$gate.log)"
    cat "$logs/$gate.log"
done
mapfile -t failed < <(grep . "$logs/failed" 2>/dev/null)
((integration == 0)) || failed+=(integration)
if ((${#failed[@]})); then
    echo "failed: ${failed[*]} (see $logs/)" >&2
    exit 1
fi
if [[ ${LLMOPS_SKIP_INTEGRATION:-} == 1 ]]; then
    echo "passed: ${gates[*]}; integration NOT RUN (LLMOPS_SKIP_INTEGRATION=1)" >&2
fi
