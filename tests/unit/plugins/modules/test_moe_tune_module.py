# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The moe_tune module's steps through its real main(), with stand-ins for the GPU-bound programs: an SGLang
python that answers the environment probe (and runs anything else with this interpreter), an nvidia-smi,
and a source checkout whose tuner writes SGLang's output format without Ray. The real tuner on real Ray runs
in tests/integration/test_moe_modules.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.sglang.plugins.module_utils.action_request import request_file_name
from ansible_collections.llmops.sglang.plugins.modules import moe_tune

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "moe_configs"
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
ENTRY = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4}
FAKE_PYTHON = """#!{python}
import json, os, sys
if sys.argv[1:2] == ["-c"] and "importlib" in sys.argv[2]:
    print(json.dumps({{"versions": {{"python": "3.11.2", "sglang": "0.5.11", "triton": "3.6.0", "torch": None,
                                   "ray": "2.52.1"}}, "config_module_dir": None}}))
else:
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
"""
FAKE_NVIDIA_SMI = """#!/bin/sh
echo "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-0, 97887, 12.0, 580.95.05, 600.00, 00000000:01:00.0"
echo "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-1, 97887, 12.0, 580.95.05, 600.00, 00000000:21:00.0"
"""
# Like tuning_fused_moe_triton.py: its argparse (with --batch-sizes/--search-space-file unless OLD_TUNER is set, as
# before they arrived upstream); with --tune it writes the file for its batch sizes into the CWD (and dies when
# CRASH_AT is one of them); without, it prints SGLang's benchmark lines. Every invocation is logged to CALLS.
FAKE_TUNER = """import argparse, json, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--model", type=str, default="mistralai/Mixtral-8x7B-Instruct-v0.1")
parser.add_argument("--tp-size", "--tp", type=int, default=2)
parser.add_argument("--ep-size", "--ep", type=int, default=1)
parser.add_argument("--dtype", type=str, choices=["auto", "fp8_w8a8", "int8_w8a16", "int8_w8a8", "int4_w4a16"])
parser.add_argument("--per-channel-quant", action="store_true")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--batch-size", type=int, required=False)
if not os.environ.get("OLD_TUNER"):
    parser.add_argument("--batch-sizes", type=int, nargs="+")
parser.add_argument("--tune", action="store_true")
if not os.environ.get("OLD_TUNER"):
    parser.add_argument("--search-space-file", type=str)
parser.add_argument("--disable-shared-experts-fusion", action="store_true")
args = parser.parse_args()
if os.environ.get("CALLS"):
    with open(os.environ["CALLS"], "a") as calls:
        calls.write(json.dumps(sys.argv[1:]) + "\\n")
sizes = getattr(args, "batch_sizes", None) or [args.batch_size]
entry = {entry}
if not args.tune:
    for m in sizes:
        print(f"Batch size: {{m}}, config: {{entry}}")
        print(f"Kernel time: {{10.0 * m:.2f}} us")
    sys.exit(0)
if str(os.environ.get("CRASH_AT")) in map(str, sizes):
    sys.exit("Fatal Python error: Segmentation fault")
print("Start tuning over 8 configurations to create {up}...")
with open("{up}", "w") as f:
    json.dump({{str(m): entry for m in sizes}}, f, indent=4)
print("Tuning took 0.25 seconds")
"""

