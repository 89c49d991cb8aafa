# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The one adoption policy of every stage (plugin_utils/adoption.py): what a stage starts from, the verdict on a
measurement, the record of what is adopted. The recorded demo run (tests/fixtures/run-demo, made by the 1.0.0
pipeline, whose adopted.json files use the names before 2.0.0) is the reference: the verdicts recomputed from its
records equal those it recorded."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import adoption

RUN = Path(__file__).resolve().parents[3] / "fixtures" / "run-demo"
HOST = "gpu1"
FUSION = RUN / "flags" / HOST / "trials" / "flashinfer-allreduce-fusion"
TUNED = ["E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json",
         "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"]


def read(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def unordered(record: dict) -> dict:
    """``record`` with its lists as sorted JSON texts: equal when they hold the same entries in any order."""
    return {key: sorted(json.dumps(entry, sort_keys=True) for entry in value) if isinstance(value, list) else value
            for key, value in record.items()}


def measured(directory: Path, failure: str | None = None) -> dict:
    """What measure.yml keeps of a measurement recorded in ``directory``."""
    return {"dir": str(directory), "failure": failure, "facts": read(directory / "facts.json"),
            "sweep": read(directory / "sweep.json"), "requested_args": read(directory / "requested_args.json"),
            "environment": read(directory / "environment.json")}


def test_a_stage_starts_from_the_latest_earlier_adoption_read_with_the_current_names():
    assert adoption.latest(RUN, HOST, "baseline") is None
    flags = adoption.latest(RUN, HOST, "flags")
    assert flags["stage"] == "baseline"
    assert flags["sweep_file"] == "baseline/gpu1/sweep.json" and flags["facts_file"] == "baseline/gpu1/facts.json"
    assert "sweep" not in flags and "facts" not in flags
    # the flags stage adopted nothing, so it recorded the baseline again; the MoE stage then adopted its configs
    assert adoption.latest(RUN, HOST, "moe_tune")["stage"] == "baseline"
    latest = adoption.latest(RUN, HOST, "report")
    assert latest["stage"] == "moe_tune" and latest["moe_configs"] == TUNED
    assert adoption.latest(RUN, "gpu9", "report") is None


@pytest.mark.parametrize(("record", "message"), [
    ({"args": {"chat_template": "chatml\nExecStartPre=+/bin/true"}}, "args.chat_template: contains a newline"),
    ({"environment": {"FOO": "x\nExecStartPre=+/bin/true"}}, "environment.FOO: contains a newline"),
    ({"environment": {"FOO BAR": "x"}}, "environment: 'FOO BAR' is not a variable name"),
])
def test_an_adopted_configuration_read_back_is_checked_like_the_deploys_inputs(tmp_path, record, message):
    """A later stage and the rollout deploy what a run directory says was adopted: a record edited to hold a line break
    must not reach a unit (nor install MoE configs on the way)."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    path = run / "baseline" / HOST / "adopted.json"
    path.write_text(json.dumps({**read(path), **record}), encoding="utf-8")
    with pytest.raises(ValueError) as refused:
        adoption.latest(run, HOST, "flags")
    assert str(refused.value).startswith(f"{path}: the adopted configuration holds values that cannot go into a unit")
    assert message in str(refused.value)


def test_the_verdict_on_a_recorded_trial_is_the_one_the_run_recorded():
    adopted = adoption.latest(RUN, HOST, "flags")
    recorded = read(FUSION / "decision.json")
    outcome = adoption.verdict(RUN, measured(FUSION), adopted, compare=read(FUSION / "comparison.json")["parameters"],
                               policy=recorded["policy"])
    assert outcome["failure"] is None
    assert outcome["decision"] == recorded
    assert outcome["comparison"]["verdict"] == "regressed"
    recorded_effects = read(FUSION / "side_effects.json")  # its lines were ordered otherwise in 1.0.0
    assert sorted(outcome["side_effects"].pop("summary_lines")) == sorted(recorded_effects.pop("summary_lines"))
    assert unordered(outcome["side_effects"]) == unordered(recorded_effects)


def test_tuned_configs_the_server_still_misses_are_reverted_like_a_failed_candidate():
    moe = RUN / "moe_tune" / HOST
    adopted = adoption.latest(RUN, HOST, "moe_tune")
    policy = {"allow_low_confidence": True}  # the demo's 1.0.0 sweeps had fewer runs than today's rule wants
    assert adoption.verdict(RUN, measured(moe), adopted, policy=policy, moe_configs=TUNED)["decision"]["adopt"]
    still = measured(moe)
    still["facts"] = {**still["facts"], "missing_moe_configs": [f"/opt/sglang/configs/{TUNED[1]}"]}
    outcome = adoption.verdict(RUN, still, adopted, policy=policy, moe_configs=TUNED)
    assert outcome["comparison"] is None and outcome["side_effects"] is None
    assert not outcome["decision"]["adopt"]
    assert outcome["failure"] == f"the server still reports missing MoE configs after the install: {TUNED[1]}"
    assert outcome["decision"]["summary"] == f"revert: failed: {outcome['failure']}"


def test_a_failed_measurement_is_reverted_without_reading_the_reference(tmp_path):
    outcome = adoption.verdict(tmp_path, {"failure": "did not start: CUDA out of memory"},
                               {"sweep_file": "nowhere/sweep.json", "facts_file": "nowhere/facts.json"})
    assert outcome["decision"]["summary"] == "revert: failed: did not start: CUDA out of memory"


def test_an_adopted_record_points_at_its_measurement_inside_the_run(tmp_path):
    run = tmp_path / "runs" / "R"
    record = adoption.adopt("flags", run, run / "flags" / HOST / "trials" / "fusion", args={"tp_size": 4},
                            environment={"CUDA_VISIBLE_DEVICES": "0"}, moe_configs=TUNED[:1])
    assert record == {"stage": "flags", "args": {"tp_size": 4}, "environment": {"CUDA_VISIBLE_DEVICES": "0"},
                      "moe_configs": TUNED[:1], "sweep_file": "flags/gpu1/trials/fusion/sweep.json",
                      "facts_file": "flags/gpu1/trials/fusion/facts.json"}
    with pytest.raises(ValueError):  # evidence outside the run directory
        adoption.adopt("flags", run, tmp_path / "elsewhere", args={}, environment={})


def test_missing_evidence_names_the_file_and_the_stage_to_force(tmp_path):
    shutil.copytree(RUN / "baseline", tmp_path / "baseline")
    (tmp_path / "baseline" / HOST / "facts.json").unlink()
    adopted = adoption.latest(tmp_path, HOST, "flags")
    with pytest.raises(ValueError, match=r"facts_file .*baseline/gpu1/facts.json is missing; .*-e force=baseline"):
        adoption.evidence(tmp_path, adopted)


def _sweep(values: dict[int, float], runs: int = 5) -> dict:
    spread = (0.995, 1.0, 1.004, 0.998, 1.003)
    return {"levels": [{"concurrency": c, "runs": [{"agg_tok_s": v * f} for f in spread[:runs]]}
                       for c, v in values.items()]}


def test_an_adoption_the_restart_noise_could_explain_waits_for_a_fresh_start(tmp_path):
    """+2.5 % at one level of three, 0.4 % run noise, starts 1 % apart: pending, then decided by the fresh start."""
    baseline = tmp_path / "baseline" / HOST
    baseline.mkdir(parents=True)
    facts = read(RUN / "baseline" / HOST / "facts.json")
    (baseline / "sweep.json").write_text(json.dumps(_sweep({1: 100.0, 16: 1000.0, 64: 1500.0})), encoding="utf-8")
    (baseline / "facts.json").write_text(json.dumps(facts), encoding="utf-8")
    args = read(RUN / "baseline" / HOST / "requested_args.json")
    adopted = adoption.adopt("baseline", tmp_path, baseline, args=args, environment={})
    candidate = {"dir": str(tmp_path / "flags" / HOST / "trials" / "x"), "failure": None, "facts": facts,
                 "sweep": _sweep({1: 100.0, 16: 1025.0, 64: 1500.0}), "requested_args": args, "environment": {}}
    check = {"cv_pct": 1.0, "repeats": 2}
    assert adoption.verdict(tmp_path, candidate, adopted)["decision"]["adopt"]
    pending = adoption.verdict(tmp_path, candidate, adopted, restart=check)
    assert pending["decision"]["action"] == "restart_check" and not pending["decision"]["adopt"]
    assert pending["restart_check"]["needed"]
    assert [level["concurrency"] for level in pending["restart_check"]["levels"]] == [16]
    fresh = {**candidate, "sweep": _sweep({16: 1016.0}, runs=2)}
    held = adoption.verdict(tmp_path, candidate, adopted, restart=check, restarted=fresh)
    assert held["decision"]["adopt"] and held["restart_check"]["confirmed"]
    gone = adoption.verdict(tmp_path, candidate, adopted, restart=check,
                            restarted={**fresh, "sweep": _sweep({16: 1001.0}, runs=2)})
    assert gone["decision"]["action"] == "revert" and not gone["restart_check"]["confirmed"]
    failed = adoption.verdict(tmp_path, candidate, adopted, restart=check,
                              restarted={**fresh, "sweep": None, "failure": "did not start"})
    assert failed["decision"]["summary"].endswith("; restart check failed: did not start")
    # a clear improvement is adopted at once, and the check is recorded as not needed
    clear = adoption.verdict(tmp_path, {**candidate, "sweep": _sweep({1: 100.0, 16: 1080.0, 64: 1500.0})}, adopted,
                             restart=check)
    assert clear["decision"]["adopt"] and not clear["restart_check"]["needed"]


def test_the_first_decision_on_a_measurement_removes_an_earlier_attempts_restart_check(tmp_path):
    """A trial measured again without needing a check must not keep the check an earlier attempt of it made."""
    stale = tmp_path / "restart_check"
    (stale / "probes").mkdir(parents=True)
    (stale / "sweep.json").write_text("{}", encoding="utf-8")
    assert adoption.check_dir(tmp_path, None, check_mode=True) == (stale, [stale])
    assert stale.is_dir(), "check mode changes nothing"
    assert adoption.check_dir(tmp_path, {"sweep": {}}) == (stale, []), "the decision after the check keeps it"
    assert (stale / "sweep.json").is_file()
    assert adoption.check_dir(tmp_path, None) == (stale, [stale])
    assert not stale.exists() and list(tmp_path.iterdir()) == []
    assert adoption.check_dir(tmp_path, None) == (stale, []), "nothing to remove"


def test_what_a_stage_adopted_is_recorded_where_the_next_stage_reads_it_and_nothing_removes_it(tmp_path):
    adopted = adoption.adopt("baseline", tmp_path, tmp_path / "baseline" / "gpu1", args={"tp_size": 4}, environment={})
    written, removed = adoption.record(tmp_path, "baseline", "gpu1", adopted)
    assert (written, removed) == ([tmp_path / "baseline" / "gpu1" / "adopted.json"], [])
    assert adoption.latest(tmp_path, "gpu1", "flags") == adopted
    assert adoption.record(tmp_path, "baseline", "gpu1", adopted) == ([], [])  # the same record: nothing written
    assert adoption.record(tmp_path, "baseline", "gpu1", None, check_mode=True) == ([], written)
    assert adoption.latest(tmp_path, "gpu1", "flags") == adopted
    adoption.record(tmp_path, "baseline", "gpu1", None)
    assert adoption.latest(tmp_path, "gpu1", "flags") is None
