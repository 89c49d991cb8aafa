"""The upgrade guard's canary and promotion (issue #37 items 4-6) on sandbox hosts serving the demo (emulated SGLang
0.5.11, Triton 3.6.0, /opt/sglang/venv), each new release installed from the host's wheelhouse by playbooks/upgrade.yml:

- 0.5.23 (Triton 3.6.0) with the tuned configs only in the serving venv's package: carried into the new venv, the
  canary gpu1 serves as well as before on the same workload, so it is promoted, and gpu2 follows in the rollout's batch;
- 0.5.17 (Triton 3.6.0) with the tuned configs in a shared SGLANG_MOE_CONFIG_DIR: it keeps them, but its decode is
  slower (the emulator's per-release regression, RELEASE_DECODE_FACTORS), so its throughput regresses and, under the
  run's SLO, it misses the serving release's goodput rate: the canary is rolled back - the old unit and python serve
  again, the configs untouched - and the playbook fails saying why;
- the future 0.5.24 (Triton 3.9.0) with the configs only in the serving venv: it would lose them (tuned for Triton
  3.6.0). With upgrade_retune=false it is refused and nothing is switched. By default the canary gpu1, its server
  stopped, retunes them with the engine against 0.5.24's python and installs them into 0.5.24's triton_3_9_0
  directory, the prediction says `kept`, the A/B passes, and gpu2 gets the retuned files at its promotion.

A short workload (C=4, 3 runs of the serving release, 2-4 of the new one; the retune: the batch sizes the serving
server's capacity reaches, pruned space). Everything this module put on the hosts is
removed at the end, and that is asserted. A check-mode run before them changes nothing.

Last, `make demo-upgrade`'s path (scripts/demo-upgrade.sh: examples/demo-upgrade/before.yml, then upgrade.yml, both
with examples/demo-upgrade.yml): the real case as an upgrade, 0.5.10 (Triton 3.5.1)
serving its tuned configs from its fused_moe_triton/configs/triton_3_5_1, to 0.5.11 (Triton 3.6.0), which would run
defaults; predicted before anything restarts, retuned on the canary, promoted.
"""
from __future__ import annotations

import hashlib
import itertools
import json

import pytest
import yaml

from tests.integration.ansible import REPO_ROOT, write_demo_inventory
from tests.integration.sglang_server import PLAYBOOK as SERVER_DEPLOY, host_state, http_status
from tests.integration.test_upgrade import DOWN, SERVING_PYTHON, UP, serving_configs, write_tuned

pytestmark = [pytest.mark.sandbox, pytest.mark.measuring]
UPGRADE = REPO_ROOT / "playbooks" / "upgrade.yml"
DEMO_VARS = REPO_ROOT / "examples" / "demo-upgrade.yml"
DEMO_BEFORE = REPO_ROOT / "examples" / "demo-upgrade" / "before.yml"
HOSTS = ["gpu1", "gpu2"]
PORT = 30000
ARGS = {"tp_size": 4, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4}
ENVIRONMENT = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
SHARED_DIR = "/var/lib/llmops-sglang/upgrade-canary-moe"
BENCH = {"concurrency_levels": [4], "repeats": 3, "input_len": 256, "output_len": 48, "endpoint": "completions",
         "requests_per_level": 16, "warmup_requests": 4, "request_timeout_s": 120}
SEQUENTIAL = {"min_repeats": 2, "max_repeats": 4, "spending": "obrien_fleming", "futility_spending": "pocock",
              "beta": 0.2, "stop_on_regression": True, "one_sided_stops": True}
# p99 latency on this loaded machine moves more than a real server's: the limits leave room for its noise (the
# 0.5.24 regression is +60 % TPOT), the capacity limit is the default.
LATENCY = {"max_tpot_p99_increase_pct": 25, "max_ttft_p99_increase_pct": 200}
# auto: the batch sizes the serving server's capacity reaches (its startup facts: 48 requests x 4 draft tokens, chunked
# prefill 8192), as the MoE stage sizes them.
RETUNE = {"batch_sizes": "auto", "search_space": "pruned"}
# The run's SLO for the regression's goodput: p90 TPOT 1.1 ms of wall time (11 ms on the real GPUs: the emulator runs
# at 10x). The serving release meets it at light load (p90 ~1.0 ms at 8 req/s of 16-request runs, the speculative
# acceptance's spread included) and misses it from ~16-32 req/s on; 0.5.17's decode is 1.6x slower (~1.6 ms), so it
# misses it at any rate. One run a probe and a coarse resolution keep it to a few probes.
SEARCH = {"knobs": {"max_running_requests": {"values": [32, 48]}}, "budget": {"max_restarts": 1},
          "slo": {"tpot_ms": {"target": 1.1, "percentile": 90}},
          "workload": {"input_len": 256, "output_len": 300, "endpoint": "completions", "requests_per_level": 16,
                       "warmup_requests": 2, "request_timeout_s": 60},
          "rate": {"start_rps": 16, "resolution": 0.5, "repeats": 1, "max_probes": 6}}
