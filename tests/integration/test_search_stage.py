"""The search stage (playbooks/search.yml) on a sandbox host: it finds the known optimum region of a small emulator
profile, records a candidate that runs out of memory at start as infeasible (the server module rolled it back, the
previous server ran again), leaves the adopted configuration running and does nothing new when run again.

The profile is the demo's GPUs and model at real time (time_scale 1), its start as the demo's (3 s). Its optimum by
construction: under a TTFT SLO the capacity is set by how many requests run at once, so max_running_requests 32
beats 8 whatever the chunk size, and mem_fraction_static 0.97 leaves no room for the CUDA graphs (the emulator's
memory plan: 95.6 GiB x 3% < graphs + activation reserve), so every candidate with it fails to start. The baseline
runs 8 requests at once. Measured on 2 shared cores (1000-in/32-out, TTFT p90 <= 300 ms): 32 running requests meet
the SLO up to ~9.5 req/s, 8 up to ~5.7 (with 16 output tokens the two came within noise of each other). The strategy's first candidates are seeded random picks (optuna TPE's startup trials), so
with seed 0 the four restarts of the budget are: an OOM, (32, 4096), (8, 512), an OOM.
"""
from __future__ import annotations

import json

import pytest
import yaml

from tests.emulator.profiles import PROFILES_DIR, profile_document
from tests.integration.ansible import REPO_ROOT, write_demo_inventory
from tests.integration.conftest import SESSION_HOSTS
from tests.integration.sglang_server import on_profile

pytestmark = [pytest.mark.sandbox, pytest.mark.measuring]
# Not gpu1 (the single-host modules) nor gpu3 (test_pipeline's) when the fleet has them; back on the demo afterwards.
HOST = f"gpu{min(SESSION_HOSTS, 2)}"
TUNE = REPO_ROOT / "playbooks" / "tune.yml"
UNIT = "/etc/systemd/system/sglang.service"
RUN_ID = "search-test"
BASELINE_ARGS = {"tp_size": 4, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
                 "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
                 "max_running_requests": 8, "chunked_prefill_size": 512}
SEARCH = {
    "knobs": {"max_running_requests": {"values": [8, 32]}, "chunked_prefill_size": {"values": [512, 4096]},
              "mem_fraction_static": {"values": [0.81, 0.97]}},
    "budget": {"max_restarts": 4},
    "slo": {"ttft_ms": {"target": 300, "percentile": 90}},
    "workload": {"input_len": 1000, "output_len": 32, "requests_per_level": 24, "warmup_requests": 4},
    "rate": {"start_rps": 16, "resolution": 0.3, "repeats": 2, "max_probes": 5},
    "verify": {"repeats": 3, "requests_per_level": 32},
    "seed": 0,
}
EXTRAVARS = {
    "stages": "baseline,search",
    "sglang_baseline_args": BASELINE_ARGS,
    "tuning_run_search": SEARCH,
    "tuning_run_bench": {"concurrency_levels": [8], "repeats": 2, "input_len": 1000, "output_len": 32,
                         "endpoint": "completions", "request_timeout_s": 60},
    "tuning_run_emulator_time_scale": {"serving": 1.0, "tuning": 0.001, "startup": 0.025},
}


@pytest.fixture(scope="module")
def host(fleet, tmp_path_factory):
    """The host on the search profile for this module; back on the demo's afterwards, its server stopped."""
    profile = profile_document(PROFILES_DIR / "demo.yaml")
    profile.update(description="search test: the demo's GPUs and model at real time (its start at the demo's scale)",
                   time_scale=1.0)
    path = tmp_path_factory.mktemp("profile") / "search.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    with on_profile(fleet, next(h for h in fleet.hosts() if h.name == HOST), path) as host:
        yield host


@pytest.fixture(scope="module")
def search(runner, fleet, host, tmp_path_factory):
    inventory = write_demo_inventory(tmp_path_factory.mktemp("inventory"), fleet.connection_vars(),
                                     {HOST: {"ansible_host": host.address}})
    runs = tmp_path_factory.mktemp("runs")
    extravars = {**EXTRAVARS, "tuning_run_root": str(runs), "run_id": RUN_ID}
    result = runner.run(TUNE, extravars, inventory=inventory)
    assert result.status == "successful", result.stdout[-6000:]
    stage_dir = runs / RUN_ID / "search" / HOST
    return {"result": result, "dir": stage_dir, "state": json.loads((stage_dir / "search.json").read_text()),
            "inventory": inventory, "extravars": extravars}


