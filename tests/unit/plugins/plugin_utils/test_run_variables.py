"""Top-level variables nothing in the collection reads (issue #39 item 7): `tuning_run_polcy` was silently ignored
(the default policy applied) while a typo one level down got a did-you-mean."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils.run_variables import input_names, unknown_variables

REPO = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize(("name", "closest"), [
    ("tuning_run_polcy", "tuning_run_policy"),
    ("tuning_run_benchs", "tuning_run_bench"),
    ("sglang_servr_args", "sglang_server_args"),
    ("sglang_candidate_flagsets", "sglang_candidate_flag_sets"),
    ("sglang_modelpath", "sglang_model_path"),
])
def test_a_misspelt_variable_is_an_error_naming_the_closest_input(name, closest):
    assert unknown_variables([name, "tuning_run_policy", "sglang_python"]) == [
        f"{name}: no role or playbook of llmops.sglang reads this variable (a typo?); did you mean {closest!r}?"]


def test_names_without_the_collections_prefix_or_without_a_close_input_are_judged_alone():
    assert unknown_variables(["ansible_host", "my_tuning_run_x", "model_path"]) == []
    assert unknown_variables(["sglang_zzzzzzzzzzzzzzzzzzzz"]) == [
        "sglang_zzzzzzzzzzzzzzzzzzzz: no role or playbook of llmops.sglang reads this variable (a typo?)"]


def test_the_facts_the_collection_sets_itself_and_its_inputs_are_known():
    assert unknown_variables(["tuning_run_dir", "tuning_run_selected", "tuning_run_stage_dir", "tuning_run_measured",
                              "sglang_server_result", "sglang_preflight_gpus", *input_names()]) == []


@pytest.mark.parametrize("inventory", ["inventory", "examples/inventory"])
def test_every_variable_of_the_shipped_inventories_is_read(inventory):
    listed = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "--list", "-i", inventory],
                            cwd=REPO, capture_output=True, text=True, check=True,
                            env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    names = {name for host in json.loads(listed.stdout)["_meta"]["hostvars"].values() for name in host}
    assert {"sglang_candidate_flag_sets", "tuning_run_bench"} <= names
    assert unknown_variables(names) == []
