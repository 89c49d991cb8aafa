# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A run's inputs are checked before a stage deploys anything; each problem names the variable (issue 15 item 4)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils.run_inputs import validate_run_inputs

REPO_ROOT = Path(__file__).resolve().parents[4]
DEFAULTS = yaml.safe_load((REPO_ROOT / "roles" / "tuning_run" / "defaults" / "main.yml").read_text())
DEMO = yaml.safe_load((REPO_ROOT / "inventory" / "group_vars" / "sglang_hosts.yml").read_text())


def good_inputs() -> dict:
    return copy.deepcopy({
        "stages": ["preflight", "baseline", "flags", "moe_tune", "verify", "report"], "force": [],
        "bench": DEFAULTS["tuning_run_bench"], "compare": DEFAULTS["tuning_run_compare"],
        "policy": DEFAULTS["tuning_run_policy"], "moe": DEFAULTS["tuning_run_moe"],
        "restart_check": DEFAULTS["tuning_run_restart_check"],
        "flag_sets": DEMO["sglang_candidate_flag_sets"], "baseline_args": DEMO["sglang_baseline_args"],
        "skip_ineffective": DEFAULTS["tuning_run_skip_ineffective"],
        "emulator_time_scale": DEMO["tuning_run_emulator_time_scale"], "inventory_hosts": ["gpu1", "gpu2"],
        "environment": DEMO["sglang_environment"], "service_name": DEMO["sglang_service_name"],
    })


def errors_with(path: list, value, *, remove: bool = False) -> list[str]:
    inputs = good_inputs()
    target = inputs
    for key in path[:-1]:
        target = target[key]
    if remove:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return validate_run_inputs(inputs)


def test_the_role_defaults_and_the_demo_inventory_can_work() -> None:
    assert validate_run_inputs(good_inputs()) == []
    example = yaml.safe_load((REPO_ROOT / "examples" / "inventory" / "group_vars" / "sglang_hosts.yml").read_text())
    assert validate_run_inputs({"bench": example["tuning_run_bench"], "policy": example["tuning_run_policy"],
                                "moe": example["tuning_run_moe"], "flag_sets": example["sglang_candidate_flag_sets"],
                                "inventory_hosts": ["gpu-a01", "gpu-a02"]}) == []