ANALYSIS = {"bench": {"concurrency_levels": [4], "requests_per_level": 16, "warmup_requests": 4, "input_len": 256,
                      "output_len": 48, "endpoint": "completions"}, "limits": LATENCY}


@pytest.fixture(scope="module")
def hosts(fleet):
    """gpu1 and gpu2; afterwards the services, units, revisions, venvs and configs of this module are gone."""
    by_name = {h.name: h for h in fleet.hosts()}
    chosen = [by_name[name] for name in HOSTS]
    yield chosen
    for host in chosen:
        fleet.run(host, "systemctl", "stop", "sglang.service", check=False)
        fleet.run(host, "systemctl", "disable", "sglang.service", check=False)
        fleet.run(host, "rm", "-rf", "/var/lib/llmops-sglang", "/etc/systemd/system/sglang.service", "/etc/sglang",
                  "/opt/sglang/venvs", SHARED_DIR)
        fleet.run(host, "systemctl", "daemon-reload")
        assert fleet.run(host, "test", "-e", "/opt/sglang/venvs", check=False).returncode == 1
        assert fleet.run(host, "systemctl", "is-active", "sglang.service", check=False).stdout.strip() != "active"


@pytest.fixture(name="upgrade")
def upgrade_fixture(runner, fleet, hosts, tmp_path):
    """Serves the old release on the named hosts with ``environment``, then runs upgrade.yml on them."""
    runs = itertools.count()

    def run(version: str, names: list[str], environment: dict | None = None, check: bool = False, **extravars):
        environment = environment or ENVIRONMENT
        deployed = runner.run(SERVER_DEPLOY, {"target": ",".join(names), "sglang_server_args": ARGS,
                                              "sglang_server_environment": environment, "sglang_python": SERVING_PYTHON,
                                              "sglang_server_ready_timeout": 300})
        assert deployed.status == "successful", deployed.stdout[-4000:]
        inventory = write_demo_inventory(tmp_path / f"inventory-{version}-{next(runs)}", fleet.connection_vars(),
                                         {h.name: {"ansible_host": h.address} for h in hosts if h.name in names})
        before = {h.name: host_state(fleet, h) for h in hosts if h.name in names}
        result = runner.run(UPGRADE, {"upgrade_version": version, "upgrade_wheelhouse": "/srv/wheelhouse",
                                      "tuning_run_root": str(tmp_path / "runs"), "run_id": f"upgrade-{version}",
                                      "upgrade_server_args": ARGS, "upgrade_server_environment": environment,
                                      "tuning_run_bench": BENCH, "tuning_run_sequential": SEQUENTIAL,
                                      "upgrade_canary_policy": {"latency_limits": LATENCY},
                                      "rollout_analysis": ANALYSIS, "rollout_soak_s": 1, **extravars},
                            inventory=inventory, check=check)
        return result, before, tmp_path / "runs" / f"upgrade-{version}"

    return run


def digest(fleet, host, path: str) -> str:
    return hashlib.sha256(fleet.run(host, "cat", path).stdout.encode()).hexdigest()


def test_check_mode_measures_switches_and_promotes_nothing_and_a_bad_slo_changes_nothing(upgrade, fleet, hosts):
    result, before, _ = upgrade("0.5.23", HOSTS, check=True)
    assert result.status == "successful", result.stdout[-6000:]
    assert "check mode: the canary is not measured, so nothing is promoted" in result.stdout
    assert {h.name: host_state(fleet, h) for h in hosts} == before
    assert fleet.run(hosts[0], "test", "-e", "/opt/sglang/venvs", check=False).returncode == 1
    # the run's SLO the canary would measure goodput under is checked before anything is installed
    result, before, _ = upgrade("0.5.23", ["gpu1"], run_id="upgrade-bad-slo",
                                tuning_run_search={**SEARCH, "slo": {"tpot": {"target": 1}}})
    assert result.status == "failed"
    assert "tuning_run_search.slo.tpot: unknown latency" in result.stdout, result.stdout[-6000:]
    assert host_state(fleet, hosts[0]) == before["gpu1"]
    assert fleet.run(hosts[0], "test", "-e", "/opt/sglang/venvs", check=False).returncode == 1


