"""The MoE modules on a sandbox host with the SGLang emulator: targets from the server's own log, the
tuner run chunk by chunk (up, then down), installation where SGLang reads configs, the warnings gone
after a restart, a tuner crash that leaves nothing installed and resumes, refusal of invalid JSON, and
restoring the previous state. The server is stopped while tuning, as on a GPU host.

The host's emulator profile is sped up for this module (server start-up and the tuner's cost per config)
so a tuning run takes seconds; the crash is injected with `tuner.crash_at_batch_size`. The profile is
restored at the end.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.ansible import task_results

pytestmark = pytest.mark.sandbox
PLAYBOOKS = Path(__file__).parent / "playbooks"
MOE = PLAYBOOKS / "moe_modules.yml"
SERVER = PLAYBOOKS / "server_deploy.yml"
PROFILE = "/etc/sglang-emulator/profile.yaml"
WORK_DIR = "/var/lib/llmops-sglang"
BASELINE = {"tp_size": 4, "speculative_algorithm": "NEXTN", "max_running_requests": None}
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
BATCH_SIZES = [1, 8, 64, 512]
GPUS = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
FAST_TUNER = {"seconds_per_config": 0.02}
# Nothing here measures throughput: a 50x time compression keeps each server start at about 2 s.
TIME_SCALE = 0.02


def write_host_file(fleet, host, path: str, content: str) -> None:
    fleet.run(host, "python3", "-c", "import pathlib, sys; p = pathlib.Path(sys.argv[1]); "
              "p.parent.mkdir(parents=True, exist_ok=True); p.write_text(sys.argv[2])", path, content)


@pytest.fixture(scope="module")
def host_profile(fleet, gpu1):
    """Sets the emulator profile's tuner keys on the host; restores the original profile and cleans up."""
    original = fleet.run(gpu1, "cat", PROFILE).stdout
    profile = yaml.safe_load(original)

    def set_tuner(tuner: dict) -> None:
        fast = {**profile, "time_scale": TIME_SCALE, "startup": {**profile["startup"], "time_scale": None},
                "tuner": {**(profile.get("tuner") or {}), **tuner}}
        write_host_file(fleet, gpu1, PROFILE, yaml.safe_dump(fast))

    set_tuner(FAST_TUNER)
    yield set_tuner
    write_host_file(fleet, gpu1, PROFILE, original)
    fleet.run(gpu1, "rm", "-rf", WORK_DIR, "/root/moe-broken")


def moe(runner, action: str, task: str, **extra) -> tuple:
    result = runner.run(MOE, {"moe_action": action, **extra}, limit="gpu1")
    return result, task_results(result, task).get("gpu1", {})


def tune(runner, **extra) -> tuple:
    return moe(runner, "tune", "Run the tuner", moe_environment=GPUS, **extra)


def configs(runner, **extra) -> tuple:
    return moe(runner, "configs", "Manage the installed configs", **extra)


def server(runner, state: str) -> None:
    result = runner.run(SERVER, {"sglang_server_args": BASELINE, "sglang_server_state": state,
                                 "sglang_server_ready_timeout": 120}, limit="gpu1")
    assert result.status == "successful", result.stdout


def logged_moe_configs(runner) -> tuple[dict, dict]:
    """(server_facts facts, moe_targets filter result) of the running server."""
    result, facts = moe(runner, "targets", "Read what the server logged")
    assert result.status == "successful", result.stdout
    return facts["facts"], task_results(result, "Reconcile")["gpu1"]["ansible_facts"]["moe_targets_result"]


@pytest.fixture(scope="module")
def targets(runner, host_profile):
    """The filter's verdict on the freshly deployed baseline server; the server is stopped afterwards."""
    server(runner, "restarted")
    facts, verdict = logged_moe_configs(runner)
    server(runner, "stopped")
    yield facts, verdict
    server(runner, "absent")


@pytest.fixture(scope="module")
def tuned(runner, targets):
    _, verdict = targets
    by_kernel = {target["kernel"]: target for target in verdict["targets"]}
    common = {"moe_tuner_args": verdict["tuner_args"], "moe_batch_sizes": BATCH_SIZES}
    up_run, up = tune(runner, moe_search_space="prefiltered", moe_smem_per_block=101376, moe_chunk_size=2,
                      moe_expected_file_name=by_kernel["up"]["file_name"], **common)
    assert up_run.status == "successful", up_run.stdout
    down_run, down = tune(runner, moe_kernel="down", moe_gate_up_config=up["output_file"],
                          moe_expected_file_name=by_kernel["down"]["file_name"], **common)
    assert down_run.status == "successful", down_run.stdout
    return {"up": up, "down": down, "up_stdout": up_run.stdout, "install_dir": by_kernel["up"]["install_dir"]}