@pytest.mark.parametrize(("path", "value", "message"), [
    (["bench", "concurrency_levels"], [0], "tuning_run_bench.concurrency_levels[0]: must be a positive integer, got 0"),
    (["bench", "concurrency_levels"], [1, "four"],
     "tuning_run_bench.concurrency_levels[1]: must be a positive integer, got 'four'"),
    (["bench", "concurrency_levels"], [], "tuning_run_bench.concurrency_levels: must list at least one concurrency"),
    (["bench", "repeats"], 0, "tuning_run_bench.repeats: must be a positive integer, got 0"),
    (["bench", "request_timeout_s"], 0, "tuning_run_bench.request_timeout_s: must be a number > 0, got 0"),
    (["bench", "max_failed_share"], 5, "tuning_run_bench.max_failed_share: must be a number between 0 and 1, got 5"),
    (["bench", "endpoint"], "completion",
     "tuning_run_bench.endpoint: must be one of completions, chat, generate, got 'completion'; did you mean "
     "'completions'?"),
    (["bench", "repeat"], 5, "tuning_run_bench.repeat: unknown key; did you mean 'repeats'?"),
    (["bench", "port"], 31000, "tuning_run_bench.port: set by the pipeline, not here (it follows sglang_port)"),
    (["bench", "api_key"], "k", "tuning_run_bench.api_key: set by the pipeline, not here (it follows sglang_api_key)"),
    (["bench", "requests_per_level"], 16, "tuning_run_bench.requests_per_level: 16 cannot keep 64 requests in flight"),
    (["bench"], [1, 4], "tuning_run_bench: must be a mapping, got a list"),
    (["compare", "alpha"], 5, "tuning_run_compare.alpha: must be a number between 0 and 1, got 5"),
    (["compare", "metric"], "tok_s", "tuning_run_compare.metric: must be one of agg_tok_s, per_req_tok_s, "
                                     "steady_agg_tok_s, got 'tok_s'"),
    (["compare", "min_effect"], 2, "tuning_run_compare.min_effect: unknown key; did you mean 'min_effect_pct'?"),
    (["policy", "require_verdict"], "better", "tuning_run_policy.require_verdict: must be one of improved, got 'better'"),
    (["policy", "max_capacity_loss_pct"], -1,
     "tuning_run_policy.max_capacity_loss_pct: must be a number between 0 and 100, got -1"),
    (["restart_check", "cv_pct"], 0, "tuning_run_restart_check.cv_pct: must be a number between 0 and 10, got 0"),
    (["restart_check", "repeats"], 1, "tuning_run_restart_check.repeats: must be an integer >= 2, got 1"),
    (["restart_check", "repeats"], 11, "tuning_run_restart_check.repeats: must be at most 10, got 11"),
    (["restart_check", "cv"], 1, "tuning_run_restart_check.cv: unknown key (known: cv_pct, repeats)"),
    (["restart_check"], 0.6, "tuning_run_restart_check: must be a mapping, got 0.6"),
    (["policy", "allow_low_confidence"], "maybe", "tuning_run_policy.allow_low_confidence: must be true or false"),
    (["moe", "batch_sizes"], [1, 0], "tuning_run_moe.batch_sizes[1]: must be a positive integer, got 0"),
    (["moe", "batch_sizes"], "automatic", "tuning_run_moe.batch_sizes: must be null (SGLang's defaults), auto or a "
                                          "list of positive integers, got 'automatic'"),
    (["moe", "search_space"], "prefilter", "tuning_run_moe.search_space: must be full, prefiltered, pruned or the "
                                           "absolute path of a JSON list of configs, got 'prefilter'; did you mean "
                                           "'prefiltered'?"),
    (["moe", "seconds_per_config"], 0, "tuning_run_moe.seconds_per_config: must be a number > 0, got 0"),
    (["flag_sets", 1, "force"], "always", "sglang_candidate_flag_sets[1].force: must be true or false, got 'always'"),
    (["skip_ineffective"], "sometimes", "tuning_run_skip_ineffective: must be true or false, got 'sometimes'"),
    (["emulator_time_scale"], {"serving": 0}, "tuning_run_emulator_time_scale.serving: must be a number > 0, got 0"),
    (["emulator_time_scale"], {"tuning": 0.001},
     "tuning_run_emulator_time_scale.serving: must be a number > 0 (the emulator's time_scale), got None"),
    (["emulator_time_scale"], {"serving": 0.1, "tunning": 0.001},
     "tuning_run_emulator_time_scale.tunning: unknown key; did you mean 'tuning'?"),
    (["emulator_time_scale"], 0.1, "tuning_run_emulator_time_scale: must be a mapping, got 0.1"),
    (["emulator_time_scale"], {"serving": 0.1, "startup": -1},
     "tuning_run_emulator_time_scale.startup: must be a number > 0, got -1"),
    (["moe", "work_dir"], "moe-tune", "tuning_run_moe.work_dir: must be an absolute path on the host, got 'moe-tune'"),
    (["moe", "timeout"], -5, "tuning_run_moe.timeout: must be a number > 0, got -5"),
    (["moe", "cache"], "sometimes", "tuning_run_moe.cache: must be true or false, got 'sometimes'"),
    (["moe", "cache_dir"], 7, "tuning_run_moe.cache_dir: must be a directory on the controller (null = "
                              "<tuning_run_root>/cache/moe-engine), got 7"),
    (["moe", "tune_hosts"], ["gpu1", "gpu9"], "tuning_run_moe.tune_hosts[1]: 'gpu9' is not a host of the inventory"),
    (["flag_sets", 0, "name"], "fused moe", "sglang_candidate_flag_sets[0].name: must be a name of letters, digits"),
    (["flag_sets", 1, "name"], "fused-moe-sum-all-reduce",
     "sglang_candidate_flag_sets[1].name: 'fused-moe-sum-all-reduce' is also the name of sglang_candidate_flag_sets[0]"),
    (["flag_sets", 0, "args"], ["--enable-x"], "sglang_candidate_flag_sets[0].args: must be a non-empty mapping"),
    (["flag_sets", 0, "flags"], {}, "sglang_candidate_flag_sets[0].flags: unknown key"),
    (["flag_sets"], {"name": "x"}, "sglang_candidate_flag_sets: must be a list (or a comma-separated string), got a dict"),
    (["stages"], "baseline,flgs", "tuning_run_stages (-e stages)[1]: unknown stage 'flgs'; did you mean 'flags'?"),
    (["force"], ["moe"], "tuning_run_force (-e force)[0]: unknown stage 'moe'"),
    (["baseline_args"], {"--tp-size": 4}, "sglang_baseline_args: '--tp-size' is not a server arg name"),
    # issue 36 item 12: accepted before, without a bound or a clear error
    (["bench", "concurrency_levels"], [1, 10000000],
     "tuning_run_bench.concurrency_levels[1]: must be at most 4096 requests in flight (one connection each), "
     "got 10000000"),
    (["bench", "level_timeout_s"], None, "tuning_run_bench.level_timeout_s: must be a number > 0, got None"),
    (["flag_sets", 0, "name"], "t1\n", "sglang_candidate_flag_sets[0].name: must be a name of letters, digits"),
])
def test_each_problem_names_the_variable_and_what_is_expected(path: list, value, message: str) -> None:
    errors = errors_with(path, value)
    assert any(error.startswith(message) for error in errors), errors


