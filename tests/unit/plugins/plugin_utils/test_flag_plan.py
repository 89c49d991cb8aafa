# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""flag_plan: the flags stage's plan of one candidate from what the preflight of this run found (what flags.yml and
flag_trial.yml read and decided in Jinja before issue #41 item 4), and the action recording it in the trial folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action.flag_plan import ActionModule
from ansible_collections.llmops.sglang.plugins.plugin_utils.flag_plan import candidate_plan, preflight_findings, trial_records
from tests.unit.plugins.action.controller import run_controller_action

# What the preflight found on an SM120 host: the allreduce fusion cannot take effect there.
FINDING = {"id": "allreduce-fusion-arch", "flag": "enable_flashinfer_allreduce_fusion", "failed_conditions": ["sm_in"],
           "message": "enable_flashinfer_allreduce_fusion will not take effect because ...", "source": "sglang"}
FINDINGS = {"flashinfer-allreduce-fusion": [FINDING], "fused-moe-sum-all-reduce": []}
FUSION = {"name": "flashinfer-allreduce-fusion", "args": {"enable_flashinfer_allreduce_fusion": True}}
SUM = {"name": "fused-moe-sum-all-reduce", "args": {"enable_fused_moe_sum_all_reduce": True}}


def write_preflight(run_dir: Path, findings: dict | None = FINDINGS, sglang: str | None = "0.5.11") -> None:
    host_dir = run_dir / "preflight" / "gpu1"
    host_dir.mkdir(parents=True)
    if findings is not None:
        (host_dir / "flag_findings.json").write_text(json.dumps(findings))
    if sglang is not None:
        (host_dir / "environment.json").write_text(json.dumps({"versions": {"sglang": sglang}}))


def test_the_preflights_findings_and_release_are_read_from_the_run(tmp_path):
    assert preflight_findings(tmp_path, "gpu1") == ({}, None)  # no preflight in this run
    write_preflight(tmp_path)
    assert preflight_findings(tmp_path, "gpu1") == (FINDINGS, "0.5.11")


def test_an_ineffective_candidate_is_skipped_with_its_records_and_a_measured_one_keeps_its_findings():
    skipped = candidate_plan(FUSION, FINDINGS)
    assert skipped["skip"] and trial_records(skipped) == skipped["records"]
    assert skipped["records"]["decision.json"] == skipped["decision"] and skipped["records"]["sweep.json"] is None
    forced = candidate_plan({**FUSION, "force": "yes"}, FINDINGS)
    assert not forced["skip"] and trial_records(forced) == {"findings.json": forced}
    assert trial_records(candidate_plan(SUM, FINDINGS)) == {"findings.json": None}
    with pytest.raises(ValueError, match="flashinfer-allreduce-fusion.force"):
        candidate_plan({**FUSION, "force": "always"}, FINDINGS)


def run_action(monkeypatch, args: dict, check_mode: bool = False) -> dict:
    """The action's run with these arguments, the options it is not given at their documented defaults."""
    options = {"stage": "flags", "skip_ineffective": True, "host": None, **args}
    return run_controller_action(monkeypatch, ActionModule, options, check_mode=check_mode,
                                 task_vars={"inventory_hostname": "gpu1"})


def test_the_action_records_a_skip_in_the_trial_folder_and_removes_an_earlier_measurement(tmp_path, monkeypatch):
    write_preflight(tmp_path)
    trial = tmp_path / "flags" / "gpu1" / "trials" / "flashinfer-allreduce-fusion"
    trial.mkdir(parents=True)
    (trial / "sweep.json").write_text("{}")
    assert run_action(monkeypatch, {"run_dir": str(tmp_path), "candidate": FUSION}, check_mode=True)["skip"]
    assert (trial / "sweep.json").exists() and not (trial / "decision.json").exists()
    result = run_action(monkeypatch, {"run_dir": str(tmp_path), "candidate": FUSION})
    assert result["skip"] and result["dir"] == str(trial) and result["changed"]
    assert sorted(path.name for path in trial.iterdir()) == ["decision.json"]
    assert json.loads((trial / "decision.json").read_text())["action"] == "skip"
    assert not run_action(monkeypatch, {"run_dir": str(tmp_path), "candidate": FUSION})["changed"]


def test_the_action_measures_what_the_preflight_did_not_rule_out(tmp_path, monkeypatch):
    result = run_action(monkeypatch, {"run_dir": str(tmp_path), "candidate": FUSION})  # no preflight in this run
    assert not result["skip"] and not result["changed"] and not (tmp_path / "flags").exists()
    write_preflight(tmp_path)
    forced = run_action(monkeypatch, {"run_dir": str(tmp_path), "candidate": FUSION, "skip_ineffective": "false"})
    findings = tmp_path / "flags" / "gpu1" / "trials" / "flashinfer-allreduce-fusion" / "findings.json"
    assert not forced["skip"] and json.loads(findings.read_text())["forced_by"] == "tuning_run_skip_ineffective: false"
    with pytest.raises(AnsibleActionFail, match="flag_plan: the input must be a candidate"):
        run_action(monkeypatch, {"run_dir": str(tmp_path), "candidate": {"args": {}}})
