"""#3 on a sandbox host: the SGLang emulator deployed by llmops.sglang.server runs as a systemd unit logging to
journald, says it is the emulator without confusing the parsers, and a bench sweep against it gives the
throughput curve of its profile within the profile's noise."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from tests.integration.ansible import task_results
from tests.integration.sglang_server import BASELINE, deploy

from tests.emulator import EMULATOR, make_importable  # noqa: E402

make_importable()

from sglang._emulator.capacity import plan_memory  # noqa: E402
from sglang._emulator.model_shape import load_model_shape  # noqa: E402
from sglang._emulator.perf import PerfModel, build_perf_model, expected_output_throughput  # noqa: E402
from sglang._emulator.profile import PROFILE_ENV, Profile, load_profile  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

pytestmark = [pytest.mark.sandbox, pytest.mark.measuring]
PLAYBOOKS = Path(__file__).parent / "playbooks"
HOST_PROFILE = "/etc/sglang-emulator/profile.yaml"
LOCAL_MODEL = EMULATOR / "models" / "Qwen3.5-122B-A10B"
# No warm-up (the emulator has nothing to warm up), so that the prefills a level's journal shows are its run's.
SWEEP = {"bench_concurrency_levels": [1, 4, 16, 64], "bench_requests_per_level": 64, "bench_warmup_requests": 0,
         "bench_input_len": 250, "bench_output_len": 250}
EMULATOR_BANNER = "EMULATOR: sglang emulator"


@pytest.fixture(scope="module")
def baseline_server(runner):
    """The deploy result of the baseline served by the emulator with the host's (demo) profile."""
    result, res = deploy(runner, BASELINE)
    assert result.status == "successful", result.stdout
    return res


def journal_entries(fleet, host, invocation_id: str) -> list[dict]:
    """This invocation's journal entries, complete (``--all``: the server_args line is 16 KB) and with MESSAGE
    as text (journald's JSON gives lines with control characters, such as tqdm's carriage returns, as bytes)."""
    output = fleet.run(host, "journalctl", "--no-pager", "--all", "--output=json",
                       f"_SYSTEMD_INVOCATION_ID={invocation_id}").stdout
    entries = [json.loads(line) for line in output.splitlines()]
    for entry in entries:
        if isinstance(entry["MESSAGE"], list):
            entry["MESSAGE"] = bytes(entry["MESSAGE"]).decode("utf-8", "replace")
    return entries


def unit_properties(fleet, host) -> dict[str, str]:
    show = fleet.run(host, "systemctl", "show", "sglang.service",
                     "--property=ActiveState,SubState,MainPID,InvocationID").stdout
    return dict(line.split("=", 1) for line in show.splitlines())


def test_server_runs_under_systemd_with_its_log_in_journald(fleet, gpu1, baseline_server):
    props = unit_properties(fleet, gpu1)
    assert (props["ActiveState"], props["SubState"]) == ("active", "running")
    assert props["InvocationID"] == baseline_server["invocation_id"]
    pid = props["MainPID"]
    assert "sglang.launch_server" in fleet.run(gpu1, "cat", f"/proc/{pid}/cmdline").stdout.split("\0")
    assert "/system.slice/sglang.service" in fleet.run(gpu1, "cat", f"/proc/{pid}/cgroup").stdout

    entries = journal_entries(fleet, gpu1, props["InvocationID"])
    assert {e["_SYSTEMD_UNIT"] for e in entries} == {"sglang.service"}
    assert {e["SYSLOG_IDENTIFIER"] for e in entries} == {"sglang"}
    ready = [e for e in entries if e["MESSAGE"].endswith("The server is fired up and ready to roll!")]
    assert len(ready) == 1 and ready[0]["_PID"] == pid, "the unit's main process logs the ready marker"
    messages = [e["MESSAGE"] for e in entries]
    startup = baseline_server["startup_log"].rstrip("\n").split("\n")  # not splitlines(): tqdm lines hold \r
    assert messages[:len(startup)] == startup, "the deploy's startup log is this invocation's journal"


