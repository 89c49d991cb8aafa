#!/usr/bin/env bash
# `make demo-slo`: `make demo` (scripts/demo.sh: sandbox host, emulator, tune.yml, teardown) running the goodput
# search instead of the flags and MoE stages (examples/demo-slo.yml), then the recommendation with its goodput.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/demo.sh -e stages=baseline,search,report -e @examples/demo-slo.yml "$@" || exit $?
PYTHONPATH=$PWD/collections .venv/bin/python - runs/latest/summary.json <<'PY'
import json
import sys

from ansible_collections.llmops.sglang.plugins.plugin_utils.run_report import search_lines

with open(sys.argv[1], encoding="utf-8") as summary:
    print("\n".join(search_lines(json.load(summary))))
PY
