#!/usr/bin/env bash
# `make test`: every gate and every test, in two phases, so that CI's 2 cores are busy in the first and the
# measurements have the machine to themselves in the second.
#   1. at once: the integration modules that do not measure throughput, in two lanes (the modules split by the time
#      each takes: tests/integration/conftest.py, MODULE_SECONDS), each lane with a sandbox fleet of its own (its
#      bridge, subnet, state directory and name prefix: tests/sandbox/fleet.py's LLMOPS_SANDBOX_* variables); beside
#      them, at a lower priority, the quality gates, each in a stream of its own: lint (scripts/lint.sh: sanity,
#      galaxy-importer, ansible-lint), the unit and conformance tests on Python 3.11, and the unit tests and sanity on
#      3.13 with the highest supported ansible-core (scripts/unit-py313.sh). The lanes wait on sandbox hosts most of
#      the time (all their modules in one lane: 22 min on under half a core); the gates are busy processes (24 min of
#      one core in a row), so they take the rest of the 2 cores.
#   2. when all of those have ended: the integration modules marked `measuring` (their assertions rest on measured
#      throughput: verdicts, curves, the search's optimum), alone, so no other load can tip a verdict (22 min).
# One integration run beside the gates (phase 1 taking that run's 25 min) made `make test` 43-50 min on a 2-core
# machine (2026-12-07); this, about 40. Each part writes its log under .cache/logs (the measuring modules' to the
# terminal), the gates' with their wall time; the logs are printed, in order, once all have ended, and the exit code
# is non-zero if anything failed. Where the integration tests cannot run (not root, no namespaces) it fails at once,
# before any gate starts, unless LLMOPS_SKIP_INTEGRATION=1 skips them on purpose (scripts/integration.sh); the run's
# last line then says they were not run.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/integration.sh --check || exit 1
logs=.cache/logs
mkdir -p "$logs"
rm -f "$logs"/*.failed
gates=(lint unit-py311 unit-py313)
lanes=(1 2)
# At the lowest priority: the lanes wait on timeouts of their own. Each pytest with a base directory of its own
# (pytest empties the one it is given; unit-py313.sh's: .cache/pytest-unit-py313).
run_gate() {
    case $1 in
        unit-py311) nice -n 19 bash scripts/pytest.sh tests/unit tests/conformance --basetemp=.cache/pytest-unit-py311 ;;
        unit-py313) nice -n 19 bash scripts/unit-py313.sh ;;
        lint) nice -n 19 bash scripts/lint.sh ;;
    esac
}
# Lane 1 is the sandbox's default fleet; lane N > 1 has its own name prefix, bridge, subnet and state directory.
run_lane() {
    local lane=$1 env=()
    ((lane > 1)) && env=(LLMOPS_SANDBOX_FLEET="l$lane" LLMOPS_SANDBOX_BRIDGE="llmops-br$lane"
                         LLMOPS_SANDBOX_SUBNET="10.213.$lane" LLMOPS_SANDBOX_STATE_DIR="$PWD/.sandbox-lane$lane")
    env "${env[@]}" bash scripts/integration.sh -m "not measuring" --lane "$lane/${#lanes[@]}" \
        --basetemp=".cache/pytest-integration-$lane"
}
# A part's output and wall time in its log, its failure as a file for the summary once everything has ended.
run_part() {
    local name=$1 start=$SECONDS status=0
    shift
    "$@" >"$logs/$name.log" 2>&1 || status=$?
    echo "gates: $name ended with status $status after $((SECONDS - start)) s" >>"$logs/$name.log"
    ((status == 0)) || touch "$logs/$name.failed"
}
# The emulator's payload once, before the lanes' fleets boot: each fleet would build it into the same directory.
if [[ ${LLMOPS_SKIP_INTEGRATION:-} != 1 ]]; then
    "${VENV:-.venv}"/bin/python -c "from tests.sandbox.emulator_payload import build_emulator; build_emulator()" \
        || exit 1
fi
# Each part in a process group of its own (job control on), so that an interrupt stops every process of it.
set -m
parts=()
for gate in "${gates[@]}"; do
    run_part "$gate" run_gate "$gate" &
    parts+=($!)
done
for lane in "${lanes[@]}"; do
    run_part "integration-lane$lane" run_lane "$lane" &
    parts+=($!)
done
set +m
trap 'for pid in "${parts[@]}"; do kill -- -"$pid" 2>/dev/null; done; exit 130' INT TERM
wait "${parts[@]}"
bash scripts/integration.sh -m measuring --basetemp=.cache/pytest-integration
measuring=$?
failed=()
for part in "${lanes[@]/#/integration-lane}" "${gates[@]}"; do
    echo "=== $part ($logs/$part.log)"
    cat "$logs/$part.log"
    [[ -e $logs/$part.failed ]] && failed+=("$part")
done
((measuring == 0)) || failed+=(integration-measuring)
if ((${#failed[@]})); then
    echo "failed: ${failed[*]} (see $logs/)" >&2
    exit 1
fi
if [[ ${LLMOPS_SKIP_INTEGRATION:-} == 1 ]]; then
    echo "passed: ${gates[*]}; integration NOT RUN (LLMOPS_SKIP_INTEGRATION=1)" >&2
fi