def test_targets_agree_with_the_servers_missing_list(targets):
    facts, verdict = targets
    assert len(facts["missing_moe_configs"]) >= 2  # every TP rank logs its own warning
    assert verdict["agree"] is True
    assert [(t["kernel"], t["file_name"], t["triton_dir"]) for t in verdict["targets"]] == [
        ("up", UP, "triton_3_6_0"), ("down", DOWN, "triton_3_6_0")]
    assert verdict["targets"][0]["install_dir"].endswith("/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0")
    assert verdict["tuner_args"] == ["--dtype", "auto"] and verdict["expected_tuner_output"] == UP


def test_up_tuning_runs_in_chunks_with_progress(fleet, gpu1, tuned):
    up = tuned["up"]
    assert up["changed"] is True and up["file_name"] == UP
    assert up["output_file"] == f"{WORK_DIR}/moe-tune/{UP}"
    assert up["search_space"]["mode"] == "prefiltered" and up["search_space"]["total"] == 1920
    assert 0 < up["search_space"]["dropped"] < 1920
    assert [(p["batch_sizes"], p["done"], p["total"]) for p in up["progress"]] == [([1, 8], 2, 4), ([64, 512], 4, 4)]
    assert up["resumed"] == 0 and up["tuner_seconds"] > 0
    assert f"moe_tune [gpu1] up {UP}: 2/4 batch sizes" in tuned["up_stdout"]
    tuned_up = yaml.safe_load(fleet.run(gpu1, "cat", up["output_file"]).stdout)
    assert list(tuned_up) == [str(size) for size in BATCH_SIZES]
    down = tuned["down"]
    assert down["changed"] is True and down["output_file"] == f"{WORK_DIR}/moe-tune/{DOWN}"
    tuned_down = yaml.safe_load(fleet.run(gpu1, "cat", down["output_file"]).stdout)
    assert {m: c["BLOCK_SIZE_M"] for m, c in tuned_down.items()} == {m: c["BLOCK_SIZE_M"] for m, c in tuned_up.items()}
    # tune_down_moe.py uses one GPU: the chunk of 4 batch sizes ran as 4 screeners, one on each of the host's 4 GPUs.
    assert down["placements"] == [{"batch_sizes": BATCH_SIZES, "gpus_used": 4,
                                   "devices": {"1": "0", "8": "1", "64": "2", "512": "3"}}]
    assert down["gpus_used"] == 4 > 1
    assert fleet.run(gpu1, "pgrep", "-f", "raylet|gcs_server", check=False).returncode == 1, "Ray outlived the tuner"


def test_rerun_is_a_no_op(runner, targets, tuned):
    _, verdict = targets
    rerun, up = tune(runner, moe_tuner_args=verdict["tuner_args"], moe_batch_sizes=BATCH_SIZES,
                     moe_search_space="prefiltered", moe_smem_per_block=101376, moe_chunk_size=2)
    assert rerun.status == "successful", rerun.stdout
    assert up["changed"] is False and up["resumed"] == 4 and up["progress"] == []


def test_check_mode_reports_the_plan_and_runs_nothing(fleet, gpu1, runner, targets):
    work_dir = f"{WORK_DIR}/check-mode"
    result = runner.run(MOE, {"moe_action": "tune", "moe_environment": GPUS, "moe_work_dir": work_dir,
                              "moe_batch_sizes": BATCH_SIZES, "moe_tuner_args": targets[1]["tuner_args"]},
                        limit="gpu1", check=True)
    planned = task_results(result, "Run the tuner")["gpu1"]
    assert result.status == "successful", result.stdout
    assert planned["changed"] is True and planned["chunks"] == [BATCH_SIZES] and planned["chunk_size"] == 4
    assert planned["progress"] == [] and fleet.run(gpu1, "test", "-e", work_dir, check=False).returncode == 1