def test_emulator_marks_itself_and_the_parsers_ignore_it(fleet, runner, gpu1, baseline_server):
    entries = journal_entries(fleet, gpu1, baseline_server["invocation_id"])
    server_lines = [e["MESSAGE"] for e in entries if e["_PID"] == unit_properties(fleet, gpu1)["MainPID"]]
    assert EMULATOR_BANNER in server_lines[0], "the server's first line says it is the emulator"
    journal = "\n".join(e["MESSAGE"] for e in entries)
    banner = [line for line in journal.split("\n") if EMULATOR_BANNER in line]
    assert banner == server_lines[:1]

    result = runner.run(PLAYBOOKS / "server_facts.yml", limit="gpu1")
    assert result.status == "successful", result.stdout
    res = task_results(result, "Read the server facts")["gpu1"]
    assert res["server_info"]["emulator"] is True
    facts = res["facts"]
    assert facts["emulator"] is True and res["sources"]["emulator"] == "log"
    assert facts["ready"] is True and facts["error"] is None and res["mismatches"] == []
    assert not [w for w in facts["warnings"] if "EMULATOR" in w]

    # Everything but the marker is what the parser makes of the same log without the banner. Timings are left
    # out: their total counts from the first timestamped line, and the banner may sit in an earlier second.
    with_banner = parse_startup_log(journal)
    without_banner = parse_startup_log(journal.replace(banner[0] + "\n", ""))
    assert with_banner.pop("emulator") is True and "emulator" not in without_banner
    assert {k: v for k, v in with_banner.items() if k != "timings"} == \
        {k: v for k, v in without_banner.items() if k != "timings"}


def noise_band(profile: Profile, perf: PerfModel, run: dict, empty_slots: float, output_len: int,
               behind_s: float, shared_prefills: int) -> tuple[float, float]:
    """Relative (below, above) band around the noise-free steady-state curve for one run of the sweep.

    Random, 3 sigma: instance_cv (drawn once per server start), request_cv (each request draws its own mean
    accept length) averaged over the run's requests, noise_cv (each decode step) averaged over all their steps.
    Below the curve only, time a closed loop loses and the steady state does not: a request's decode time goes
    with 1/accept length, so the drawn accept lengths cost (1 + request_cv**2) of the time at their mean; the
    share of batch slots left empty (``empty_slots``: between a finished request and its next one, and in the
    drain at the end); each request's last step, which yields only what is left of its tokens; and the wall time
    the emulator's loop fell behind its timeline (``behind_s``, which it counts: the machine's CPU, not the model,
    spent it). Above the curve only, the prefills that shared a batch: the curve has every request pay a prefill's
    fixed cost, while clients whose requests finished in the same step send their next ones together and the
    server prefills them as one batch, which pays it once (``shared_prefills``: requests beyond the first of each
    prefill batch the server logged during the run).
    """
    spread, requests = profile.speculative.request_cv, run["ok"]
    steps_per_request = (output_len - 1) / perf.accept_length
    sigma = math.sqrt(profile.instance_cv ** 2 + spread ** 2 / requests
                      + profile.noise_cv ** 2 / (requests * steps_per_request))
    behind = behind_s / run["wall_s"]
    saved = shared_prefills * perf.prefill_base_s * profile.time_scale / run["wall_s"]
    return 3 * sigma + spread ** 2 + empty_slots + 1 / steps_per_request + behind, 3 * sigma + saved


def empty_slots(perf: PerfModel, run: dict, concurrency: int, max_running: int, input_len: int,
                output_len: int) -> float:
    """The share of the server's batch slots a closed loop left empty that the steady state fills.

    Up to the batch cap, the run's achieved concurrency (Little's law) short of its clients. Above it, queued
    requests count in the clients' latencies, so Little's law sees no empty slot; there the drain is bounded
    instead: at worst, the requests beyond the last full batch run as a batch of their own after it.
    """
    if concurrency <= max_running:
        return max(0.0, 1 - run["achieved_concurrency"] / concurrency)
    # Above the cap the steady state is the full batch's throughput.
    steady = expected_output_throughput(perf, max_running, input_len, output_len, max_running)
    full, rest = divmod(run["ok"], max_running)
    seconds = full * max_running * output_len / steady
    if rest:
        seconds += rest * output_len / expected_output_throughput(perf, rest, input_len, output_len, max_running)
    return 1 - run["ok"] * output_len / seconds / steady


