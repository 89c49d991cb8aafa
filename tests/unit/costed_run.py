# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The demo run directory (tests/fixtures/run-demo) with the records GPU-minute accounting adds, as finish.yml writes
them: a deploy.json per measurement, cost.json per measurement, stage.json's cost."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.stages import DEFAULT, RECORDED
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_cost import account_stage
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import serialize, write_files

DEMO_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "run-demo"
STAGES = tuple(stage for stage in RECORDED if stage in DEFAULT)  # the demo run has no search
SCALES = {"serving": 0.1, "tuning": 0.001}
# Seconds each stage of the demo run took (it predates started_at).
STAGE_WALL_S = {"preflight": 20.0, "baseline": 60.0, "flags": 110.0, "moe_tune": 150.0, "verify": 50.0}


def demo_run(directory: Path, ready_seconds: float = 14.0) -> Path:
    """A copy of the demo run in which each measurement restarted the server in ``ready_seconds``."""
    run = Path(shutil.copytree(DEMO_RUN, directory))
    for args in run.glob("**/requested_args.json"):
        (args.parent / "deploy.json").write_text(json.dumps({"restarted": True, "ready_seconds": ready_seconds}))
    return run


def finish_stages(run: Path, time_scale: dict | None = SCALES, host: str = "gpu1") -> dict:
    """What finish.yml does at the end of each stage, in pipeline order; returns the stages' costs."""
    costs = {}
    for stage in STAGES:
        stage_dir = run / stage / host
        cost, records = account_stage(stage_dir, STAGE_WALL_S[stage], time_scale)
        for directory, record in records.items():
            write_files(directory, {"cost.json": serialize(record)})
        record = json.loads((stage_dir / "stage.json").read_text())
        (stage_dir / "stage.json").write_text(json.dumps({**record, "cost": cost}))
        costs[stage] = cost
    return costs