def test_install_makes_the_warnings_go_and_restore_brings_them_back(fleet, gpu1, runner, tuned):
    installed_run, installed = configs(runner, moe_configs=[{"src": tuned["up"]["output_file"]},
                                                            {"src": tuned["down"]["output_file"]}])
    assert installed_run.status == "successful", installed_run.stdout
    # The kernel benchmark now runs the tuned entries (before the install: SGLang's default config).
    measured_run, measured = tune(runner, moe_mode="benchmark", moe_batch_sizes=BATCH_SIZES)
    assert measured_run.status == "successful", measured_run.stdout
    tuned_up = yaml.safe_load(fleet.run(gpu1, "cat", tuned["up"]["output_file"]).stdout)
    assert {int(m): t["config"] for m, t in measured["kernel_times"].items()} == {int(m): c for m, c in tuned_up.items()}
    assert all(t["kernel_time_us"] > 0 for t in measured["kernel_times"].values())
    install_dir = tuned["install_dir"]
    assert installed["install_dir"] == install_dir
    assert installed["created"] == [f"{install_dir}/{UP}", f"{install_dir}/{DOWN}"]
    assert [e["file_name"] for e in installed["listing"]["triton_3_6_0"]] == [UP, DOWN]

    server(runner, "restarted")
    facts, verdict = logged_moe_configs(runner)
    assert facts["missing_moe_configs"] == [] and facts["fallback_moe_configs"] == []
    assert {(c["kernel"], c["status"]) for c in facts["moe_configs"]} == {("up", "used"), ("down", "used")}
    assert not [w for w in facts["warnings"] if "Performance might be sub-optimal" in w]
    assert verdict["targets"] == [] and "nothing to tune" in verdict["message"]
    server(runner, "stopped")

    restored_run, restored = configs(runner, moe_state="restored", moe_backup_dir=installed["backup_dir"])
    assert restored_run.status == "successful", restored_run.stdout
    assert restored["removed"] == [f"{install_dir}/{DOWN}", f"{install_dir}/{UP}", install_dir]
    assert fleet.run(gpu1, "test", "-e", install_dir, check=False).returncode == 1


def test_crash_installs_nothing_keeps_the_checkpoint_and_the_rerun_resumes(fleet, gpu1, runner, host_profile, targets):
    _, verdict = targets
    work_dir = f"{WORK_DIR}/crash-test"
    args = {"moe_tuner_args": verdict["tuner_args"], "moe_batch_sizes": BATCH_SIZES, "moe_chunk_size": 2,
            "moe_search_space": "prefiltered", "moe_smem_per_block": 101376, "moe_work_dir": work_dir}
    host_profile({**FAST_TUNER, "crash_at_batch_size": 64})
    try:
        crashed_run, crashed = tune(runner, **args)
    finally:
        host_profile(FAST_TUNER)
    assert crashed_run.status == "failed"
    assert "the up tuner exited with rc=" in crashed["msg"] and "while tuning batch sizes [64, 512]" in crashed["msg"]
    assert "batch sizes done: [1, 8]" in crashed["msg"]
    # Ray's actor-death message always; the worker's own "Segmentation fault" only when Ray's log monitor forwarded
    # it before the driver exited (a race in Ray, see log_tail; the unit tests check that it is kept when present).
    assert "the worker crashed unexpectedly" in crashed["log_tail"]
    assert crashed["batch_sizes_done"] == [1, 8]
    assert fleet.run(gpu1, "test", "-e", f"{work_dir}/{UP}", check=False).returncode == 1, "partial output presented"
    checkpoint = yaml.safe_load(fleet.run(gpu1, "cat", f"{work_dir}/checkpoints/{UP}.checkpoint").stdout)
    assert sorted(checkpoint["configs"], key=int) == ["1", "8"]
    assert fleet.run(gpu1, "pgrep", "-f", "raylet|gcs_server", check=False).returncode == 1, "Ray outlived the crash"

    resumed_run, resumed = tune(runner, **args)
    assert resumed_run.status == "successful", resumed_run.stdout
    assert resumed["resumed"] == 2 and [p["batch_sizes"] for p in resumed["progress"]] == [[64, 512]]
    assert list(yaml.safe_load(fleet.run(gpu1, "cat", resumed["output_file"]).stdout)) == ["1", "8", "64", "512"]


