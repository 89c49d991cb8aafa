"""llmops.sglang.server on a sandbox host with the SGLang emulator: deploy, idempotence, diff,
validation before change, rollback of a failed start, check mode, per-invocation logs."""
from __future__ import annotations

import base64

import pytest

from tests.integration.ansible import REPO_ROOT
from tests.integration.sglang_server import BASELINE, deploy, host_state, on_profile

pytestmark = pytest.mark.sandbox


def test_deploy_then_idempotent_rerun(fleet, runner, gpu1):
    deploy(runner, BASELINE, sglang_server_state="absent")  # earlier test modules leave the baseline running
    first, res = deploy(runner, BASELINE)
    assert first.status == "successful", first.stdout
    assert res["changed"] and res["restarted"]
    assert "The server is fired up and ready to roll!" in res["startup_log"]
    assert res["ready_seconds"] > 0
    assert "--tp-size 4" in " ".join(res["command"])
    unit, invocation, active = host_state(fleet, gpu1)
    assert active == "active" and res["invocation_id"] == invocation
    assert "KillMode=mixed" in unit and "TimeoutStartSec=1800" in unit and "--speculative-algorithm NEXTN" in unit

    second, res2 = deploy(runner, BASELINE)
    assert second.status == "successful"
    assert res2["changed"] is False and res2["restarted"] is False
    assert host_state(fleet, gpu1)[1] == invocation, "an unchanged deploy must not restart the server"

    # The same args in another order: the unit is canonical, so nothing changes and nothing restarts.
    reordered = dict(reversed(list(BASELINE.items())))
    assert list(reordered) != list(BASELINE)
    third, res3 = deploy(runner, reordered)
    assert third.status == "successful"
    assert res3["changed"] is False and res3["restarted"] is False and res3["command"] == res["command"]
    assert host_state(fleet, gpu1)[:2] == (unit, invocation), "reordered args must not rewrite the unit or restart"


def test_changed_flag_restarts_and_diff_shows_it(fleet, runner, gpu1):
    deploy(runner, BASELINE)
    before = host_state(fleet, gpu1)
    result, res = deploy(runner, {**BASELINE, "enable_fused_moe_sum_all_reduce": True}, diff=True)
    assert result.status == "successful", result.stdout
    assert res["changed"] and res["restarted"]
    assert "--enable-fused-moe-sum-all-reduce" in res["diff"]["after"]
    assert "--enable-fused-moe-sum-all-reduce" not in res["diff"]["before"]
    assert host_state(fleet, gpu1)[1] != before[1]


def test_unknown_flag_fails_before_any_change(fleet, runner, gpu1):
    deploy(runner, BASELINE)
    before = host_state(fleet, gpu1)
    result, res = deploy(runner, {**BASELINE, "tp_sise": 2})
    assert result.status == "failed"
    assert "server_args.tp_sise" in res["msg"] and "did you mean tp_size (--tp-size)" in res["msg"]
    assert host_state(fleet, gpu1) == before, "unit and running server must be untouched"


def test_failed_start_rolls_back_to_the_previous_unit(fleet, runner, gpu1):
    deploy(runner, BASELINE)
    before_unit, before_invocation, _ = host_state(fleet, gpu1)
    # Too small a static fraction leaves no room for the KV pool after the weights: SGLang raises
    # "Not enough memory" (too large a fraction fails later, as CUDA OOM in graph capture).
    result, res = deploy(runner, {**BASELINE, "mem_fraction_static": 0.5})
    assert result.status == "failed"
    assert "Not enough memory" in res["msg"] and res["failure"]["kind"] == "oom"
    assert "mem-fraction-static" in res["msg"]
    assert res["rolled_back"] is True
    unit, invocation, active = host_state(fleet, gpu1)
    assert unit == before_unit and active == "active" and invocation != before_invocation
    health = fleet.run(gpu1, "python3", "-c", "import urllib.request as u;print(u.urlopen('http://127.0.0.1:30000/health').status)")
    assert health.stdout.strip() == "200"


def test_check_mode_changes_nothing(fleet, runner, gpu1):
    deploy(runner, BASELINE)
    before = host_state(fleet, gpu1)
    result, res = deploy(runner, {**BASELINE, "cuda_graph_max_bs": 32}, check=True, diff=True)
    assert result.status == "successful"
    assert res["changed"] is True and "restart" in res["actions"]
    assert host_state(fleet, gpu1) == before


def test_startup_log_holds_only_this_invocation(fleet, runner, gpu1):
    for _ in range(3):
        result, res = deploy(runner, BASELINE, sglang_server_state="restarted")
        assert result.status == "successful", result.stdout
        assert res["startup_log"].count("server_args=ServerArgs(") == 1
        assert res["startup_log"].count("The server is fired up and ready to roll!") == 1
        # The log is the journal the wait followed: what a read of this invocation's journal gives (a line logged
        # after the deploy returned may follow it), and the facts come from it.
        # (as bytes: fleet.run reads text with universal newlines, and the progress bars hold "\r")
        journal = base64.b64decode(fleet.run(
            gpu1, "sh", "-c", 'journalctl --no-pager --output=cat --all "_SYSTEMD_INVOCATION_ID=$0" | base64 -w0',
            res["invocation_id"]).stdout).decode("utf-8", errors="surrogateescape")
        assert journal.startswith(res["startup_log"]) and res["startup_log"].endswith("\n")
        assert res["facts"]["ready"] is True and res["facts"]["max_running_requests"] == 48
        assert res["facts_error"] is None and res["log_lines"] == res["startup_log"].count("\n")
    whole = fleet.run(gpu1, "journalctl", "--no-pager", "-o", "cat", "-u", "sglang.service").stdout
    assert whole.count("The server is fired up and ready to roll!") >= 3


def test_false_is_spelled_out_for_a_three_state_flag_of_the_release(fleet, runner, gpu1):
    """0.5.23's enable_tf32_matmul is three-state (argparse BooleanOptionalAction, default None: 0.5.23
    sglang/srt/arg_groups/fields/exec_.py lines 45-53, the option table the emulator plays,
    tests/emulator/sglang/sglang/_emulator/cli/sglang-0.5.23.json): false is --no-enable-tf32-matmul, read from the
    host's --help, and the release's own parser takes the unit's command line (the preflight, check mode). A plain
    switch set to false is left out."""
    with on_profile(fleet, gpu1, REPO_ROOT / "tests" / "emulator" / "profiles" / "newest.yaml"):
        result, res = deploy(runner, {**BASELINE, "enable_tf32_matmul": False, "enable_fused_moe_sum_all_reduce": False},
                             check=True)
    assert result.status == "successful", result.stdout[-4000:]
    assert "--no-enable-tf32-matmul" in res["command"]
    assert not any("fused-moe-sum" in token for token in res["command"])
