"""llmops-sglang command line: arguments, what reaches the API, exit codes, report and runs, plain output."""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import shutil
import threading
from pathlib import Path

import pytest

from llmops_sglang import api, cli
from llmops_sglang.collection import CollectionNotFound, find_collection
from llmops_sglang.display import event_lines
from llmops_sglang.models import ProgressEvent, RunResult

from tests.unit.api.scripted_cli import DEMO_RUN, scripted_run
from tests.unit.costed_run import demo_run, finish_stages

ESC = "\x1b"


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    shutil.copytree(DEMO_RUN, tmp_path / "20261130T200107Z")
    return tmp_path


@pytest.fixture
def api_calls(monkeypatch) -> list[dict]:
    """api.run replaced by the scripted run; records what the CLI asked for."""
    calls = []

    def recording_run(playbook_or_stage, inventory, extravars=None, run_id=None, on_event=None, **options):
        calls.append({"target": playbook_or_stage, "inventory": inventory, "extravars": extravars, "run_id": run_id,
                      **options})
        return scripted_run(playbook_or_stage, inventory, extravars, run_id, on_event, **options)

    monkeypatch.setattr(api, "run", recording_run)
    monkeypatch.setattr("tests.unit.api.scripted_cli.PAUSE_S", 0)
    return calls


def test_extra_vars_are_yaml_values_or_a_file(tmp_path):
    assert cli.extra_var("stages=flags,verify") == {"stages": "flags,verify"}
    assert cli.extra_var("force=true") == {"force": True}
    assert cli.extra_var("tuning_run_bench={repeats: 5, concurrency_levels: [1, 64]}") == {
        "tuning_run_bench": {"repeats": 5, "concurrency_levels": [1, 64]}}
    assert cli.extra_var("empty=") == {"empty": ""}
    variables = tmp_path / "vars.yml"
    variables.write_text("sglang_port: 30001\n")
    assert cli.extra_var(f"@{variables}") == {"sglang_port": 30001}