def test_without_the_retune_configs_the_new_release_would_lose_refuse_the_switch_before_anything_changes(upgrade, fleet, hosts):
    gpu1 = hosts[0]
    serving = f"{serving_configs(fleet, gpu1)}/triton_3_6_0"
    write_tuned(fleet, gpu1, serving)
    try:
        result, before, run_dir = upgrade("0.5.24", ["gpu1"], upgrade_retune=False)
        assert result.status == "failed"
        assert "upgrade_version: sglang 0.5.24 is not ready on gpu1, so nothing was switched" in result.stdout, \
            result.stdout[-6000:]
        assert f"up {UP}: lost: MISSES it" in result.stdout and "Retune what the prediction lists" in result.stdout
        assert host_state(fleet, gpu1) == before["gpu1"], "the serving unit was not touched, nor restarted"
        assert not (run_dir / "upgrade" / "gpu1" / "canary").exists(), "nothing was measured"
    finally:
        fleet.run(gpu1, "rm", "-f", f"{serving}/{UP}", f"{serving}/{DOWN}")


def test_a_release_that_serves_as_well_is_carried_measured_and_promoted_through_the_fleet(upgrade, fleet, hosts):
    serving = f"{serving_configs(fleet, hosts[0])}/triton_3_6_0"
    for host in hosts:  # one payload may back both hosts' serving venvs: written (and removed) on each
        write_tuned(fleet, host, serving)
    try:
        result, before, run_dir = upgrade("0.5.23", HOSTS)
        assert result.status == "successful", result.stdout[-6000:]
        canary = json.loads((run_dir / "upgrade" / "gpu1" / "canary.json").read_text())
        assert canary["promote"] is True, canary["summary"]
        assert canary["report"]["versions"]["current"]["sglang"] == "0.5.11"
        assert canary["report"]["versions"]["new"]["sglang"] == "0.5.23"
        assert canary["report"]["configs"]["carried"] == sorted([UP, DOWN])
        assert canary["comparison"]["regressed"] == [] and canary["comparison"]["sequential"]
        assert canary["moe_lost"] == []
        markdown = (run_dir / "upgrade" / "gpu1" / "upgrade.md").read_text()
        assert markdown.startswith("# Upgrade canary: gpu1\n\n**Decision: promote.**"), markdown
        for name in ("old", "new"):
            assert (run_dir / "upgrade" / "gpu1" / "canary" / name / "sweep.json").is_file()
        summary = json.loads((run_dir / "rollout" / "summary.json").read_text())
        assert summary["hosts"]["gpu1"]["status"] == "skipped", summary  # the canary, measured by its A/B
        assert summary["hosts"]["gpu2"]["status"] == "deployed" and summary["hosts"]["gpu2"]["analysis"]["passed"]
        for host in hosts:
            unit, _, active = host_state(fleet, host)
            assert "/opt/sglang/venvs/0.5.23/bin/python" in unit and active == "active", host.name
            assert http_status(fleet, host, PORT) == 200
            carried = fleet.run(host, "sh", "-c", f"ls /opt/sglang/venvs/0.5.23/lib/python3*/site-packages/sglang/srt/"
                                                  f"layers/moe/moe_runner/triton_utils/configs/triton_3_6_0/").stdout
            assert UP in carried and DOWN in carried, host.name
    finally:
        for host in hosts:
            fleet.run(host, "rm", "-f", f"{serving}/{UP}", f"{serving}/{DOWN}")
            fleet.run(host, "rm", "-rf", "/opt/sglang/venvs/0.5.23")


