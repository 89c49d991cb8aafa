"""#5 on a sandbox host: the demo's flag trials diffed from the real journal, and server_facts reading only the
current start of a unit whose journal holds hundreds of thousands of lines from earlier starts."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.ansible import task_durations, task_results
from tests.integration.sglang_server import BASELINE, deploy

pytestmark = pytest.mark.sandbox
PLAYBOOKS = Path(__file__).parent / "playbooks"
FACTS_TASK = "Read the server facts"
# An instance of its own, so the flooded journal does not slow down tests reading sglang.service's journal.
JOURNAL_INSTANCE = {"sglang_service_name": "sglang-journal", "sglang_server_port": 30003}
JOURNAL_FACTS = {"facts_service_name": "sglang-journal", "facts_port": 30003}
DROP_IN_DIR = "/etc/systemd/system/sglang-journal.service.d"
EARLIER_STARTS, LINES_PER_START = 3, 100_000
# One earlier start of the unit that only prints: a startup summary unlike the real one (7 requests), a flood of
# runtime lines and the ready marker; read by mistake, they would change the facts. journald tags a line with the
# invocation it finds in the unit's cgroup when it gets to the line, and drops the tags of processes gone by then:
# the start stays alive until journald has stored all its lines.
FLOOD_SCRIPT = f"""
echo "[2026-01-01 00:00:00 TP0] max_total_num_tokens=1000, chunked_prefill_size=512, max_prefill_tokens=1024, \\
max_running_requests=7, context_len=4096, available_gpu_mem=1.00 GB"
seq -f "[2026-01-01 00:00:01 TP0] Decode batch. #running-req: 7, #token: %.0f, token usage: 0.01, #queue-req: 0," \\
    1 {LINES_PER_START}
echo "[2026-01-01 00:00:02] The server is fired up and ready to roll!"
for attempt in $(seq 300); do
    [ "$(journalctl _SYSTEMD_INVOCATION_ID=$INVOCATION_ID -o cat | wc -l)" -ge {LINES_PER_START + 2} ] && exit 0
    sleep 0.2
done
exit 1
"""
# journald's per-unit rate limit would drop most of the flood. The flood reads the journal to know when journald
# has stored it, which the server's own unprivileged user may not: it runs as root.
FLOOD_DROP_IN = f"""[Service]
Type=oneshot
User=root
Group=root
LogRateLimitIntervalSec=0
ExecStart=
ExecStart=/bin/sh {DROP_IN_DIR}/flood.sh
"""
# Prints "<invocation id> <lines>" for every invocation of the unit in the journal.
COUNT_LINES_PER_INVOCATION = """
for id in $(journalctl -F _SYSTEMD_INVOCATION_ID); do
    echo "$id $(journalctl _SYSTEMD_UNIT=sglang-journal.service _SYSTEMD_INVOCATION_ID=$id -o cat | wc -l)"