# Like upstream's tune_down_moe.py: its argparse, one device (whatever CUDA_VISIBLE_DEVICES shows it), the batch sizes
# one after another (SECONDS_PER_SIZE each; it hangs at HANG_AT, dies at CRASH_AT), then the file in --out-dir. Each
# invocation logs its pid, batch sizes and device to CALLS when it starts; with TOGETHER=n it then waits until n
# invocations have (and fails after 30 s without them: they were not started at once).
FAKE_DOWN_TUNER = """import argparse, json, os, sys, time
parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True)
parser.add_argument("--tp-size", type=int, required=True)
parser.add_argument("--ep-size", type=int, default=1)
parser.add_argument("--dtype", default="fp8_w8a8")
parser.add_argument("--gate-up-config", required=True)
parser.add_argument("--batch-sizes", type=int, nargs="*", default=None)
parser.add_argument("--out-dir", default=".")
parser.add_argument("--disable-shared-experts-fusion", action="store_true")
args = parser.parse_args()
entry = {entry}
with open(os.environ["CALLS"], "a") as calls:
    calls.write(json.dumps({{"pid": os.getpid(), "batch_sizes": args.batch_sizes,
                            "device": os.environ.get("CUDA_VISIBLE_DEVICES")}}) + "\\n")
together, deadline = int(os.environ.get("TOGETHER", "0")), time.monotonic() + 30
while len(open(os.environ["CALLS"]).read().splitlines()) < together:
    if time.monotonic() > deadline:
        sys.exit(f"the other screeners did not start while this one ran")
    time.sleep(0.05)
for m in args.batch_sizes:
    if str(m) == os.environ.get("CRASH_AT"):
        sys.exit("CUDA error: an illegal memory access was encountered")
    time.sleep(600 if str(m) == os.environ.get("HANG_AT") else float(os.environ.get("SECONDS_PER_SIZE", "0")))
    print(f"M={{m}}: best down {{entry}} (1.0us)", flush=True)
with open(os.path.join(args.out_dir, "{down}"), "w") as f:
    json.dump({{str(m): entry for m in args.batch_sizes}}, f, indent=4)
"""


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python", FAKE_PYTHON.format(python=sys.executable)), ("nvidia-smi", FAKE_NVIDIA_SMI)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    source = tmp_path / "sglang-src"
    tuner_dir = source / "benchmark" / "kernels" / "fused_moe_triton"
    tuner_dir.mkdir(parents=True)
    (tuner_dir / "tuning_fused_moe_triton.py").write_text(FAKE_TUNER.format(entry=ENTRY, up=UP))
    (tuner_dir / "tune_down_moe.py").write_text(FAKE_DOWN_TUNER.format(entry=ENTRY, down=DOWN))
    (source / "python" / "sglang").mkdir(parents=True)
    (source / "python" / "sglang" / "version.py").write_text('__version__ = "0.5.11"\n')
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text((FIXTURES / "hf_configs" / "qwen3_5_moe_style_bf16.json").read_text())
    return {"tmp": tmp_path, "source": source, "work_dir": tmp_path / "work",
            "args": {"python": str(bin_dir / "python"), "source_dir": str(source), "model_path": str(model),
                     "tp_size": 4, "work_dir": str(tmp_path / "work"), "tuner_args": ["--dtype", "auto"],
                     "batch_sizes": [1, 8, 64], "environment": {"CUDA_VISIBLE_DEVICES": "0,1"}}}


def run_step(host: dict, capsys: pytest.CaptureFixture, check: bool = False, request: dict | None = None,
             **args) -> tuple[int, dict]:
    """One module call as the action plugin makes it: the plan step without a request, a later step with its
    request file in the task's tmp dir."""
    task_tmp = Path(tempfile.mkdtemp(dir=host["tmp"], prefix="task-"))
    if request is not None:
        (task_tmp / request_file_name("llmops.sglang.moe_tune")).write_text(json.dumps(request))
    args = {**host["args"], "_ansible_check_mode": check, "_ansible_remote_tmp": str(host["tmp"] / "remote_tmp"),
            "_ansible_tmpdir": str(task_tmp), "_ansible_keep_remote_files": False, **args}
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        moe_tune.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_plan_in_check_mode_writes_nothing(host, capsys):
    code, result = run_step(host, capsys, check=True, search_space="prefiltered", smem_per_block=101376)
    assert code == 0, result
    plan = result["plan"]
    assert plan["file_name"] == UP and plan["chunk_size"] == 2 and plan["chunks"] == [[1, 8], [64]]
    assert plan["search_space"]["mode"] == "prefiltered" and plan["search_space"]["dropped"] > 0
    assert plan["resumed"] == 0 and plan["output_current"] is False
    assert not host["work_dir"].exists()


