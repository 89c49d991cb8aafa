#!/usr/bin/env bash
# `make demo`: sandbox fleet with the SGLang emulator -> tune.yml on inventory/ (the embedded default) -> teardown.
# Arguments go to `llmops-sglang tune` (-e key=value or -e @file, --stages, -v, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/demo-sandbox.sh demo
# The CLI runs tune.yml through the Python API (ansible-runner), as operators and the tests run it; it prints the
# run's tables, its directory and where the report is.
PATH=$PWD/.venv/bin:$PATH .venv/bin/llmops-sglang tune -i inventory "$@"