def test_the_engine_tunes_up_and_down_in_one_run_and_the_down_task_resumes_it(fleet, gpu1, runner, targets, tmp_path):
    """engine: llmops on the emulator's kernels: one engine run per target, its two files through moe_tune's
    checkpoints, the down config on the up config's BLOCK_SIZE_M at every batch size, no source checkout needed.
    The run's files go to the controller's cache; a second host (a fresh work dir) asking the same question installs
    both from there and the engine never starts on it."""
    _, verdict = targets
    by_kernel = {target["kernel"]: target for target in verdict["targets"]}
    work_dir = f"{WORK_DIR}/engine"
    common = {"moe_engine": "llmops", "moe_tuner_args": verdict["tuner_args"], "moe_batch_sizes": BATCH_SIZES,
              "moe_search_space": "pruned", "moe_smem_per_block": 101376, "moe_work_dir": work_dir,
              "moe_source_dir": "/nonexistent", "moe_cache_dir": str(tmp_path / "engine-cache")}
    up_run, up = tune(runner, moe_expected_file_name=by_kernel["up"]["file_name"], **common)
    assert up_run.status == "successful", up_run.stdout
    assert up["changed"] is True and up["output_file"] == f"{work_dir}/{UP}"
    assert up["progress"][-1]["done"] == 4 and up["resumed"] == 0
    engine = up["engine"]
    assert engine["device"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition" and engine["gpus"] == 4
    assert sorted(engine["per_batch_size"], key=int) == [str(m) for m in BATCH_SIZES]
    assert all(row["speedup"] >= 1.0 for row in engine["per_batch_size"].values()), engine["per_batch_size"]
    assert isinstance(engine["failures"], dict) and engine["candidates"]["up"] > 0
    cache = up["cache"]
    assert cache["status"] == "miss" and cache["key"]["kernel"] == "up" and sorted(cache["stored"]) == ["down", "up"]
    assert cache["key"]["gpu_capability"] == "12.0" and cache["key"]["triton"] == engine["release"]["triton"]
    assert cache["key"]["kernel_source_sha256"] == engine["release"]["kernel_source_sha256"]
    # Without the cache the down task takes its file from the engine's own checkpoint of the same run.
    down_run, down = tune(runner, moe_kernel="down", moe_expected_file_name=by_kernel["down"]["file_name"],
                          moe_cache=False, **common)
    assert down_run.status == "successful", down_run.stdout
    assert down["output_file"] == f"{work_dir}/{DOWN}" and down["engine"]["resumed_batch_sizes"] == 4
    assert down["cache"] == {"status": "off", "reason": "cache: false"}
    tuned_up = yaml.safe_load(fleet.run(gpu1, "cat", up["output_file"]).stdout)
    tuned_down = yaml.safe_load(fleet.run(gpu1, "cat", down["output_file"]).stdout)
    assert list(tuned_up) == list(tuned_down) == [str(m) for m in BATCH_SIZES]
    assert {m: c["BLOCK_SIZE_M"] for m, c in tuned_down.items()} == {m: c["BLOCK_SIZE_M"] for m, c in tuned_up.items()}
    assert fleet.run(gpu1, "pgrep", "-f", "moe_engine.py", check=False).returncode == 1, "an engine process outlived the task"
    rerun, again = tune(runner, moe_expected_file_name=by_kernel["up"]["file_name"], **common)
    assert rerun.status == "successful" and again["changed"] is False and again["resumed"] == 4
    assert again["cache"]["status"] == "not needed"
    second_dir = f"{WORK_DIR}/second-host"
    for kernel, tuned_file in (("up", tuned_up), ("down", tuned_down)):
        run, hit = tune(runner, moe_kernel=kernel, moe_expected_file_name=by_kernel[kernel]["file_name"],
                        **{**common, "moe_work_dir": second_dir})
        assert run.status == "successful", run.stdout
        assert hit["cache"]["status"] == "hit" and hit["cache"]["entry"] == cache["stored"][kernel]
        assert hit["cache"]["source"]["gpu_minutes"] == engine["gpu_minutes"]
        assert hit["changed"] is True and hit["engine"] is None and hit["progress"][0]["cache"] == "hit"
        assert "from the MoE engine cache" in run.stdout and "the engine did not start" in run.stdout
        assert yaml.safe_load(fleet.run(gpu1, "cat", hit["output_file"]).stdout) == tuned_file
    # The engine never started there: it installs its program and job in <work_dir>/engine and runs in runs/engine-*.
    assert fleet.run(gpu1, "test", "-e", f"{second_dir}/engine", check=False).returncode == 1
    assert fleet.run(gpu1, "find", second_dir, "-name", "engine-*").stdout.strip() == ""
    # A damaged entry is a miss with a warning: the engine tunes again and its result replaces the entry.
    Path(cache["stored"]["up"]).write_text('{"schema": 1, "sha256": "')
    run, third = tune(runner, moe_expected_file_name=by_kernel["up"]["file_name"],
                      **{**common, "moe_work_dir": f"{WORK_DIR}/third-host"})
    assert run.status == "successful", run.stdout
    assert third["cache"]["status"] == "miss" and "is unusable (unreadable" in third["cache"]["warning"]
    assert "is unusable (unreadable" in run.stdout and third["engine"]["resumed_batch_sizes"] == 0
    assert third["cache"]["stored"]["up"] == cache["stored"]["up"]
    assert json.loads(Path(cache["stored"]["up"]).read_text())["key"] == cache["key"]


def test_invalid_json_is_refused_with_the_reason(fleet, gpu1, runner, tuned):
    broken = f"/root/moe-broken/{UP}"
    write_host_file(fleet, gpu1, broken, '{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64')
    result, refused = configs(runner, moe_configs=[{"src": tuned["down"]["output_file"]}, {"src": broken}])
    assert result.status == "failed"
    assert refused["msg"].startswith("nothing was installed") and f"configs[1] ({broken}): not valid JSON" in refused["msg"]
    assert fleet.run(gpu1, "test", "-e", tuned["install_dir"], check=False).returncode == 1