def shared_prefills(fleet, host, invocation_id: str) -> int:
    """Requests the server prefilled in a batch beside another one so far: its log's ``#new-seq`` beyond the first."""
    batches = [re.search(r"#new-seq: (\d+)", e["MESSAGE"]) for e in journal_entries(fleet, host, invocation_id)
               if "Prefill batch." in e["MESSAGE"]]
    return sum(int(batch.group(1)) - 1 for batch in batches)


def emulator_behind_s(fleet, host) -> float:
    """The emulator's count of seconds its loop fell behind (``/server_info``), asked on the host."""
    info = fleet.run(host, "python3", "-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1],"
                     " timeout=5).read().decode())", "http://127.0.0.1:30000/server_info").stdout
    return json.loads(info)["emulator_behind_s"]


def test_sweep_reproduces_the_profile_curve(fleet, runner, gpu1, baseline_server, tmp_path, monkeypatch):
    # One level at a time, so that the seconds the emulator fell behind and its shared prefills are each level's own.
    levels, invocation = [], baseline_server["invocation_id"]
    for concurrency in SWEEP["bench_concurrency_levels"]:
        before = emulator_behind_s(fleet, gpu1), shared_prefills(fleet, gpu1, invocation)
        result = runner.run(PLAYBOOKS / "bench_sweep.yml", {**SWEEP, "bench_concurrency_levels": [concurrency]},
                            limit="gpu1")
        assert result.status == "successful", result.stdout
        (level,) = task_results(result, "Run the sweep")["gpu1"]["sweep"]["levels"]
        levels.append((level, emulator_behind_s(fleet, gpu1) - before[0],
                       shared_prefills(fleet, gpu1, invocation) - before[1]))

    # The emulator's own model, evaluated here with the profile the server ran with (ServerArgs reads it too).
    profile_copy = tmp_path / "profile.yaml"
    profile_copy.write_text(fleet.run(gpu1, "cat", HOST_PROFILE).stdout)
    monkeypatch.setenv(PROFILE_ENV, str(profile_copy))
    profile = load_profile()
    flags = baseline_server["command"][3:]  # after `python -m sglang.launch_server`
    flags[flags.index("--model-path") + 1] = str(LOCAL_MODEL)
    args, shape = prepare_server_args(flags), load_model_shape(str(LOCAL_MODEL))
    facts = parse_startup_log(baseline_server["startup_log"])
    moe = {entry["kernel"]: entry["status"] for entry in facts["moe_configs"]}
    perf, plan = build_perf_model(profile, args, shape, moe["up"], moe["down"]), plan_memory(args, shape, profile)
    assert plan.max_running_requests == facts["max_running_requests"] == 48

    input_len, output_len = SWEEP["bench_input_len"], SWEEP["bench_output_len"]
    report, outside = [], []
    for level, behind_s, shared in levels:
        concurrency, (run,) = level["concurrency"], level["runs"]
        expected = expected_output_throughput(perf, concurrency, input_len, output_len,
                                              plan.max_running_requests) / profile.time_scale
        empty = empty_slots(perf, run, concurrency, plan.max_running_requests, input_len, output_len)
        below, above = noise_band(profile, perf, run, empty, output_len, behind_s, shared)
        change = run["agg_tok_s"] / expected - 1
        report.append(f"C={concurrency}: {run['agg_tok_s']:.0f} tok/s vs {expected:.0f} expected ({change:+.1%}, "
                      f"band -{below:.1%}/+{above:.1%}, emulator behind {behind_s:.2f} s of {run['wall_s']:.1f} s, "
                      f"{shared} shared prefills, client CPU {run['client_cpu_pct']:.0f}%)")
        if not -below <= change <= above:
            outside.append(concurrency)
    print("\n".join(report))
    assert outside == [], "\n".join(report)
