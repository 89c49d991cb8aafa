#!/usr/bin/env bash
# `make test`: the integration tests (tests/integration, Python 3.11) in the foreground, and beside them, at lower
# priorities, the quality gates in two streams: lint (scripts/lint.sh: sanity, galaxy-importer, ansible-lint; ~7 min
# of one core) in one; in the other, one after another, the unit and conformance tests on Python 3.11 (~12 min) and
# the unit tests and sanity on 3.13 with the highest supported ansible-core (scripts/unit-py313.sh, ~9 min). The
# integration tests wait on sandbox hosts most of the time (their modules that measure nothing: 22 min alone, on
# under half a core), so the gates take the rest of CI's 2 cores. The gates one after another (24 core-minutes) ended
# after those modules, and the modules that assert on measured throughput (marker `measuring`, run last:
# tests/integration/conftest.py) ran beside the last of them; in two streams they end with those modules (a clean
# clone, 2026-12-07: both after 25.5 min, then the measuring modules alone for 22.5; 49 min in all; the integration
# tests alone take 44). Two lanes of integration modules beside the gates made the 2 cores CPU-bound and took longer
# (51 min). Each gate writes its
# own log under .cache/logs, with its wall time; the logs are printed, in order, once all have ended, and the exit
# code is non-zero if anything failed. Where the integration tests cannot run (not root, no namespaces) it fails at
# once, before any gate starts, unless LLMOPS_SKIP_INTEGRATION=1 skips them on purpose (scripts/integration.sh); the
# run's last line then says they were not run.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/integration.sh --check || exit 1
logs=.cache/logs
mkdir -p "$logs"
rm -f "$logs"/*.failed
gates=(lint unit-py311 unit-py313)
# The unit chain is the longer path of the gates, lint has the most time to spare; the integration tests, at the
# default priority, wait on timeouts of their own.
run_gate() {
    case $1 in
        unit-py311) nice -n 10 bash scripts/pytest.sh tests/unit tests/conformance ;;
        unit-py313) nice -n 10 bash scripts/unit-py313.sh ;;
        lint) nice -n 15 bash scripts/lint.sh ;;
    esac
}
# A gate's output and wall time in its log, its failure as a file for the summary once everything has ended.
run_logged() {
    local gate=$1 start=$SECONDS status=0
    run_gate "$gate" >"$logs/$gate.log" 2>&1 || status=$?
    echo "gates: $gate ended with status $status after $((SECONDS - start)) s" >>"$logs/$gate.log"
    ((status == 0)) || touch "$logs/$gate.failed"
}
# Each stream in a process group of its own (job control on), so that an interrupt stops every process of it.
set -m
run_logged lint &
streams=($!)
# One after another: both run scripts/ee.sh (tests/unit/awx), which rebuilds dist/ and context/, and build the
# emulator's wheelhouse (.cache/emulator-wheelhouse) when it is missing.
(run_logged unit-py311; run_logged unit-py313) &
streams+=($!)
set +m
trap 'for pid in "${streams[@]}"; do kill -- -"$pid" 2>/dev/null; done; exit 130' INT TERM
# Its own pytest base directory: pytest empties the one it is given, and the gates use the default one meanwhile.
bash scripts/integration.sh --basetemp=.cache/pytest-integration
integration=$?
wait "${streams[@]}"
failed=()
for gate in "${gates[@]}"; do
    echo "=== $gate ($logs/$gate.log)"
    cat "$logs/$gate.log"
    [[ -e $logs/$gate.failed ]] && failed+=("$gate")
done
((integration == 0)) || failed+=(integration)
if ((${#failed[@]})); then
    echo "failed: ${failed[*]} (see $logs/)" >&2
    exit 1
fi
if [[ ${LLMOPS_SKIP_INTEGRATION:-} == 1 ]]; then
    echo "passed: ${gates[*]}; integration NOT RUN (LLMOPS_SKIP_INTEGRATION=1)" >&2
fi
