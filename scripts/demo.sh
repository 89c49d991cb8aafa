#!/usr/bin/env bash
# `make demo`: sandbox fleet with the SGLang emulator -> tune.yml on inventory/ (the embedded default) -> teardown.
# Arguments go to `llmops-sglang tune` (-e key=value or -e @file, --stages, -v, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
reason=$($py -c 'from tests.sandbox.fleet import unsupported_reason; print(unsupported_reason() or "")' 2>&1)
if [[ -n $reason ]]; then
    echo "make demo: cannot run here: $reason" >&2
    exit 1
fi
$py -m tests.sandbox down >/dev/null 2>&1 || true  # a fleet left by an interrupted run
trap '$py -m tests.sandbox down' EXIT
$py -m tests.sandbox up --hosts 1 --emulator || exit 1
# The CLI runs tune.yml through the Python API (ansible-runner), as operators and the tests run it; it prints the
# run's tables, its directory and where the report is.
PATH=$PWD/.venv/bin:$PATH .venv/bin/llmops-sglang tune -i inventory "$@"
