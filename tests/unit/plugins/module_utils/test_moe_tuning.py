# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_tuning.py."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuning import (
    chunks, final_output, fingerprint, log_tail, merge_into_checkpoint, progress_entry, progress_line,
    ray_cluster_gpus, read_checkpoint, run_tuner, run_tuners, size_runs, tuner_cli, tuner_command, tuner_gpu,
    tuner_environment, TunerInvocation, TunerRun, visible_devices)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_shapes import TUNER_DTYPES
from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import tuner_arguments, tuner_options
from tests.conformance.conftest import RELEASES as CONFORMANCE_RELEASES

RTX_UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
ENTRY = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4}


# --- chunks and GPUs --------------------------------------------------------------------------------


def test_chunks_and_gpu_counts():
    assert chunks([1, 2, 4, 8, 16], 2) == [[1, 2], [4, 8], [16]]
    with pytest.raises(ValueError, match="chunk_size"):
        chunks([1], 0)
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "0, 1,3"}) == ["0", "1", "3"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "2, GPU-5c1e,"}) == ["2", "GPU-5c1e"]
    assert visible_devices({}) is None
    gpus = [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200"}, {"index": 1, "uuid": "GPU-b", "name": "NVIDIA H20"}]
    assert tuner_gpu(gpus, {"CUDA_VISIBLE_DEVICES": "1,0"})["name"] == "NVIDIA H20"
    assert tuner_gpu(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-b"})["name"] == "NVIDIA H20"
    assert tuner_gpu(gpus, {})["name"] == "NVIDIA H200"


# --- command lines ------------------------------------------------------------------------------


_spec = importlib.util.spec_from_file_location(
    "tuner_cli_fixtures", Path(__file__).resolve().parents[4] / "scripts" / "tuner_cli_fixtures.py")
fixtures_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures_script)
# The tuners' options at each release tag (tests/fixtures/sglang_tuner_cli/v<release>.json: tag commit, path and
# last-changed commit per script), and at the later upstream commits that have tune_down_moe.py (no tag known).
TUNER_CLI = fixtures_script.load_fixtures()
AFTER_TAGS = "after-v0.5.18-00e96592"
OPTION_SETS = {**TUNER_CLI, AFTER_TAGS: json.loads(
    (fixtures_script.FIXTURES / f"{AFTER_TAGS}.json").read_text(encoding="utf-8"))}


def real_parser(release: str, script: str):
    return fixtures_script.parser_from_options(script, OPTION_SETS[release]["scripts"][script]["options"])


def cli_of(release: str, script: str = "tuning_fused_moe_triton.py") -> dict:
    return tuner_cli(script, real_parser(release, script).format_help())


def _release_key(release: str) -> list[int]:
    return [int(part) for part in release.replace(".post", ".").split(".")]


def test_tuner_commands():
    new, old = cli_of("0.5.17"), cli_of("0.5.11")
    common = dict(model_path="/m", tp_size=4, ep_size=1, tuner_args=["--dtype", "auto"], batch_sizes=[1, 64])
    up = tuner_command("/py", "/src/t", kernel="up", mode="tune", search_space_file="/w/s.json", cli=new, **common)
    assert up == ["/py", "/src/t/tuning_fused_moe_triton.py", "--model", "/m", "--tp-size", "4", "--ep-size", "1",
                  "--dtype", "auto", "--batch-sizes", "1", "64", "--tune", "--search-space-file", "/w/s.json"]
    bench = tuner_command("/py", "/src/t", kernel="up", mode="benchmark", cli=new, **common)
    assert bench[-3:] == ["--batch-sizes", "1", "64"] and "--tune" not in bench
    down = tuner_command("/py", "/src/t", kernel="down", mode="tune", gate_up_config="/w/up.json", out_dir="/w/r",
                         cli=cli_of(AFTER_TAGS, "tune_down_moe.py"), **common)
    assert down == ["/py", "/src/t/tune_down_moe.py", "--model", "/m", "--tp-size", "4", "--ep-size", "1",
                    "--dtype", "auto", "--gate-up-config", "/w/up.json", "--batch-sizes", "1", "64", "--out-dir", "/w/r"]
    one = tuner_command("/py", "/src/t", kernel="up", mode="tune", cli=old, **{**common, "batch_sizes": [64]})
    assert one[-3:] == ["--batch-size", "64", "--tune"]
    with pytest.raises(ValueError, match=r"takes one batch size\(s\) per run, not \[1, 64\]"):
        tuner_command("/py", "/src/t", kernel="up", mode="tune", cli=old, **common)
    with pytest.raises(ValueError, match="has no --search-space-file"):
        tuner_command("/py", "/src/t", kernel="up", mode="tune", cli=old, search_space_file="/w/s.json",
                      **{**common, "batch_sizes": [64]})
    assert size_runs([1, 8, 64], old) == [[1], [8], [64]] and size_runs([1, 8, 64], new) == [[1, 8, 64]]


# Every selector combination moe_targets can ask the tuner for (each --dtype it names, per-channel, no fusion).
TUNER_ARGS = [tuner_arguments(dtype, per_channel, no_fusion)
              for dtype in (None, *TUNER_DTYPES) for per_channel in (False, True) for no_fusion in (False, True)]
# The releases whose tuners could not be read at their tags (tests/fixtures/sglang_tuner_cli/README.md says why).
UNVERIFIED_RELEASES = ("0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")


def _parsed(parser, argv: list[str]) -> dict:
    try:
        return vars(parser.parse_args(argv))
    except SystemExit:  # argparse refuses an unknown option, a value of the wrong type or outside its choices
        pytest.fail(f"{parser.prog}'s argparse refuses {argv}")


def test_every_supported_release_has_its_tuner_options_read_at_its_tag_or_is_listed_as_unverified():
    assert sorted(TUNER_CLI, key=_release_key) + list(UNVERIFIED_RELEASES) == list(CONFORMANCE_RELEASES)
    for release, fixture in TUNER_CLI.items():
        assert fixture["tag"] == f"v{release}" and len(fixture["commit"]) == 40
        assert fixture["commit"] in fixture["tag_resolved_by"].values()
        # the commit read is the one the PyPI wheel was built from: all its sources but the generated version file
        assert fixture["wheel_check"]["wheel"].startswith(f"sglang-{release}-")
        assert fixture["wheel_check"]["not_identical"] == ["sglang/_version.py"]


@pytest.mark.parametrize("release", sorted(OPTION_SETS))
def test_every_tuner_flag_we_pass_exists_in_the_release_with_its_type_and_choices(release):
    """The options are upstream's at the release's tag (tests/fixtures/sglang_tuner_cli: commit, path per script);
    the --help is what their argparse prints, and every argv we build (each selector combination) must parse with
    that argparse, type= and choices= included, to the values we meant."""
    entry = OPTION_SETS[release]
    for script, spec in entry["scripts"].items():
        if spec is None:
            continue
        parser = real_parser(release, script)
        cli = tuner_cli(script, parser.format_help())
        assert set(cli["options"]) == {flag[2:].replace("-", "_") for opt in spec["options"] for flag in opt["option_strings"]}
        kernel = "down" if script == "tune_down_moe.py" else "up"
        for tuner_args in TUNER_ARGS:
            meant = tuner_options(tuner_args)
            for mode in (("tune",) if kernel == "down" else ("tune", "benchmark")):
                for sizes in size_runs([1, 8, 4096], cli):
                    argv = tuner_command("/py", "/src/t", kernel=kernel, mode=mode, model_path="/m", tp_size=4,
                                         ep_size=2, tuner_args=tuner_args, batch_sizes=sizes, cli=cli,
                                         gate_up_config="/w/up.json", out_dir="/w/r",
                                         search_space_file="/w/s.json" if cli["search_space_file"] else None)
                    parsed = _parsed(parser, argv[2:])
                    assert (parsed["model"], parsed["tp_size"], parsed["ep_size"]) == ("/m", 4, 2)
                    assert parsed["dtype"] == meant["dtype"]
                    assert parsed["disable_shared_experts_fusion"] is meant["disable_shared_experts_fusion"]
                    assert (parsed.get("batch_sizes") or [parsed.get("batch_size")]) == sizes
                    if kernel == "up":
                        assert parsed["per_channel_quant"] is meant["per_channel_quant"]
                        assert parsed["tune"] is (mode == "tune")
    expected = "one" if release in TUNER_CLI and _release_key(release) < _release_key("0.5.16") else "many"
    assert cli_of(release)["batch_sizes_per_run"] == expected
    assert cli_of(release)["search_space_file"] is (expected == "many")
    assert (entry["scripts"]["tune_down_moe.py"] is None) is (release in TUNER_CLI)  # no tag up to 0.5.18 has it


def test_tuner_help_that_is_not_the_tuner_is_refused():
    with pytest.raises(ValueError, match="is not SGLang's MoE tuner"):
        tuner_cli("tuning_fused_moe_triton.py", "usage: x [-h]\n\noptions:\n  -h, --help  show this help\n")


def test_tuner_environment_overrides_and_defaults():
    env = tuner_environment({"PATH": "/bin", "RAY_DEDUP_LOGS": "1", "LC_ALL": "de_DE.UTF-8"},
                            {"CUDA_VISIBLE_DEVICES": 0, "LANGUAGE": "de"})
    assert env == {"PATH": "/bin", "RAY_DEDUP_LOGS": "1", "CUDA_VISIBLE_DEVICES": "0", "PYTHONUNBUFFERED": "1",
                   "LC_ALL": "C", "LANGUAGE": "C"}  # the forced locale of every command


# --- checkpoints and output ----------------------------------------------------------------------


def test_checkpoint_merges_chunks_and_ignores_other_inputs(tmp_path):
    path = str(tmp_path / "checkpoints" / f"{RTX_UP}.checkpoint")
    inputs = {"file_name": RTX_UP, "search_space_sha256": "aa"}
    print_ = fingerprint(inputs)
    assert read_checkpoint(path, print_) == ({}, None)
    merge_into_checkpoint(path, print_, inputs, {"1": ENTRY, "2": ENTRY}, "up", [1, 2])
    configs = merge_into_checkpoint(path, print_, inputs, {"4": ENTRY}, "up", [4])
    assert sorted(configs, key=int) == ["1", "2", "4"]
    assert read_checkpoint(path, print_)[0] == configs
    other = fingerprint({**inputs, "search_space_sha256": "bb"})
    configs, reason = read_checkpoint(path, other)
    assert configs == {} and "made with other inputs" in reason
    Path(path).write_text("{not json")
    assert "unreadable" in read_checkpoint(path, print_)[1]


@pytest.mark.parametrize(("chunk", "message"), [
    ({"1": {**ENTRY, "num_warps": 3}}, "num_warps=3"),
    ({"1": ENTRY, "2": ENTRY}, r"wrote batch sizes \['1', '2'\] instead of \[1\]"),
    ([], "not a JSON object"),
])
def test_invalid_chunk_output_is_not_checkpointed(tmp_path, chunk, message):
    path = str(tmp_path / "c.checkpoint")
    with pytest.raises(ValueError, match=message):
        merge_into_checkpoint(path, "f", {}, chunk, "up", [1])
    assert not os.path.exists(path)


def test_final_output_only_when_complete_and_valid():
    configs = {"64": ENTRY, "1": ENTRY, "512": ENTRY}
    text = final_output(configs, [1, 64], "up").decode()
    assert json.loads(text) == {"1": ENTRY, "64": ENTRY}
    assert text == json.dumps({"1": ENTRY, "64": ENTRY}, indent=4) + "\n"
    with pytest.raises(ValueError, match=r"batch sizes \[128\] are not tuned yet"):
        final_output(configs, [1, 128], "up")
    with pytest.raises(ValueError, match="checkpointed configs are invalid"):
        final_output({"1": {**ENTRY, "BLOCK_SIZE_M": 24}}, [1], "up")


# --- running a tuner ------------------------------------------------------------------------------

# A "tuner" that starts a grandchild in its process group, reports both pids, then hangs.
HANG_S = 600
HANGING_TUNER = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep({HANG_S})"])
print(child.pid, flush=True)
sys.stderr.write("Start tuning over 8 configurations\\n")
time.sleep({HANG_S})
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_timeout_ends_the_whole_process_group(tmp_path):
    run = run_tuner([sys.executable, "-c", HANGING_TUNER], str(tmp_path), dict(os.environ), timeout_s=2)
    assert run.timed_out and run.rc is None
    assert 2 <= run.seconds < HANG_S, "ended at the timeout, not when the tuner would have ended"
    grandchild = int(run.stdout.split()[0])
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)
    assert "Start tuning over 8 configurations" in log_tail(run)


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group; a zombie left to PID 1 to reap is dead."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while listing
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _invocations(tmp_path: Path, scripts: list[str]) -> list[TunerInvocation]:
    dirs = [tmp_path / f"run{index}" for index in range(len(scripts))]
    for run_dir in dirs:
        run_dir.mkdir()
    return [TunerInvocation([sys.executable, "-c", script], str(run_dir), dict(os.environ))
            for script, run_dir in zip(scripts, dirs)]


