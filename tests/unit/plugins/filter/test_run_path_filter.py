# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.run_path: the one way YAML names a place in a run directory (issue 41 item 1)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.run_path import run_path

ADOPTED = {"stage": "flags", "args": {}, "environment": {}, "moe_configs": [],
           "sweep_file": "flags/gpu1/trials/fusion/sweep.json", "facts_file": "flags/gpu1/trials/fusion/facts.json"}


def test_a_place_is_named_by_stage_host_candidate_and_record():
    assert run_path("/runs/r1", stage="flags", host="gpu1", record="stage") == "/runs/r1/flags/gpu1/stage.json"
    assert run_path("/runs/r1", stage="flags", host="gpu1", measurement="fusion") == "/runs/r1/flags/gpu1/trials/fusion"
    assert run_path("/runs/r1", record="run") == "/runs/r1/run.json"


def test_a_list_of_hosts_gives_a_path_each():
    assert run_path("/runs/r1", stage="moe_tune", host=["gpu1", "gpu2"], record="provenance") == [
        "/runs/r1/moe_tune/gpu1/provenance.json", "/runs/r1/moe_tune/gpu2/provenance.json"]


@pytest.mark.parametrize("adopted", [ADOPTED, {"stage": "baseline", "sweep": "baseline/gpu1/sweep.json"}],
                         ids=["current", "before-2.0.0"])
def test_an_adopted_configuration_leads_to_the_records_of_its_measurement(adopted):
    folder = "/runs/r1/" + adopted.get("sweep_file", adopted.get("sweep")).rsplit("/", 1)[0]
    assert run_path("/runs/r1", adopted=adopted, record="cost") == folder + "/cost.json"


@pytest.mark.parametrize(("options", "message"), [
    ({"record": "sweep.json"}, "unknown run record 'sweep.json'"),
    ({"stage": "flag"}, "unknown stage 'flag'"),
    ({"adopted": ADOPTED}, "give it a record"),
    ({"adopted": ADOPTED, "stage": "flags", "record": "sweep"}, "no stage, host or measurement"),
    ({"adopted": {"stage": "flags"}, "record": "sweep"}, "sweep_file"),
])
def test_a_place_the_layout_does_not_have_fails_the_task_naming_why(options, message):
    with pytest.raises(AnsibleFilterError, match=f"run_path: .*{message}"):
        run_path("/runs/r1", **options)