@pytest.mark.parametrize(("path", "value", "message"), [
    (["baseline_args", "chat_template"], "chatml\n", "sglang_baseline_args.chat_template: contains a newline"),
    (["flag_sets", 0, "args", "cuda_graph_bs"], [1, "2\rx"],
     "sglang_candidate_flag_sets[0].args.cuda_graph_bs[1]: contains a carriage return"),
    (["environment"], {"FOO": "x\nExecStartPre=+/bin/true"}, "sglang_environment.FOO: contains a newline"),
    (["environment"], {"1FOO": "x"}, "sglang_environment: '1FOO' is not a variable name"),
])
def test_values_that_would_leave_their_unit_setting_are_refused_before_the_run(path: list, value, message: str) -> None:
    """The run's inputs were checked for flag names only; a value with a line break reached the unit."""
    errors = errors_with(path, value)
    assert [error for error in errors if error.startswith(message)], errors


@pytest.mark.parametrize(("name", "why"), [
    ("sglang/a", "'sglang/a' is not a service name"), ("", "'' is not a service name"),
    (".", "'.' is not a service name"), ("..", "'..' is not a service name"),
    ("../sglang", "'../sglang' is not a service name"), ("-sglang", "'-sglang' is not a service name"),
    ("sglang b", "'sglang b' is not a service name"), (7, "7 is not a service name"),
    ("sglang\nExecStartPre=+/bin/true", "contains a newline"), ("sglang\x7f", "contains the control character U+007F"),
])
def test_a_service_name_no_unit_can_have_is_refused_naming_the_variable(name, why) -> None:
    """The name every stage deploys, guards and restarts (lookup llmops.sglang.service_name) was not checked: a bad one
    failed at the deploy, after the run directory was made, or had the guard watch a unit that cannot exist."""
    errors = errors_with(["service_name"], name)
    assert len(errors) == 1 and errors[0].startswith(f"sglang_service_name: {why}"), errors


@pytest.mark.parametrize("name", ["sglang", "sglang-a", "sglang_b.2", "llm:serve", "_sglang"])
def test_service_names_a_unit_can_have_pass(name) -> None:
    assert errors_with(["service_name"], name) == []


def test_values_are_taken_like_module_arguments() -> None:
    inputs = good_inputs()
    inputs["bench"].update(concurrency_levels="1,4,16", repeats="5", steady_state="yes", max_failed_share="0.05")
    inputs["stages"] = "baseline,flags"
    inputs["force"] = True
    assert validate_run_inputs(inputs) == []
    assert validate_run_inputs({**good_inputs(), "force": "true"}) == []


def test_all_problems_are_reported_at_once() -> None:
    inputs = good_inputs()
    inputs["bench"]["concurrency_levels"] = [0, -1]
    inputs["bench"]["repeats"] = 0
    assert len(validate_run_inputs(inputs)) == 3


def test_keys_left_out_of_a_partial_override_are_not_errors() -> None:
    assert validate_run_inputs({"bench": {"concurrency_levels": [1, 8]}, "moe": {"batch_sizes": "auto"}}) == []


@pytest.mark.parametrize("run_id", ["../../escaped", "..", ".", "", "a/b", "/tmp/x", "-rf", ".hidden", "r\n",
                                    "x" * 129, None, ["r"]])
def test_a_run_id_that_is_not_one_safe_directory_name_is_refused(run_id) -> None:
    """Issue 36 item 6: -e run_id=../../escaped wrote run.json and the latest link outside the runs root."""
    errors = validate_run_inputs({"run_id": run_id})
    assert len(errors) == 1 and errors[0].startswith("run_id (-e run_id, tuning_run_id): must be 1 to 128 letters"), errors


@pytest.mark.parametrize("run_id", ["20261201T090000Z", "R", "nightly-2026.12.01_a", "x" * 128, 20261201])
def test_run_ids_of_letters_digits_dots_dashes_and_underscores_are_accepted(run_id) -> None:
    assert validate_run_inputs({"run_id": run_id}) == []