# A tuner that says it started (a file in ``started``), then waits until the four have: run one after another, the
# first would wait for the others until it gives up (rc 1).
TOGETHER = """
import os, pathlib, sys, time
started = pathlib.Path({started!r})
(started / str(os.getpid())).touch()
deadline = time.monotonic() + 30
while len(list(started.iterdir())) < 4:
    if time.monotonic() > deadline:
        sys.exit("the other tuners did not start while this one ran")
    time.sleep(0.05)
print(os.getcwd())
"""


def test_tuners_run_at_once_each_with_its_own_output(tmp_path):
    (tmp_path / "started").mkdir()
    runs = run_tuners(_invocations(tmp_path, [TOGETHER.format(started=str(tmp_path / "started"))] * 4), timeout_s=60)
    assert [(run.rc, run.timed_out) for run in runs] == [(0, False)] * 4, [run.stderr for run in runs]
    assert [run.stdout.strip() for run in runs] == [str(tmp_path / f"run{index}") for index in range(4)]


# A hanging tuner that outlasts SIGTERM: it notes the signal (a file in ``told``) and exits only once both such
# tuners have been told, else at SIGKILL after the grace period. Told one group after another, neither sees the other.
STUBBORN_TUNER = HANGING_TUNER.replace("import subprocess, sys, time", """import os, pathlib, signal, subprocess, sys, time
told, saw = pathlib.Path({told!r}), pathlib.Path({saw!r})
def on_term(signum, frame):
    (told / str(os.getpid())).touch()
    while len(list(told.iterdir())) < 2:
        time.sleep(0.05)
    (saw / str(os.getpid())).touch()
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)""")
DEADLINE_S = 5  # the finished run's python starts and exits well within it


