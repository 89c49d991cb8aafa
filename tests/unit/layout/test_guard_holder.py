# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Every play of a guarded stage names the holder of the host's guard (issue 36 item 8): only modules whose environment
has LLMOPS_GUARD_HOLDER equal to the guard's armed_by renew its lease, so a guarded stage without it would let its
own guard fire mid-stage, and the holder must be the stage's own (run id/stage), as stage.yml arms it."""
from __future__ import annotations

import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import stages
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import HOLDER_ENV

from tests.unit.layout.test_inventory_layout import REPO_ROOT

HOLDER = "{{ tuning_run_dir | default('', true) | basename }}/{{ tuning_run_stage }}"


def test_every_play_of_a_guarded_stage_sets_the_stages_guard_holder():
    guarded = [stage for stage in stages.STAGES if stage.guarded]
    assert {stage.name for stage in guarded} >= {"baseline", "flags", "moe_tune", "verify"}
    for stage in guarded:
        plays = yaml.safe_load((REPO_ROOT / stage.playbook).read_text(encoding="utf-8"))
        for play in plays:
            assert (play.get("environment") or {}).get(HOLDER_ENV) == HOLDER, (stage.playbook, play["name"])
            assert play["vars"]["tuning_run_stage"] == stage.name, (stage.playbook, play["name"])
    arming = yaml.safe_load((REPO_ROOT / "roles" / "tuning_run" / "tasks" / "stage.yml").read_text(encoding="utf-8"))
    guard = next(task for task in arming if "llmops.sglang.server_guard" in task)
    assert "armed_by" not in guard["llmops.sglang.server_guard"], "the holder is the play's, one definition"
