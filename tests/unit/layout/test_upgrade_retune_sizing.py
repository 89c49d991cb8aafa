"""The canary's retune sizes its batch sizes as the MoE stage does (issue #37): playbooks/upgrade.yml's retune (the
upgrade role's retune.yml) gives the up kernel's moe_tune the serving server's startup facts (max_running_requests, chunked_prefill_size) and the deployment's
speculative_num_draft_tokens, so ``upgrade_retune_moe.batch_sizes: auto`` covers what the deployment reaches.

The options are the retune's own (what its up kernel's tuning task sees), templated by Ansible's VariableManager with a canary's facts as host vars, and
resolved by the module's own rule (module_utils/moe_batch_sizes)."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils.moe_batch_sizes import resolve_batch_sizes
from tests.unit.layout.test_upgrade_inputs import _inventory, _play_vars

UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
CANARY = {  # what the first play has registered on the canary by its retune
    "upgrade_serving_facts": {"facts": {"max_running_requests": 26, "chunked_prefill_size": 8192}},
    "upgrade_retune_plan": {"retune": True, "names": [UP], "down": False, "expected": {"up": UP, "down": None}},
}
UP_TUNING = "Tune the up kernel with the new release"


def test_auto_batch_sizes_come_from_the_serving_servers_capacity(tmp_path):
    inventory = _inventory(tmp_path, {"gpu1": None},
                           {"sglang_baseline_args": {"tp_size": 4, "speculative_num_draft_tokens": 4},
                            "upgrade_retune_moe": {"batch_sizes": "auto", "search_space": "pruned"}},
                           {"gpu1": CANARY})
    tuner = _play_vars(tmp_path, inventory, ["upgrade_up_tuner"], UP_TUNING)["Upgrade - install"]["gpu1"]["upgrade_up_tuner"]
    assert {key: tuner[key] for key in ("kernel", "expected_file_name", "batch_sizes", "max_running_requests",
                                        "chunked_prefill_size", "speculative_num_draft_tokens")} == {
        "kernel": "up", "expected_file_name": UP, "batch_sizes": "auto", "max_running_requests": 26,
        "chunked_prefill_size": 8192, "speculative_num_draft_tokens": 4}
    chosen = resolve_batch_sizes(tuner["batch_sizes"], tuner["max_running_requests"],
                                 tuner["speculative_num_draft_tokens"], tuner["chunked_prefill_size"])
    assert "26 running requests x 4 draft tokens" in chosen["reason"] and "chunked_prefill_size=8192" in chosen["reason"]
    assert chosen["batch_sizes"][0] == 1 and chosen["batch_sizes"][-1] == 8192  # decode steps up to prefill chunks