def test_one_deadline_ends_every_group_still_running_and_keeps_the_finished_runs_result(tmp_path):
    groups = []
    told, saw = tmp_path / "told", tmp_path / "saw"
    told.mkdir()
    saw.mkdir()
    stubborn = STUBBORN_TUNER.format(told=str(told), saw=str(saw))
    runs = run_tuners(_invocations(tmp_path, [stubborn, "import sys; sys.exit(4)", stubborn]), timeout_s=DEADLINE_S,
                      on_start=groups.append)
    assert [(run.rc, run.timed_out) for run in runs] == [(None, True), (4, False), (None, True)]
    assert len(list(saw.iterdir())) == 2, "the groups get SIGTERM together: one grace period, not one each"
    assert runs[1].seconds < runs[0].seconds and DEADLINE_S <= min(runs[0].seconds, runs[2].seconds)
    grandchildren = [int(runs[index].stdout.split()[0]) for index in (0, 2)]
    deadline = time.monotonic() + 5
    while any(map(_alive, grandchildren)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(groups) == 3 and not any(map(_alive, grandchildren + groups))
    assert [_group_members(group) for group in groups] == [[], [], []]


def test_finished_run_reports_rc_and_output(tmp_path):
    script = ("import sys; print('Tuning took 1.50 seconds'); "
              "sys.stderr.write('\\x1b[36m(BenchmarkWorker pid=7)\\x1b[0m Fatal Python error\\n'); sys.exit(3)")
    run = run_tuner([sys.executable, "-c", script], str(tmp_path), dict(os.environ), timeout_s=30)
    assert (run.rc, run.timed_out) == (3, False)
    assert run.stdout == "Tuning took 1.50 seconds\n" and run.stderr.endswith("Fatal Python error\n")
    assert log_tail(run, lines=1) == "(BenchmarkWorker pid=7) Fatal Python error"


def test_log_tail_keeps_a_crash_report_printed_before_a_long_traceback():
    traceback = [f"  File \"driver.py\", line {n}" for n in range(40)]
    stderr = "\n".join(["(BenchmarkWorker pid=7) Fatal Python error: Segmentation fault", *traceback,
                        "ray.exceptions.ActorDiedError: The actor died unexpectedly"])
    run = TunerRun(rc=1, timed_out=False, seconds=1.0, stdout="Tuning took 1.50 seconds\n", stderr=stderr)
    tail = log_tail(run, lines=5).splitlines()
    assert tail[0] == "(BenchmarkWorker pid=7) Fatal Python error: Segmentation fault"
    assert tail[1:] == [*traceback[-4:], "ray.exceptions.ActorDiedError: The actor died unexpectedly"]


def _fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "python"
    path.write_text(f"#!{sys.executable}\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_ray_cluster_gpus_reads_the_last_stdout_line(tmp_path):
    python = _fake_python(tmp_path, "import sys; sys.stderr.write('Connecting to existing Ray cluster\\n'); print(8)")
    assert ray_cluster_gpus(python, {"RAY_ADDRESS": "10.0.0.1:6379"}) == 8


@pytest.mark.parametrize("body", ["import sys; sys.stderr.write('ConnectionError: GCS unreachable'); sys.exit(1)",
                                  "print(0)"])
def test_ray_cluster_without_gpus_or_answer_is_an_error(tmp_path, body):
    with pytest.raises(ValueError, match=r"^environment\.RAY_ADDRESS: cannot count the GPUs of the Ray cluster at 10\.0\.0\.1:6379"):
        ray_cluster_gpus(_fake_python(tmp_path, body), {"RAY_ADDRESS": "10.0.0.1:6379"})


# --- progress -------------------------------------------------------------------------------------


def test_progress_eta_counts_only_batch_sizes_tuned_in_this_run():
    # 6 of 18 resumed from the checkpoint, 4 tuned now in 100 s: 8 left at 25 s each.
    entry = progress_entry([16, 24, 32, 48], 10, 18, 100.0, 4)
    assert entry == {"batch_sizes": [16, 24, 32, 48], "done": 10, "total": 18, "elapsed_s": 100.0, "eta_s": 200.0}
    line = progress_line("gpu1", "up", RTX_UP, entry)
    assert line == (f"moe_tune [gpu1] up {RTX_UP}: 10/18 batch sizes (just tuned [16, 24, 32, 48]), "
                    "elapsed 0:01:40, ETA 0:03:20")
    assert progress_entry([1], 1, 1, 3.0, 0)["eta_s"] is None


def test_the_fixture_script_reads_a_tuners_options_as_its_argparse_has_them():
    """scripts/tuner_cli_fixtures.py reads add_argument calls statically; on the emulator's tuner (our code, the
    same argparse layout as upstream's) that gives the option set its own --help lists."""
    source = (Path(__file__).resolve().parents[4] / "tests" / "emulator" / "sglang_src" / "benchmark" / "kernels"
              / "fused_moe_triton" / "tune_down_moe.py").read_text()
    options = fixtures_script.options_from_source(source)
    assert [option["option_strings"] for option in options] == [
        ["--model"], ["--tp-size"], ["--ep-size"], ["--dtype"], ["--gate-up-config"], ["--batch-sizes"], ["--out-dir"],
        ["--disable-shared-experts-fusion"]]
    cli = tuner_cli("tune_down_moe.py", fixtures_script.parser_from_options("tune_down_moe.py", options).format_help())
    assert cli["batch_sizes_per_run"] == "many" and "gate_up_config" in cli["options"]
