"""What a rollout batch decides from its hosts' records (playbooks/rollout_batches.yml, docs/reliability.md
"Rollouts"): a host's record after its deploy and analysis; which hosts failed, which the undo puts back, the
summary and the stop message."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.rollout_batch_outcome import rollout_batch_outcome
from ansible_collections.llmops.sglang.plugins.filter.rollout_host_record import rollout_host_record

ARGS = {"tp_size": 4}
SLOWER = {"passed": False, "reasons": ["level 4: p99 TPOT 32.0 ms is +60.0% over 20.0 ms before the change (limit +25%)",
                                       "level 4: error rate 3.1% (2 of 64 requests) > 1.0%"]}


def deployed(batch: int, revision: str = "r1", verdict: dict | None = None) -> dict:
    return rollout_host_record(verdict, batch=batch, revision=revision, changed=True, args=ARGS, moe_configs=["E=8.json"],
                               invocation_id="abc")


def test_a_host_that_passes_its_analysis_is_deployed_with_what_it_runs():
    record = deployed(1, verdict={"passed": True, "reasons": []})
    assert record == {"status": "deployed", "batch": 1, "revision": "r1", "changed": True, "args": ARGS,
                      "moe_configs": ["E=8.json"], "invocation_id": "abc", "analysis": {"passed": True, "reasons": []},
                      "reason": None}


def test_a_host_not_judged_is_deployed():
    """Analysis off, or a deploy that changed nothing: no verdict."""
    record = rollout_host_record(None, batch="2", revision="r1", changed="false", args=None)
    assert (record["status"], record["batch"], record["changed"], record["moe_configs"]) == ("deployed", 2, False, [])


def test_a_host_that_fails_its_analysis_is_failed_with_every_reason():
    record = deployed(2, verdict=SLOWER)
    assert record["status"] == "failed"
    assert record["reason"] == "analysis: " + "; ".join(SLOWER["reasons"])


def test_the_record_filter_refuses_an_analysis_that_is_not_one():
    with pytest.raises(AnsibleFilterError, match="the analysis must be a dict or null, got list"):
        rollout_host_record([], batch=1, revision="r1", changed=True, args=ARGS)


def test_a_batch_that_passed_goes_on_and_a_soak_follows():
    records = {"gpu1": deployed(1), "gpu2": None, "gpu3": None}
    outcome = rollout_batch_outcome(records, ["gpu1"], 1)
    assert (outcome["failed"], outcome["deployed"], outcome["message"]) == ([], True, "")
    assert outcome["updated"] == ["gpu1"] and outcome["recorded"] == ["gpu1"]
    assert outcome["summary"] == {"canary": ["gpu1"], "batch_size": 1, "stopped_at": None, "undone": [],
                                  "hosts": {"gpu1": records["gpu1"], "gpu2": {"status": "not reached"},
                                            "gpu3": {"status": "not reached"}}}


def test_a_batch_whose_hosts_were_all_skipped_or_unchanged_has_no_soak():
    skipped = {"status": "skipped", "reasons": ["another GPU"], "batch": 2}
    outcome = rollout_batch_outcome({"gpu1": deployed(1), "gpu2": skipped}, ["gpu2"], 2)
    assert not outcome["deployed"] and outcome["failed"] == [] and outcome["updated"] == ["gpu1"]


def test_a_failed_host_stops_the_rollout_and_every_host_changed_so_far_is_put_back():
    """The failed host's batch-mate and the canary of batch 1 were changed (a revision each); the skipped host and a
    host that failed before its revision was recorded were not."""
    failed_early = {"status": "failed", "batch": 2, "revision": None, "reason": "Deploy the adopted server: no GPU"}
    records = {"gpu1": deployed(1, "r1"), "gpu2": deployed(2, "r2", SLOWER), "gpu3": failed_early,
               "gpu4": deployed(2, "r4"), "gpu5": {"status": "skipped", "reasons": ["x"], "batch": 2}, "gpu6": {}}
    outcome = rollout_batch_outcome(records, ["gpu2", "gpu3", "gpu4", "gpu5"], 2)
    assert outcome["failed"] == ["gpu2", "gpu3"]
    assert outcome["updated"] == ["gpu1", "gpu2", "gpu4"]
    assert outcome["summary"]["stopped_at"] == "gpu2" and outcome["summary"]["batch_size"] == 4
    assert outcome["message"].startswith(f"rollout stopped in batch 2 at gpu2, gpu3: analysis: {SLOWER['reasons'][0]}")


def test_after_the_undo_the_summary_and_the_message_say_what_it_did():
    records = {"gpu1": {**deployed(1, "r1"), "undone": "back on revision r1, serving"},
               "gpu2": {**deployed(2, "r2", SLOWER), "undone": "back on revision r2, serving"}, "gpu3": None}
    outcome = rollout_batch_outcome(records, ["gpu2"], 2)
    assert outcome["summary"]["undone"] == ["gpu1", "gpu2"] and outcome["summary"]["canary"] == ["gpu1"]
    assert outcome["recorded"] == ["gpu2", "gpu1"], "the batch's own records, then those undone in earlier batches"
    assert outcome["message"] == (
        f"rollout stopped in batch 2 at gpu2: analysis: {'; '.join(SLOWER['reasons'])}. Every host it updated is put "
        "back on the revision recorded before its change: gpu1 back on revision r1, serving; gpu2 back on revision "
        "r2, serving. Hosts after it were not touched")


@pytest.mark.parametrize("records", [[], {"gpu1": "deployed"}])
def test_the_outcome_filter_refuses_records_that_are_not_records(records):
    with pytest.raises(AnsibleFilterError, match="the input must map each host to its record or null"):
        rollout_batch_outcome(records, ["gpu1"], 1)