def test_chunks_checkpoint_finish_and_resume_after_a_crash(host, capsys, monkeypatch):
    _, planned = run_step(host, capsys)
    plan = planned["plan"]
    code, first = run_step(host, capsys, request={"step": "chunk", "plan": plan, "chunk": [1, 8], "timeout": 60})
    assert code == 0, first
    assert first["done"] == 2 and first["tuner_seconds"] == 0.25
    monkeypatch.setenv("CRASH_AT", "64")
    code, crashed = run_step(host, capsys, request={"step": "chunk", "plan": plan, "chunk": [64], "timeout": 60})
    assert code == 1
    assert crashed["msg"].startswith("the up tuner exited with rc=1 while tuning batch sizes [64]; batch sizes done: [1, 8]")
    assert crashed["batch_sizes_done"] == [1, 8] and "Segmentation fault" in crashed["log_tail"]
    assert Path(crashed["log_dir"], "tuner.err").exists()
    code, refused = run_step(host, capsys, request={"step": "finish", "plan": plan})
    assert code == 1 and "batch sizes [64] are not tuned yet" in refused["msg"]
    assert not (host["work_dir"] / UP).exists()

    monkeypatch.delenv("CRASH_AT")
    _, replanned = run_step(host, capsys)
    assert replanned["plan"]["resumed"] == 2 and replanned["plan"]["chunks"] == [[64]]
    run_step(host, capsys, request={"step": "chunk", "plan": replanned["plan"], "chunk": [64], "timeout": 60})
    code, finished = run_step(host, capsys, request={"step": "finish", "plan": replanned["plan"]})
    assert code == 0 and finished["changed"] is True
    assert json.loads((host["work_dir"] / UP).read_text()) == {"1": ENTRY, "8": ENTRY, "64": ENTRY}
    assert run_step(host, capsys, request={"step": "finish", "plan": replanned["plan"]})[1]["changed"] is False


def test_benchmark_returns_the_kernel_time_per_batch_size(host, capsys):
    _, planned = run_step(host, capsys, mode="benchmark")
    assert "chunks" not in planned["plan"]
    code, measured = run_step(host, capsys, mode="benchmark",
                              request={"step": "benchmark", "plan": planned["plan"], "timeout": 60})
    assert code == 0, measured
    assert measured["kernel_times"] == {str(m): {"config": ENTRY, "kernel_time_us": 10.0 * m} for m in (1, 8, 64)}
    assert list((host["work_dir"] / "runs").iterdir()) == []


def test_other_inputs_or_force_discard_the_checkpoint(host, capsys):
    _, planned = run_step(host, capsys)
    run_step(host, capsys, request={"step": "chunk", "plan": planned["plan"], "chunk": [1, 8], "timeout": 60})
    _, forced = run_step(host, capsys, check=True, force=True)
    assert forced["plan"]["checkpoint_discarded"] == "force: the checkpoint was discarded"
    assert forced["plan"]["resumed"] == 0 and Path(forced["plan"]["checkpoint"]).exists()  # check mode keeps it
    _, other = run_step(host, capsys, search_space="prefiltered", smem_per_block=101376)
    assert "made with other inputs" in other["plan"]["checkpoint_discarded"] and other["plan"]["resumed"] == 0
    assert not Path(other["plan"]["checkpoint"]).exists()


@pytest.mark.parametrize(("args", "message"), [
    ({"expected_file_name": DOWN}, f"expected_file_name: the up tuner would write {UP}, not {DOWN}"),
    ({"kernel": "down", "gate_up_config": "/x.json", "search_space": "prefiltered"},
     "search_space: tune_down_moe.py screens its own candidates"),
    ({"kernel": "down"}, "gate_up_config: required for kernel=down"),
    ({"mode": "benchmark", "kernel": "down"}, "kernel: benchmark mode times the whole fused MoE"),
    ({"search_space": "prefiltered"}, "smem_per_block: required with search_space=prefiltered"),
    ({"batch_sizes": "auto"}, "max_running_requests: required with batch_sizes=auto"),
])
def test_plan_refuses_before_running_anything(host, capsys, args, message):
    code, result = run_step(host, capsys, **args)
    assert code == 1 and result["msg"].startswith(message), result["msg"]
    assert not host["work_dir"].exists()


