# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The stage registry: every stage of a tuning run, in run order, declared once.

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

Everything else takes the stages from here: the run-input checks (run_inputs), the report (plugin_utils/run_report),
the tuning_run role (through the filters llmops.sglang.stage and llmops.sglang.stage_names), the Python API and CLI
(src/llmops_sglang, which imports this file from the collection it finds). What cannot import Python - the
import_playbook list of playbooks/tune.yml, the tuning_run role's argument_specs and defaults, the AWX job templates,
workflow and surveys, the docs' stage lists - is written from this list by scripts/stage_files.py (make stage-files),
and tests/unit/layout/test_stage_registry.py fails naming each file that is stale or says something else.

A new stage is a playbook ``playbooks/<name>.yml``, its logic in Python (module_utils, plugin_utils or an action) and
one entry here; then make stage-files. docs/design.md, "(c) A new stage".
"""
from __future__ import annotations

import typing as t
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Stage:
    name: str
    # The name of its import_playbook in playbooks/tune.yml (play names then read "<title> - <what it does>").
    title: str
    # One of the routine's stages: playbooks/tune.yml imports it, `-e stages` selects it, the API/CLI run it by name.
    # Rollout is not: it is run on its own, after a run, with that run's id.
    routine: bool
    # Ends with <run>/<stage>/<host>/stage.json holding its GPU-minutes (roles/tuning_run/tasks/finish.yml): a
    # resumed run skips it unless forced (so it is forceable), and the report shows it.
    records: bool
    # Records adopted.json, the configuration the stages after it start from (and the report and rollout read).
    adopts: bool
    # Compares against the configuration an earlier stage adopted; without one it fails before deploying anything.
    reads_adopted: bool
    # Deploys or stops the server between the tuning_run role's stage.yml and finish.yml, so the host's guard
    # (llmops.sglang.server_guard) is armed for it.
    guarded: bool
    # Stops the servers for its whole length (the MoE tuner owns the GPUs); an AWX workflow asks a person first.
    stops_servers: bool
    # In a run's default stages (tuning_run_stages without -e stages). A routine stage that is not runs only when
    # selected: -e stages=...,<name>, or its inputs (tuning_run_<name>) set while -e stages is not given.
    selected_by_default: bool = True
    # Where below <run>/<stage>/<host>/ it keeps one folder per measured candidate (the report lists them, the filter
    # llmops.sglang.run_path finds one by name); None: its host folder holds its one measurement, if any.
    measurements: str | None = None
    # A node of the AWX workflow, a tuning run's approved path (extensions/awx/workflow.yml); every stage has a job
    # template and a survey. The upgrade is not: it is a job of its own, between runs.
    workflow: bool = True

    @property
    def playbook(self) -> str:
        """Its playbook, relative to the collection root."""
        return f"playbooks/{self.name}.yml"

    @property
    def forceable(self) -> bool:
        """Only a stage that records its end is skipped on resume, so only such a stage can be forced to run again."""
        return self.records

    @property
    def awx_job_template(self) -> str:
        return f"llmops-sglang {self.name}"

    @property
    def awx_survey(self) -> str:
        """Relative to extensions/awx/."""
        return f"surveys/{self.name}.json"


STAGES: tuple[Stage, ...] = (
    Stage("preflight", "Preflight", routine=True, records=True, adopts=False, reads_adopted=False, guarded=False,
          stops_servers=False),
    Stage("baseline", "Baseline", routine=True, records=True, adopts=True, reads_adopted=False, guarded=True,
          stops_servers=False),
    Stage("flags", "Flags", routine=True, records=True, adopts=True, reads_adopted=True, guarded=True,
          stops_servers=False, measurements="trials"),
    Stage("search", "Search", routine=True, records=True, adopts=True, reads_adopted=True, guarded=True,
          stops_servers=False, selected_by_default=False, measurements="verify"),
    Stage("moe_tune", "MoE tuning", routine=True, records=True, adopts=True, reads_adopted=True, guarded=True,
          stops_servers=True),
    Stage("verify", "Verify", routine=True, records=True, adopts=True, reads_adopted=True, guarded=True,
          stops_servers=False),
    Stage("rollout", "Rollout", routine=False, records=False, adopts=False, reads_adopted=True, guarded=False,
          stops_servers=False),
    Stage("report", "Report", routine=True, records=False, adopts=False, reads_adopted=False, guarded=False,
          stops_servers=False),
    # Not a tuning stage: it installs a new SGLang release and A/Bs it on a canary (its old and new release measured
    # under canary/), run on its own (playbooks/upgrade.yml, docs/upgrade.md).
    Stage("upgrade", "Upgrade", routine=False, records=False, adopts=False, reads_adopted=False, guarded=False,
          stops_servers=False, measurements="canary", workflow=False),
)


def names(stages: t.Iterable[Stage] = STAGES, **wanted: bool) -> tuple[str, ...]:
    """The names of the stages whose attributes have the wanted values, in run order: ``names(routine=True)``."""
    return tuple(stage.name for stage in stages if all(getattr(stage, key) == value for key, value in wanted.items()))


def get(name: str, stages: t.Iterable[Stage] = STAGES) -> Stage:
    """The stage called ``name``; ValueError naming the known ones otherwise."""
    stages = tuple(stages)
    for stage in stages:
        if stage.name == name:
            return stage
    raise ValueError(f"unknown stage {name!r}; stages are {', '.join(s.name for s in stages)}")


def adopted_from(name: str, stages: t.Iterable[Stage] = STAGES) -> tuple[str, ...]:
    """The stages whose adopted.json a stage starts from, the most recent first (the first one found wins): for a
    stage that adopts, the adopting stages before it; for any other (preflight re-run, rollout), all adopting stages,
    so it sees the run's latest adopted configuration."""
    stages = tuple(stages)
    stage = get(name, stages)
    before = stages[:stages.index(stage)] if stage.adopts else stages
    return tuple(reversed(names(before, adopts=True)))


def as_dict(stage: Stage, stages: t.Iterable[Stage] = STAGES) -> dict:
    """A stage as playbooks see it (filter llmops.sglang.stage): its fields, the derived ones, and adopted_from."""
    return {**asdict(stage), "playbook": stage.playbook, "forceable": stage.forceable,
            "awx_job_template": stage.awx_job_template, "awx_survey": stage.awx_survey,
            "adopted_from": list(adopted_from(stage.name, stages))}


# What names() and the filter llmops.sglang.stage_names select by.
PROPERTIES = tuple(field.name for field in fields(Stage) if field.type == "bool") + ("forceable",)
# The lists the consumers use, by what they mean.
ROUTINE = names(routine=True)       # tune.yml's order; -e stages; the API's and CLI's stage names
DEFAULT = names(routine=True, selected_by_default=True)  # the stages of a run without -e stages
OPT_IN = names(routine=True, selected_by_default=False)  # run when selected, or when their inputs are set
RECORDED = names(records=True)      # stages with <stage>/<host>/stage.json: the report's stages, GPU-minutes
FORCEABLE = names(forceable=True)   # -e force