def test_the_search_finds_the_optimum_region(search):
    trials = search["state"]["strategy"]["trials"]
    assert search["state"]["strategy"]["spent"]["restarts"] == 4
    complete = [trial for trial in trials if trial["state"] == "complete"]
    assert complete, trials
    best = max(complete, key=lambda trial: trial["value"])
    assert best["params"]["max_running_requests"] == 32 and best["params"]["mem_fraction_static"] == 0.81, best
    assert best["value"] > 0
    # every other feasible candidate of the budget runs fewer requests at once and meets the SLO at a lower rate
    assert all(trial["value"] < best["value"] for trial in complete if trial["params"]["max_running_requests"] == 8)
    for trial in complete:  # each rate search bracketed its boundary, every probe recorded
        result = json.loads((search["dir"] / "trials" / f"{trial['number']:03d}" / "rate_search.json").read_text())
        # A candidate cut off before it confirmed a rate (rate.cutoff_below_pct, on by default) promises none: 0.
        promised = 0.0 if result["rate_rps"] is None else result["rate_rps"]
        assert promised == trial["value"] and result["bracket"][1] is not None
        if result["rate_rps"] is None:
            assert result["reason"].startswith("stopped: the SLO failed at"), result
        probes = sorted((search["dir"] / "trials" / f"{trial['number']:03d}" / "probes").glob("*.json"))
        assert len(probes) == result["cost"]["probes"]


def test_a_candidate_that_ooms_at_start_is_infeasible_and_the_previous_server_ran_again(search):
    infeasible = [trial for trial in search["state"]["strategy"]["trials"] if trial["state"] == "infeasible"]
    assert infeasible and all(trial["params"]["mem_fraction_static"] == 0.97 for trial in infeasible)
    for trial in infeasible:
        assert trial["reason"].startswith("SGLang failed to start (oom)"), trial
        failure = json.loads((search["dir"] / "trials" / f"{trial['number']:03d}" / "failure.json").read_text())
        assert failure["kind"] == "oom" and failure["fault"] == "candidate"
        assert failure["rolled_back"] is True
        assert "the previous unit was restored and is running again" in failure["message"]
        assert not (search["dir"] / "trials" / f"{trial['number']:03d}" / "probes").exists()


def test_the_best_is_reverified_and_its_configuration_runs(search, fleet, host):
    decision = json.loads((search["dir"] / "verify" / "decision.json").read_text())
    assert decision["adopt"], decision["summary"]
    comparison = decision["comparisons"][decision["candidate"]]
    assert comparison["verdict"] == "improved" and comparison["significant"] and comparison["runs"] == 3
    adopted = json.loads((search["dir"] / "adopted.json").read_text())
    assert adopted["stage"] == "search" and adopted["args"]["max_running_requests"] == 32
    assert adopted["sweep_file"] == f"search/{HOST}/verify/{decision['candidate']}/sweep.json"
    assert (search["dir"].parents[1] / adopted["sweep_file"]).is_file()  # a closed-loop sweep the next stages compare with
    exec_start = next(line for line in fleet.run(host, "cat", UNIT).stdout.splitlines()
                      if line.startswith("ExecStart="))
    assert "--max-running-requests 32" in exec_start and "--mem-fraction-static 0.81" in exec_start
    assert fleet.run(host, "systemctl", "is-active", "sglang.service", check=False).stdout.strip() == "active"
    summary = json.loads((search["dir"].parents[1] / "summary.json").read_text()) \
        if (search["dir"].parents[1] / "summary.json").is_file() else None
    assert summary is None or summary["hosts"][HOST]["stages"]["search"]["status"] == "done"


def test_a_rerun_resumes_and_does_nothing_new(search, runner):
    before = {path: path.read_text() for path in search["dir"].rglob("*.json")}
    again = runner.run(TUNE, search["extravars"], inventory=search["inventory"])
    assert again.status == "successful", again.stdout[-4000:]
    assert again.hosts[HOST].changed == 0
    assert {path: path.read_text() for path in search["dir"].rglob("*.json")} == before
