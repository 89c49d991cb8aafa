#!/usr/bin/env bash
# Runs pytest from the project venv (or $VENV's). "No tests collected" (exit 5) is a failure: a green run
# must mean tests ran.
set -uo pipefail
cd "$(dirname "$0")/.."
"${VENV:-.venv}"/bin/python -m pytest "$@"
rc=$?
if [[ $rc -eq 5 ]]; then
    echo "pytest collected no tests in: $*" >&2
    exit 1
fi
exit $rc
