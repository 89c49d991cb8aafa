"""#15 item 10 on a sandbox host: the deployed unit runs as the dedicated system user with the least a GPU server
needs (systemd-analyze security <= 5.0), is enabled, can write only its state and cache directories, and still
serves, reads its MoE configs and publishes its (emulated) GPU memory."""
from __future__ import annotations

import re

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from tests.integration.sglang_server import BASELINE, deploy, host_state, http_status

pytestmark = pytest.mark.sandbox
MAX_EXPOSURE = 5.0
RTX_UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
RTX_DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
EXPOSURE = re.compile(r"Overall exposure level for sglang\.service: (\d+(?:\.\d+)?) (\w+)")


@pytest.fixture(scope="module")
def served(fleet, runner, gpu1):
    result, res = deploy(runner, BASELINE)
    assert result.status == "successful", result.stdout[-3000:]
    pid = fleet.run(gpu1, "systemctl", "show", "-p", "MainPID", "--value", "sglang.service").stdout.strip()
    return res, pid


def test_exposure_score_at_most_5_and_the_unit_is_enabled(fleet, gpu1, served):
    report = fleet.run(gpu1, "systemd-analyze", "security", "--no-pager", "sglang.service").stdout
    match = EXPOSURE.search(report)
    assert match, report[-2000:]
    score = float(match.group(1))
    print(f"\nsystemd-analyze security sglang.service: {score} {match.group(2)}")
    assert score <= MAX_EXPOSURE, report
    assert fleet.run(gpu1, "systemctl", "is-enabled", "sglang.service", check=False).stdout.strip() == "enabled"
    assert host_state(fleet, gpu1)[2] == "active" and http_status(fleet, gpu1, 30000) == 200


def test_runs_as_a_system_user_without_capabilities(fleet, gpu1, served):
    _, pid = served
    status = dict(line.split(":", 1) for line in fleet.run(gpu1, "cat", f"/proc/{pid}/status").stdout.splitlines()
                  if ":" in line)
    user = fleet.run(gpu1, "getent", "passwd", "sglang").stdout.strip().split(":")
    assert status["Uid"].split()[0] == user[2] != "0"
    assert int(user[2]) < 1000 and user[6] in ("/usr/sbin/nologin", "/sbin/nologin"), "a system user, no login shell"
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"


@pytest.mark.parametrize(("path", "writable"), [
    ("/root/.ssh/llmops-probe", False), ("/opt/sglang/venv/bin/llmops-probe", False),
    ("/run/systemd/system/llmops-probe", False), ("/srv/models/Qwen3.5-122B-A10B/llmops-probe", False),
    ("/etc/llmops-probe", False), ("/var/lib/sglang/llmops-probe", True), ("/var/cache/sglang/llmops-probe", True),
])
def test_only_its_state_and_cache_directories_are_writable(fleet, gpu1, served, path, writable):
    """Tried from inside the server's own mount namespace, as its user."""
    _, pid = served
    ids = fleet.run(gpu1, "sh", "-c", f"stat -c '%u %g' /proc/{pid}").stdout.split()
    probe = fleet.run(gpu1, "nsenter", f"--target={pid}", "--mount", f"--setuid={ids[0]}", f"--setgid={ids[1]}",
                      "sh", "-c", f"touch {path} && rm -f {path}", check=False)
    assert (probe.returncode == 0) is writable, probe.stderr


def test_gpu_state_is_published(fleet, gpu1, served):
    used = fleet.run(gpu1, "nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits").stdout.split()
    assert used and all(int(mib) > 1000 for mib in used), "the server published its emulated GPU memory"


def test_reads_moe_configs_root_installed_in_its_config_dir(fleet, runner, gpu1, served):
    """The MoE tuner runs as root; the server (its own user, read-only file system) must read what it installed."""
    base = "/var/lib/llmops-hardening-moe"
    site = fleet.run(gpu1, "/opt/sglang/venv/bin/python", "-c",
                     "import os, sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config as m;"
                     "print(os.path.dirname(m.__file__))").stdout.strip()
    upstream = fleet.run(gpu1, "sh", "-c", f"ls {site}/configs/triton_3_5_1/*.json | head -1").stdout.strip()
    for name in (RTX_UP, RTX_DOWN):
        fleet.run(gpu1, "install", "-D", "-m", "644", upstream, f"{base}/configs/triton_3_6_0/{name}")
    try:
        result, res = deploy(runner, BASELINE, sglang_server_environment={
            "CUDA_VISIBLE_DEVICES": "0,1,2,3", "SGLANG_MOE_CONFIG_DIR": base})
        assert result.status == "successful", result.stdout[-3000:]
        statuses = {e["kernel"]: e["status"] for e in parse_startup_log(res["startup_log"])["moe_configs"]}
        assert statuses == {"up": "used", "down": "used"}, res["startup_log"][-3000:]
    finally:
        fleet.run(gpu1, "rm", "-rf", base)
        deploy(runner, BASELINE)