done
"""


def test_flag_trials_diff_comes_out_of_the_journal(runner):
    result = runner.run(PLAYBOOKS / "flag_trials.yml", limit="gpu1")
    assert result.status == "successful", result.stdout
    last_diff = task_results(result, "Diff against the baseline the trial flashinfer-allreduce-fusion")["gpu1"]
    trials = last_diff["ansible_facts"]["flag_trial_diffs"]

    fusion = trials["flashinfer-allreduce-fusion"]
    summary = fusion["diff"]["summary_lines"]
    assert "max_running_requests 48 -> 26 (-46%)" in summary
    assert "disable_piecewise_cuda_graph set by the server (not requested): False -> True" in summary
    assert server_made_changes(fusion["diff"]) == ["disable_piecewise_cuda_graph"]
    # what 0.5.11's model runner prints for every cause (the server args decided it silently)
    assert fusion["facts"]["piecewise_cuda_graph_disabled_reason"] == "--disable-piecewise-cuda-graph is set"
    assert fusion["sources"]["max_running_requests"] == "log+server_info"

    # The profile gives the fused MoE sum all-reduce only a decode-time factor (0.995, within noise): the server
    # keeps the flag and changes nothing else.
    fused = trials["fused-moe-sum-all-reduce"]
    assert fused["facts"]["server_args"]["enable_fused_moe_sum_all_reduce"] is True
    assert fused["diff"]["capacity"] == [] and server_made_changes(fused["diff"]) == []
    assert fused["facts"]["max_running_requests"] == 48 and fused["facts"]["disable_piecewise_cuda_graph"] is False


def server_made_changes(diff: dict) -> list[str]:
    return [entry["arg"] for entry in diff["auto_adjusted"] if entry["requested"] is None]


@pytest.fixture
def journal_instance(fleet, runner, gpu1):
    """Removes the sglang-journal instance, and a flood drop-in a failed test left, afterwards."""
    yield
    fleet.run(gpu1, "rm", "-rf", DROP_IN_DIR)
    removed, _ = deploy(runner, BASELINE, **JOURNAL_INSTANCE, sglang_server_state="absent")
    assert removed.status == "successful", removed.stdout


def read_facts(runner) -> tuple[dict, float]:
    result = runner.run(PLAYBOOKS / "server_facts.yml", JOURNAL_FACTS, limit="gpu1")
    assert result.status == "successful", result.stdout
    return task_results(result, FACTS_TASK)["gpu1"], task_durations(result, FACTS_TASK)["gpu1"]


def flood_earlier_starts(fleet, host) -> int:
    """Start the unit EARLIER_STARTS times as a one-shot flood; return the lines its flood-sized invocations hold."""
    fleet.run(host, "systemctl", "stop", "sglang-journal.service")
    fleet.run(host, "sh", "-c", 'mkdir -p "$1" && printf %s "$2" > "$1/flood.sh" && printf %s "$3" > "$1/flood.conf"',
              "sh", DROP_IN_DIR, FLOOD_SCRIPT, FLOOD_DROP_IN)
    fleet.run(host, "systemctl", "daemon-reload")
    for _ in range(EARLIER_STARTS):
        fleet.run(host, "systemctl", "start", "sglang-journal.service")  # a oneshot start returns once it exited
    fleet.run(host, "sh", "-c", 'rm -r "$1" && systemctl daemon-reload', "sh", DROP_IN_DIR)
    counts = fleet.run(host, "sh", "-c", COUNT_LINES_PER_INVOCATION).stdout.split()
    return sum(int(n) for n in counts[1::2] if int(n) >= LINES_PER_START)


def test_server_facts_reads_only_the_current_start(fleet, runner, gpu1, journal_instance):
    first, _ = deploy(runner, BASELINE, **JOURNAL_INSTANCE)
    assert first.status == "successful", first.stdout
    small, small_s = read_facts(runner)

    earlier_lines = flood_earlier_starts(fleet, gpu1)
    assert earlier_lines >= EARLIER_STARTS * LINES_PER_START
    second, deployed = deploy(runner, BASELINE, **JOURNAL_INSTANCE)
    assert second.status == "successful", second.stdout
    large, large_s = read_facts(runner)
    started = time.monotonic()
    whole = fleet.run(gpu1, "sh", "-c", "journalctl -u sglang-journal.service -o cat | wc -l").stdout
    whole_s = time.monotonic() - started
    print(f"server_facts: {small_s:.2f}s with {small['log_lines']} lines in the current start, {large_s:.2f}s "
          f"after {earlier_lines} lines of earlier starts; only listing the unit's whole journal takes {whole_s:.2f}s "
          f"({int(whole)} lines)")

    assert large["invocation_id"] == deployed["invocation_id"] != small["invocation_id"]
    # the deploy returned the facts of this start from the journal it followed; server_facts reads the same ones
    assert deployed["facts"] == large["facts"] and deployed["sources"] == large["sources"]
    facts = large["facts"]
    assert facts["max_running_requests"] == 48 and facts["ready"] is True and facts["error"] is None
    assert large["log_lines"] < 1000, "a start logs a few hundred lines; earlier starts hold 100k each"
    # What it read is journald's own selection of this start (a match on the invocation id, which journald looks
    # up in its field index), not the unit's journal filtered afterwards: no more lines than that selection holds
    # (the server may have logged more since). The times printed above are for the reader; two wall times on a
    # shared machine prove nothing.
    selected = fleet.run(gpu1, "sh", "-c", f"journalctl --no-pager -o cat --all "
                         f"_SYSTEMD_INVOCATION_ID={large['invocation_id']} | wc -l").stdout
    assert 0 < large["log_lines"] <= int(selected) < 1000