@pytest.mark.parametrize("argv", [
    ["tune", "-i", "inv", "-e", "no-equals-sign"],
    ["tune", "-i", "inv", "-e", "@/nonexistent/vars.yml"],
    ["tune"],                                            # no inventory
    ["stage", "flags", "-i", "inv"],                     # a stage resumes a run: --run-id is required
    ["stage", "warmup", "-i", "inv", "--run-id", "r1"],  # not a stage
    ["report"],
])
def test_wrong_command_lines_exit_2(argv, api_calls, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == cli.EXIT_USAGE and api_calls == []
    assert "usage: llmops-sglang" in capsys.readouterr().err


def test_tune_hands_its_options_to_the_api(api_calls, tmp_path):
    code = cli.main(["tune", "-i", "inventory/prod", "--stages", "flags,verify", "--force", "flags",
                     "-e", "sglang_port=30001", "-e", "x=a", "--runs-dir", str(tmp_path), "--timeout", "90"])
    assert code == cli.EXIT_OK
    call, = api_calls
    assert re.fullmatch(r"\d{8}T\d{6}Z", call.pop("run_id"))  # chosen by the CLI so it can say how to resume
    assert isinstance(call.pop("cancel"), threading.Event)  # set when the user interrupts
    assert call == {"target": "tune", "inventory": "inventory/prod", "extravars": {"sglang_port": 30001, "x": "a"},
                    "stages": "flags,verify", "force": "flags", "runs_dir": tmp_path, "limit": None, "check": False,
                    "diff": False, "verbosity": 0, "timeout": 90.0}


@pytest.mark.parametrize("command", [["tune"], ["stage", "verify", "--run-id", "r1"]])
def test_limit_check_diff_and_verbosity_reach_the_api(api_calls, command):
    assert cli.main([*command, "-i", "inv", "--limit", "gpu1,gpu2", "--check", "--diff", "-vvv"]) == cli.EXIT_OK
    assert cli.main([*command, "-i", "inv", "-l", "gpu3", "-C", "-D", "-v", "-v"]) == cli.EXIT_OK
    assert [(c["limit"], c["check"], c["diff"], c["verbosity"]) for c in api_calls] == [
        ("gpu1,gpu2", True, True, 3), ("gpu3", True, True, 2)]


def all_arguments(parser):
    """Every argument of the parser and its subcommands, except argparse's own --help."""
    for action in parser._actions:  # pylint: disable=protected-access
        if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
            for name, command in action.choices.items():
                yield from ((f"{name} {label}", help_text) for label, help_text in all_arguments(command))
        elif not isinstance(action, argparse._HelpAction):  # pylint: disable=protected-access
            yield "/".join(action.option_strings) or action.dest, action.help


def test_every_argument_has_help():
    arguments = dict(all_arguments(cli.parser()))
    assert {"--version", "tune -C/--check", "stage name", "report run_id", "runs --runs-dir"} <= set(arguments)
    assert [label for label, help_text in arguments.items() if not help_text] == []


def test_version_names_the_package_the_collection_and_where_it_is(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == cli.EXIT_OK
    collection = find_collection()
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [f"llmops-sglang {importlib.metadata.version('llmops-sglang')}",
                         f"llmops.sglang {collection.version} at {collection.path} -> {collection.path.resolve()}"]
    assert lines[2] == f"ansible.cfg: {collection.config} (development install)"
    assert re.fullmatch(r"ansible-core 2\.(19|20|21)\.\d+, Python 3\.\d+\.\d+", lines[3])


def test_version_without_the_collection_says_so_and_exits_1(monkeypatch, capsys):
    def missing():
        raise CollectionNotFound("not on any collections path")

    monkeypatch.setattr(cli, "find_collection", missing)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == cli.EXIT_FAILED
    assert "llmops.sglang: not found: not on any collections path" in capsys.readouterr().out.splitlines()


def test_runs_and_report_default_to_runs_of_the_current_directory(runs_dir, monkeypatch, capsys):
    monkeypatch.chdir(runs_dir.parent)
    runs_dir.rename(runs_dir.parent / "runs")
    assert cli.main(["runs"]) == cli.EXIT_OK
    assert "20261130T200107Z" in capsys.readouterr().out
    assert cli.main(["report", "20261130T200107Z"]) == cli.EXIT_OK
    assert (runs_dir.parent / "runs" / "20261130T200107Z" / "report.html").is_file()


def test_stage_runs_that_stage_of_the_given_run(api_calls):
    assert cli.main(["stage", "verify", "-i", "inv", "--run-id", "20261130T200107Z"]) == cli.EXIT_OK
    call, = api_calls
    assert (call["target"], call["run_id"], call["stages"]) == ("verify", "20261130T200107Z", None)


def test_redirected_output_is_plain_lines_and_the_final_tables(api_calls, capsys):
    assert cli.main(["tune", "-i", "inv"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert ESC not in out
    lines = out.splitlines()
    assert lines[:6] == [
        "== MoE tuning - tune the fused-MoE configs the server misses, install them, prove the effect",
        "[MoE tuning] Tune the up kernel",
        "[MoE tuning] gpu1 moe_tune [gpu1] up E=256,N=256,device_name=X.json: 2/4 batch sizes (just tuned [8]), "
        "elapsed 0:00:41, ETA 0:00:41",
        "[MoE tuning] Sweep it",
        "[MoE tuning] gpu1 C=64: 13,360.2 tok/s aggregate",
        "[MoE tuning] gpu1 adopt: improved at C=1,4,32,64"]
    assert "llmops.sglang.tune: successful (rc 0)" in out
    outcome = r"gpu1 \(emulated\) +preflight baseline flags moe_tune verify +moe_tune +64 +12,645\.3 +13,360\.2 +\+5\.7%"
    assert "(emulated: no GPU measured these numbers)" in out
    assert re.search(outcome, out)
    assert re.search(r"gpu1 +flags: flashinfer-allreduce-fusion +revert +revert: regressed at C=64", out)
    assert f"run directory: {DEMO_RUN}" in out


def test_a_failed_run_exits_1_and_names_the_failed_task(api_calls, capsys, monkeypatch):
    monkeypatch.setenv("SCRIPTED_STATUS", "failed")
    assert cli.main(["tune", "-i", "inv"]) == cli.EXIT_FAILED
    out = capsys.readouterr().out
    assert "llmops.sglang.tune: failed (rc 2)" in out
    assert "gpu1: MoE tuning / Sweep it: the sweep stopped early" in out


def test_a_run_where_no_host_matched_exits_1_and_says_failed(tmp_path, monkeypatch, capsys):
    """The real pipeline on an inventory without sglang_hosts: every play is skipped, ansible-playbook exits 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.yml").write_text("all:\n  hosts: {}\n")
    assert cli.main(["tune", "-i", "empty.yml", "--run-id", "r1"]) == cli.EXIT_FAILED
    out = capsys.readouterr().out
    assert "llmops.sglang.tune: failed (rc 0)" in out and "successful" not in out
    assert "no host ran a task: no play matched a host of the inventory" in out


def test_an_inventory_path_that_does_not_exist_exits_1_naming_it_before_anything_runs(tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["tune", "-i", "inventroy/", "--run-id", "r1"]) == cli.EXIT_FAILED
    out = capsys.readouterr().out
    assert "inventory inventroy/: no such file or directory" in out and "rc 0" not in out
    assert not (tmp_path / "runs").exists()


def test_report_regenerates_the_report_of_a_run(runs_dir, capsys):
    assert cli.main(["report", "20261130T200107Z", "--runs-dir", str(runs_dir)]) == cli.EXIT_OK
    run_dir = runs_dir / "20261130T200107Z"
    assert (run_dir / "report.html").is_file() and (run_dir / "summary.json").is_file()
    out = capsys.readouterr().out
    assert ESC not in out and f"report: {run_dir / 'report.html'}" in out and "+5.7%" in out


def test_report_shows_the_gpu_minutes_per_stage_and_per_configuration(tmp_path, capsys):
    run_dir = demo_run(tmp_path / "20261130T200107Z")
    costs = finish_stages(run_dir)
    skipped = run_dir / "flags/gpu1/trials/flashinfer-allreduce-fusion"
    (skipped / "cost.json").write_text(json.dumps({"skipped": True, "gpu_minutes": 0.0, "saved_gpu_minutes": 27.4}))
    assert cli.main(["report", "20261130T200107Z", "--runs-dir", str(tmp_path)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    total = sum(cost["gpu_minutes"] for cost in costs.values())
    assert f"GPU-minutes (total {total:,.1f}, real-GPU equivalent of the emulated run)" in out
    stages = " +".join(f"{costs[s]['gpu_minutes']:,.1f}" for s in ("preflight", "baseline", "flags", "moe_tune", "verify"))
    assert re.search(rf"gpu1 +{stages} +{total:,.1f} +27\.4 +- *$", out, re.MULTILINE), out
    assert re.search(r"gpu1 +flags: flashinfer-allreduce-fusion +0\.0 +skipped \(preflight\), saved ~27\.4", out), out


def test_report_of_an_unknown_run_exits_1(runs_dir, capsys):
    assert cli.main(["report", "nope", "--runs-dir", str(runs_dir)]) == cli.EXIT_FAILED
    assert f"no run nope in {runs_dir}" in capsys.readouterr().out


def test_runs_lists_date_stages_and_outcome(runs_dir, capsys):
    assert cli.main(["runs", "--runs-dir", str(runs_dir)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert ESC not in out
    assert re.search(r"20261130T200107Z +2026-11-30 20:01:08 +gpu1 +preflight baseline flags", out)
    assert "gpu1: +5.7% at C=64, adopted moe_tune" in out


def test_runs_without_runs_exits_1(tmp_path, capsys):
    assert cli.main(["runs", "--runs-dir", str(tmp_path)]) == cli.EXIT_FAILED
    assert f"no runs in {tmp_path}" in capsys.readouterr().out


def test_result_type_is_what_the_cli_reads():
    assert RunResult(status="successful", rc=0, playbook="p", hosts={}, artifacts={}, run_id=None, run_dir=None,
                     summary=None).succeeded


def test_a_line_without_stage_or_host_has_no_prefix():
    assert event_lines(ProgressEvent("progress", message="[WARNING]: x")) == ["[WARNING]: x"]
    assert event_lines(ProgressEvent("failed", stage="Flags - trials", task="Deploy", host="gpu1", message="a\nb")) == [
        "[Flags] gpu1 FAILED Deploy: a", "    b"]
