#!/usr/bin/env bash
# `make demo`: sandbox fleet with the SGLang emulator -> tune.yml on inventory/ (the embedded default) -> teardown.
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
PATH=$PWD/.venv/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ansible-playbook tune.yml -i inventory "$@"
rc=$?
if [[ $rc -eq 0 ]]; then
    echo "report: $PWD/runs/latest/report.html (also report.md, summary.json in $(readlink -f runs/latest))"
fi
exit $rc