def test_a_release_that_regresses_is_rolled_back_on_the_canary_and_nothing_is_lost(upgrade, fleet, hosts):
    """The run has an SLO (TPOT), so the canary also holds 0.5.17 to the serving release's goodput under it."""
    gpu1 = hosts[0]
    environment = {**ENVIRONMENT, "SGLANG_MOE_CONFIG_DIR": SHARED_DIR}
    write_tuned(fleet, gpu1, f"{SHARED_DIR}/configs/triton_3_6_0")
    tuned = {name: digest(fleet, gpu1, f"{SHARED_DIR}/configs/triton_3_6_0/{name}") for name in (UP, DOWN)}
    result, before, run_dir = upgrade("0.5.17", ["gpu1"], environment, tuning_run_search=SEARCH)
    assert result.status == "failed"
    assert "sglang 0.5.17 rolled back on the canary gpu1: throughput regressed at C=4" in result.stdout, \
        result.stdout[-6000:]
    canary = json.loads((run_dir / "upgrade" / "gpu1" / "canary.json").read_text())
    assert canary["promote"] is False and canary["comparison"]["regressed"] == [4]
    goodput = canary["goodput"]
    assert goodput["serving_rate_rps"] > 0 and goodput["held"] is False, goodput
    assert goodput["failed_runs"] == goodput["runs"] == SEARCH["rate"]["repeats"], goodput
    assert any(reason.startswith("goodput under the SLO fell: the new release missed the SLO in 1 of 1 runs at ")
               for reason in canary["reasons"]), canary["reasons"]
    for name in ("old", "new"):
        recorded = json.loads((run_dir / "upgrade" / "gpu1" / "canary" / name / "goodput.json").read_text())
        assert recorded["phase"] == name and recorded["result"]["probes"], recorded
    assert "## Goodput under the SLO" in (run_dir / "upgrade" / "gpu1" / "upgrade.md").read_text()
    assert canary["report"]["configs"]["kept"] == [UP, DOWN]  # the same Triton: nothing to carry or retune
    assert (run_dir / "upgrade" / "gpu1" / "upgrade.md").read_text().startswith(
        "# Upgrade canary: gpu1\n\n**Decision: roll back.**")
    unit, _, active = host_state(fleet, gpu1)
    assert unit == before["gpu1"][0], "the old unit (the old python) is back"
    assert active == "active" and http_status(fleet, gpu1, PORT) == 200
    assert {name: digest(fleet, gpu1, f"{SHARED_DIR}/configs/triton_3_6_0/{name}") for name in (UP, DOWN)} == tuned
    assert not (run_dir / "rollout").exists(), "nothing was promoted"


def test_configs_a_new_triton_loses_are_retuned_on_the_canary_promoted_and_shipped(upgrade, fleet, hosts, tmp_path):
    serving = f"{serving_configs(fleet, hosts[0])}/triton_3_6_0"
    for host in hosts:
        write_tuned(fleet, host, serving)
    configs = "/opt/sglang/venvs/0.5.24/lib/python3*/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs"
    try:
        result, _, run_dir = upgrade("0.5.24", HOSTS, upgrade_retune_moe={**RETUNE, "cache_dir": str(tmp_path / "cache")})
        assert result.status == "successful", result.stdout[-6000:]
        host_dir = run_dir / "upgrade" / "gpu1"
        retune = json.loads((host_dir / "retune.json").read_text())
        assert retune["files"] == [UP, DOWN] and retune["up"]["cache"]["status"] == "miss", retune["up"].get("cache")
        assert [path.rsplit("/", 1)[-1] for path in retune["installed"]["installed"]] == sorted([UP, DOWN])
        assert all("/venvs/0.5.24/" in path and "/triton_3_9_0/" in path for path in retune["installed"]["installed"])
        assert sorted(p.name for p in (host_dir / "configs").iterdir()) == sorted([UP, DOWN])
        prediction = json.loads((host_dir / "prediction.json").read_text())
        assert [row["verdict"] for row in prediction["moe"]] == ["kept", "kept"] and prediction["ready"], prediction
        assert not (run_dir / "upgrade" / "gpu2" / "retune.json").exists(), "only the canary retunes"
        canary = json.loads((host_dir / "canary.json").read_text())
        assert canary["promote"] is True, canary["summary"]
        assert canary["report"]["configs"]["retuned"] == sorted([UP, DOWN]) and canary["moe_lost"] == []
        cost = canary["report"]["retune_cost"]
        assert cost["gpu_minutes"] > 0 and cost["cache"][UP] == "miss", cost
        reason = retune["up"]["batch_sizes_reason"]
        assert "48 running requests x 4 draft tokens" in reason and "chunked_prefill_size=8192" in reason, reason
        # estimated before the server stopped, from the up kernel's plan (those batch sizes, the pruned space, a miss)
        estimate = retune["estimate"]
        assert estimate["engine"] == "llmops" and estimate["cache"] == "miss" and estimate["kernels"] == 2, estimate
        assert estimate["batch_sizes"] == len(retune["up"]["batch_sizes"]) > 2, estimate
        assert estimate["gpus"] == 4 and estimate["engine_gpu_minutes"] > 0, estimate
        assert cost["estimate"]["engine_gpu_minutes"] == estimate["engine_gpu_minutes"]
        assert (f"- retuned on this host with the engine: {cost['gpu_minutes']:g} GPU-minutes (estimated "
                f"{estimate['engine_gpu_minutes']:g} before the server stopped") in (host_dir / "upgrade.md").read_text()
        summary = json.loads((run_dir / "rollout" / "summary.json").read_text())
        assert summary["hosts"]["gpu2"]["status"] == "deployed", summary  # its prediction lost them; shipped to it
        for host in hosts:
            unit, _, active = host_state(fleet, host)
            assert "/opt/sglang/venvs/0.5.24/bin/python" in unit and active == "active", host.name
            assert http_status(fleet, host, PORT) == 200
            installed = fleet.run(host, "sh", "-c", f"ls {configs}/triton_3_9_0/").stdout
            assert UP in installed and DOWN in installed, host.name
        shipped = {host.name: fleet.run(host, "sh", "-c", f"cat {configs}/triton_3_9_0/{UP}").stdout for host in hosts}
        assert shipped["gpu1"] == shipped["gpu2"] == (host_dir / "configs" / UP).read_text()
        assert fleet.run(hosts[0], "pgrep", "-f", "moe_engine.py", check=False).returncode == 1
    finally:
        for host in hosts:
            fleet.run(host, "rm", "-f", f"{serving}/{UP}", f"{serving}/{DOWN}")
            fleet.run(host, "rm", "-rf", "/opt/sglang/venvs/0.5.24")