def test_checkout_of_another_version_is_refused_naming_both(host, capsys):
    (host["source"] / "python" / "sglang" / "version.py").write_text('__version__ = "0.5.10"\n')
    code, result = run_step(host, capsys)
    assert code == 1
    assert result["msg"].startswith(f"source_dir: {host['source']} is SGLang 0.5.10 (python/sglang/version.py) but "
                                    "the installed sglang is 0.5.11")


def test_checkout_whose_version_cannot_be_told_is_refused_saying_why(host, capsys):
    (host["source"] / "python" / "sglang" / "version.py").write_text(
        "try:\n    from sglang._version import __version__\nexcept ImportError:\n    __version__ = '0.0.0.dev0'\n")
    code, result = run_step(host, capsys)
    assert code == 1
    assert result["msg"].startswith(f"source_dir: cannot tell which SGLang {host['source']} is: it has no git "
                                    "metadata (.git) and no python/sglang/_version.py")
    assert result["msg"].endswith("check out its tag (git checkout v0.5.11)")


def test_a_tuner_without_batch_sizes_or_a_search_space_file_is_driven_by_its_own_options(host, capsys, monkeypatch):
    monkeypatch.setenv("OLD_TUNER", "1")
    calls = host["tmp"] / "calls.jsonl"
    monkeypatch.setenv("CALLS", str(calls))
    code, planned = run_step(host, capsys, search_space="prefiltered", smem_per_block=101376)
    assert code == 0, planned
    plan = planned["plan"]
    assert plan["tuner_cli"]["batch_sizes_per_run"] == "one" and plan["tuner_cli"]["search_space_file"] is False
    assert plan["chunk_size"] == 1 and plan["chunks"] == [[1], [8], [64]]
    assert plan["search_space"] == {"mode": "full", "requested": "prefiltered", "applied": False, "total": 1920,
                                    "kept": 1920, "dropped": 0, "reason": plan["notes"][1]}
    assert plan["notes"][0].startswith("tuning_fused_moe_triton.py of this SGLang takes one --batch-size per run")
    assert "the prefiltered search space cannot apply, it tunes its own full space (1920 configs)" in plan["notes"][1]
    assert plan["search_space_file"] is None and not (host["work_dir"] / "search-space").exists()
    for chunk in plan["chunks"]:
        code, step = run_step(host, capsys, request={"step": "chunk", "plan": plan, "chunk": chunk, "timeout": 60})
        assert code == 0, step
    assert run_step(host, capsys, request={"step": "finish", "plan": plan})[0] == 0
    assert json.loads((host["work_dir"] / UP).read_text()) == {"1": ENTRY, "8": ENTRY, "64": ENTRY}
    runs = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [run[run.index("--batch-size") + 1] for run in runs] == ["1", "8", "64"]
    assert all("--batch-sizes" not in run and "--search-space-file" not in run and "--tune" in run for run in runs)
    # benchmark mode: one run per batch size too
    calls.unlink()
    _, planned = run_step(host, capsys, mode="benchmark")
    code, measured = run_step(host, capsys, mode="benchmark",
                              request={"step": "benchmark", "plan": planned["plan"], "timeout": 60})
    assert code == 0 and measured["kernel_times"]["64"]["kernel_time_us"] == 640.0
    assert len(calls.read_text().splitlines()) == 3


