"""The CLI with api.run replaced by a scripted run: progress events, then the result of the recorded demo run.

Lets the terminal tests watch the display as a user would (pseudo-terminal or redirected) without Ansible.
SCRIPTED_STATUS sets the run's status (default successful), SCRIPTED_PAUSE_S the time between events; the run
stops early, canceled, when the CLI sets its cancel event.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from llmops_sglang import api, cli
from llmops_sglang.collection import find_collection
from llmops_sglang.models import HostStats, ProgressEvent, RunResult, TaskFailure
from llmops_sglang.runs import read_summary

DEMO_RUN = Path(__file__).resolve().parents[2] / "fixtures" / "run-demo"
PLAY = "MoE tuning - tune the fused-MoE configs the server misses, install them, prove the effect"
TUNER_LINE = ("moe_tune [gpu1] up E=256,N=256,device_name=X.json: 2/4 batch sizes (just tuned [8]), "
              "elapsed 0:00:41, ETA 0:00:41")
EVENTS = [
    ProgressEvent("stage", stage=PLAY),
    ProgressEvent("task", stage=PLAY, task="Tune the up kernel"),
    ProgressEvent("progress", stage=PLAY, task="Tune the up kernel", host="gpu1", message=TUNER_LINE),
    ProgressEvent("task", stage=PLAY, task="Sweep it"),
    ProgressEvent("progress", stage=PLAY, task="Sweep it", host="gpu1", message="C=64: 13,360.2 tok/s aggregate"),
    ProgressEvent("ok", stage=PLAY, task="Say what was decided on tuned MoE configs", host="gpu1",
                  message="adopt: improved at C=1,4,32,64"),
]
PAUSE_S = float(os.environ.get("SCRIPTED_PAUSE_S", "0.4"))  # long enough for the live view to draw each state


def scripted_run(playbook_or_stage, inventory, extravars=None, run_id=None, on_event=None, **options) -> RunResult:
    cancel = options.get("cancel")
    for event in EVENTS:
        on_event(event)
        if cancel is not None and cancel.wait(PAUSE_S):
            break
    status = "canceled" if cancel is not None and cancel.is_set() else os.environ.get("SCRIPTED_STATUS", "successful")
    failure = TaskFailure("gpu1", PLAY, "Sweep it", "the sweep stopped early", ignored=False)
    failures = () if status == "successful" else (failure,)
    return RunResult(status=status, rc=0 if status == "successful" else 2,
                     playbook=api.playbook_for(playbook_or_stage, find_collection()),
                     hosts={"gpu1": HostStats(ok=150, changed=30)}, artifacts={}, run_id=run_id, run_dir=DEMO_RUN,
                     summary=read_summary(DEMO_RUN), failures=failures)


if __name__ == "__main__":
    api.run = scripted_run
    sys.exit(cli.main())