def test_the_real_case_as_an_upgrade_its_lost_configs_are_predicted_retuned_on_the_canary_and_promoted(
        runner, fleet, hosts, tmp_path):
    """`make demo-upgrade`'s playbook runs and variables, on gpu1 with the demo inventory's group vars."""
    gpu1, demo = hosts[0], yaml.safe_load(DEMO_VARS.read_text())
    inventory = write_demo_inventory(tmp_path / "inventory-demo", fleet.connection_vars(),
                                     {"gpu1": {"ansible_host": gpu1.address}})
    run_dir = tmp_path / "runs" / "demo-upgrade"
    configs = "/opt/sglang/venvs/0.5.11/lib/python3*/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs"
    try:
        before = runner.run(DEMO_BEFORE, demo, inventory=inventory)
        assert before.status == "successful", before.stdout[-6000:]
        tuned = fleet.run(gpu1, "sh", "-c", "ls /opt/sglang/venvs/0.5.10/lib/python3*/site-packages/sglang/srt/layers/"
                                            "moe/fused_moe_triton/configs/triton_3_5_1/").stdout.split("\n")
        assert UP in tuned and DOWN in tuned
        serving = host_state(fleet, gpu1)
        assert "/opt/sglang/venvs/0.5.10/bin/python" in serving[0] and serving[2] == "active"

        result = runner.run(UPGRADE, {**demo, "tuning_run_root": str(tmp_path / "runs"), "run_id": "demo-upgrade"},
                            inventory=inventory)
        assert result.status == "successful", result.stdout[-6000:]
        # made before anything restarted, from the host as it served
        predicted = json.loads((run_dir / "upgrade" / "gpu1" / "prediction_before.json").read_text())
        assert [(row["file_name"], row["verdict"], row["action"]) for row in predicted["moe"]] == [
            (UP, "lost", "retune"), (DOWN, "lost", "retune")], predicted["summary"]
        assert "triton_3_5_1" in predicted["moe"][0]["action_reason"], predicted["moe"][0]
        canary = json.loads((run_dir / "upgrade" / "gpu1" / "canary.json").read_text())
        assert canary["promote"] is True, canary["summary"]
        versions = canary["report"]["versions"]
        assert (versions["current"]["sglang"], versions["current"]["triton"]) == ("0.5.10", "3.5.1")
        assert (versions["new"]["sglang"], versions["new"]["triton"]) == ("0.5.11", "3.6.0")
        assert canary["report"]["configs"]["retuned"] == sorted([UP, DOWN]) and canary["moe_lost"] == []
        assert (run_dir / "upgrade" / "gpu1" / "upgrade.md").read_text().startswith(
            "# Upgrade canary: gpu1\n\n**Decision: promote.**")
        unit, _, active = host_state(fleet, gpu1)
        assert "/opt/sglang/venvs/0.5.11/bin/python" in unit and active == "active"
        assert http_status(fleet, gpu1, PORT) == 200
        installed = fleet.run(gpu1, "sh", "-c", f"ls {configs}/triton_3_6_0/").stdout
        assert UP in installed and DOWN in installed
    finally:
        fleet.run(gpu1, "systemctl", "stop", "sglang.service", check=False)
        fleet.run(gpu1, "rm", "-rf", "/opt/sglang/venvs/0.5.10", "/opt/sglang/venvs/0.5.11")
