#!/usr/bin/env bash
# `make demo-upgrade`: the real case replayed as the upgrade it was (examples/demo-upgrade.yml): a sandbox host with
# the emulator serves SGLang 0.5.10 on Triton 3.5.1 with its tuned MoE configs (examples/demo-upgrade/before.yml),
# then playbooks/upgrade.yml upgrades it to 0.5.11 on Triton 3.6.0: the configs lost are predicted before any restart,
# retuned on the canary with the engine, the canary A/B decides; then the report's path, and teardown.
# Arguments go to both ansible-playbook runs (-e key=value, -v, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
reason=$($py -c 'from tests.sandbox.fleet import unsupported_reason; print(unsupported_reason() or "")' 2>&1)
if [[ -n $reason ]]; then
    echo "make demo-upgrade: cannot run here: $reason" >&2
    exit 1
fi
$py -m tests.sandbox down >/dev/null 2>&1 || true  # a fleet left by an interrupted run
trap '$py -m tests.sandbox down' EXIT
$py -m tests.sandbox up --hosts 1 --emulator || exit 1
run_id=demo-upgrade-$(date -u +%Y%m%dT%H%M%SZ)
playbook() { PATH=$PWD/.venv/bin:$PATH ansible-playbook -i inventory -e @examples/demo-upgrade.yml "$@"; }
playbook examples/demo-upgrade/before.yml "$@" || exit 1
playbook playbooks/upgrade.yml -e run_id="$run_id" "$@"
status=$?
report=runs/$run_id/upgrade/gpu1/upgrade.md
if [[ -f $report ]]; then
    sed -n '/^## Startup facts/q;p' "$report"  # the decision, the versions and the MoE configs
    echo "The canary's report (old against new): $report"
fi
exit $status