def test_a_current_tuner_gets_batch_sizes_and_the_search_space_file(host, capsys, monkeypatch):
    calls = host["tmp"] / "calls.jsonl"
    monkeypatch.setenv("CALLS", str(calls))
    _, planned = run_step(host, capsys, search_space="prefiltered", smem_per_block=101376)
    plan = planned["plan"]
    assert plan["tuner_cli"]["batch_sizes_per_run"] == "many" and plan["notes"] == []
    run_step(host, capsys, request={"step": "chunk", "plan": plan, "chunk": [1, 8], "timeout": 60})
    run = json.loads(calls.read_text())
    assert run[run.index("--batch-sizes") + 1:run.index("--batch-sizes") + 3] == ["1", "8"]
    assert run[run.index("--search-space-file") + 1] == plan["search_space_file"]


def test_a_selector_flag_the_tuner_lacks_is_refused_naming_it(host, capsys):
    _, planned = run_step(host, capsys, tuner_args=["--dtype", "auto", "--use-fancy"])
    code, result = run_step(host, capsys, request={"step": "chunk", "plan": planned["plan"], "chunk": [1], "timeout": 60},
                            tuner_args=["--dtype", "auto", "--use-fancy"])
    assert code == 1 and result["msg"].startswith("tuner_args: tuning_fused_moe_triton.py of this SGLang has no --use-fancy")


def test_a_malformed_step_request_fails_naming_what_a_request_holds(host, capsys):
    code, result = run_step(host, capsys, request={"step": "chunk", "plan": {}})
    assert code == 1 and result["msg"].startswith("llmops.sglang.moe_tune.request.json: a step request is one of")
    assert "got ['plan', 'step'] (step 'chunk')" in result["msg"]


@pytest.mark.parametrize("pipelining", ["False", "True"])  # with pipelining the action makes the task's tmp dir itself
def test_the_action_plugin_drives_the_steps_through_its_request_file(host, tmp_path, pipelining):
    """The real action plugin over a local connection: plan, one module call per chunk with its request in the
    task's remote tmp dir, finish; the same task again resumes from the checkpoint and changes nothing."""
    repo = Path(__file__).resolve().parents[4]
    playbook = tmp_path / "tune.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"llmops.sglang.moe_tune": "{{ moe_args }}", "register": "tuned"},
        {"ansible.builtin.copy": {"content": "{{ tuned | to_json }}", "dest": str(tmp_path / "result.json"),
                                  "mode": "0644"}}]}]))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ANSIBLE_COLLECTIONS_PATH": str(repo / "collections"),
           "ANSIBLE_REMOTE_TMP": str(tmp_path / "remote_tmp"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local_tmp"),
           "ANSIBLE_PIPELINING": pipelining}
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
            "-e", json.dumps({"moe_args": {**host["args"], "chunk_size": 2}, "ansible_python_interpreter": sys.executable})]
    for changed in (True, False):
        run = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        result = json.loads((tmp_path / "result.json").read_text())
        assert result["changed"] is changed and Path(result["output_file"]).exists()
        assert [entry["batch_sizes"] for entry in result["progress"]] == ([[1, 8], [64]] if changed else [])
    assert sorted(json.loads(Path(result["output_file"]).read_text())) == ["1", "64", "8"]
    assert list((tmp_path / "remote_tmp").iterdir()) == []  # the request files went with the task's tmp dir


# --- the down screener: one process per device ----------------------------------------------------------------------


