#!/usr/bin/env bash
# `make demo-upgrade`: the real case replayed as the upgrade it was (examples/demo-upgrade.yml): a sandbox host with
# the emulator serves SGLang 0.5.10 on Triton 3.5.1 with its tuned MoE configs (examples/demo-upgrade/before.yml),
# then playbooks/upgrade.yml: it predicts before anything restarts (the configs 0.5.11 on Triton 3.6.0 would lose),
# retunes them on the canary with the engine, and the canary A/B decides; then the first prediction, the report's
# decision and configs and its path, and teardown. tests/integration/test_upgrade_canary.py runs the same.
# Arguments go to every ansible-playbook run (-e key=value, -v, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/demo-sandbox.sh demo-upgrade
run_id=demo-upgrade-$(date -u +%Y%m%dT%H%M%SZ)
playbook() { PATH=$PWD/.venv/bin:$PATH ansible-playbook -i inventory -e @examples/demo-upgrade.yml "$@"; }
playbook examples/demo-upgrade/before.yml "$@" || exit 1
# The upgrade: the prediction before anything restarts (prediction_before.json), the retune on the canary, its A/B,
# the promotion.
playbook playbooks/upgrade.yml -e run_id="$run_id" "$@"
status=$?
# prediction_before.json when the carry or the retune changed what the release finds, else the one prediction
for prediction in runs/$run_id/upgrade/gpu1/prediction{_before,}.json; do
    [[ -f $prediction ]] || continue
    echo "The prediction before anything restarted ($prediction):"
    $py -c 'import json, sys; print("\n".join(f"- {line}" for line in json.load(open(sys.argv[1]))["summary"]))' "$prediction"
    break
done
report=runs/$run_id/upgrade/gpu1/upgrade.md
if [[ -f $report ]]; then
    sed -n '/^## Startup facts/q;p' "$report"  # the decision, the versions and the MoE configs
    echo "The canary's report (old against new): $report"
fi
exit $status