@pytest.fixture
def down(host: dict, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The host with the up kernel's config tuned; down runs log to ``calls``."""
    gate_up = host["tmp"] / "gate_up.json"
    gate_up.write_text(json.dumps({"1": ENTRY, "64": ENTRY}))
    monkeypatch.setenv("CALLS", str(host["tmp"] / "down-calls.jsonl"))
    return {**host, "calls": host["tmp"] / "down-calls.jsonl",
            "args": {**host["args"], "kernel": "down", "gate_up_config": str(gate_up)}}


def down_calls(down: dict) -> list[tuple[list[int], str]]:
    calls = [json.loads(line) for line in down["calls"].read_text().splitlines()]
    return sorted((call["batch_sizes"], call["device"]) for call in calls)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_down_chunk_runs_one_screener_per_visible_device_at_once(down, capsys, monkeypatch):
    monkeypatch.setenv("TOGETHER", "4")  # each screener waits for the four to have started: one after another fails
    args = {"batch_sizes": [1, 8, 64, 512], "environment": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}}
    _, planned = run_step(down, capsys, **args)
    plan = planned["plan"]
    assert plan["file_name"] == DOWN and plan["chunks"] == [[1, 8, 64, 512]]
    code, step = run_step(down, capsys, request={"step": "chunk", "plan": plan, "chunk": [1, 8, 64, 512],
                                                 "timeout": 60}, **args)
    assert code == 0, step
    assert down_calls(down) == [([1], "0"), ([8], "1"), ([64], "2"), ([512], "3")]
    assert step["placement"] == {"batch_sizes": [1, 8, 64, 512], "gpus_used": 4,
                                 "devices": {"1": "0", "8": "1", "64": "2", "512": "3"}}
    assert (step["done"], step["tuner_seconds"]) == (4, None)
    assert list((down["work_dir"] / "runs").iterdir()) == []
    assert run_step(down, capsys, request={"step": "finish", "plan": plan}, **args)[0] == 0
    assert json.loads((down["work_dir"] / DOWN).read_text()) == {str(m): ENTRY for m in (1, 8, 64, 512)}


def test_without_visible_devices_the_host_gpus_share_the_chunk_round_robin(down, capsys):
    args = {"batch_sizes": [1, 2, 4, 8, 16], "environment": {}, "chunk_size": 5}
    _, planned = run_step(down, capsys, **args)
    code, step = run_step(down, capsys, request={"step": "chunk", "plan": planned["plan"], "chunk": [1, 2, 4, 8, 16],
                                                 "timeout": 60}, **args)
    assert code == 0, step
    assert down_calls(down) == [([1, 4, 16], "0"), ([2, 8], "1")]  # the fake nvidia-smi's GPUs 0 and 1
    assert step["placement"]["devices"] == {"1": "0", "2": "1", "4": "0", "8": "1", "16": "0"}


def test_a_failed_screener_keeps_the_others_work_and_names_its_batch_sizes_and_device(down, capsys, monkeypatch):
    monkeypatch.setenv("CRASH_AT", "8")
    monkeypatch.setenv("HANG_AT", "512")
    args = {"batch_sizes": [1, 8, 64, 512], "environment": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}}
    _, planned = run_step(down, capsys, **args)
    plan = planned["plan"]
    code, failed = run_step(down, capsys, request={"step": "chunk", "plan": plan, "chunk": [1, 8, 64, 512],
                                                   "timeout": 3}, **args)
    assert code == 1
    assert failed["msg"].startswith(
        "the down tuner exited with rc=1 while tuning batch sizes [8] on device 1; reached the task timeout after ")
    assert "and was ended while tuning batch sizes [512] on device 3; batch sizes done: [1, 64] (2/4, kept in" in failed["msg"]
    assert failed["batch_sizes_done"] == [1, 64]
    assert [(run["batch_sizes"], run["device"]) for run in failed["failed_runs"]] == [([8], "1"), ([512], "3")]
    assert "illegal memory access" in failed["log_tail"] and "on device 3" in failed["log_tail"]
    kept = sorted(str(path) for path in (down["work_dir"] / "runs").iterdir())
    assert kept == sorted(run["log_dir"] for run in failed["failed_runs"]) and failed["log_dir"] in kept
    hung = [json.loads(line)["pid"] for line in down["calls"].read_text().splitlines() if "512" in line]
    assert hung and not _alive(hung[0])

    monkeypatch.delenv("CRASH_AT")
    monkeypatch.delenv("HANG_AT")
    _, replanned = run_step(down, capsys, **args)
    assert replanned["plan"]["resumed"] == 2 and replanned["plan"]["chunks"] == [[8, 512]]
