# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The flags stage's plan of one candidate (docs/run-directory.md, "Ineffective candidates"): what the preflight of
this run found about its flags, whether it is measured, and the records that say so in its trial folder. Pure but for
reading the preflight's records: the action ``flag_plan`` writes what these return; the filter ``flag_trial_plan``
is :func:`candidate_plan`."""
from __future__ import annotations

import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.flag_rules import trial_plan
from ansible_collections.llmops.sglang.plugins.module_utils.run_inputs import as_bool
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import read_record, record_name, skipped_trial


def preflight_findings(run_dir: str | Path, host: str) -> tuple[dict, str | None]:
    """What the preflight of this run found on ``host``: its findings by candidate name and the SGLang release it saw
    (whose names of renamed flags the findings use); none when the preflight did not run."""
    findings = read_record(run_dir, "preflight", host, record="flag_findings") or {}
    environment = read_record(run_dir, "preflight", host, record="environment") or {}
    return findings, (environment.get("versions") or {}).get("sglang")


def candidate_plan(candidate: t.Any, findings: dict | None, skip_ineffective: t.Any = True,
                   sglang_version: str | None = None) -> dict[str, t.Any]:
    """Whether ``candidate`` is measured, from the preflight's ``findings`` about its flags (module_utils.flag_rules
    ``trial_plan``); a skipped one comes with the ``records`` of its skip. ValueError naming a bad input."""
    if not isinstance(candidate, dict) or "name" not in candidate:
        raise ValueError(f"the input must be a candidate {{name, args}}, got {candidate!r}")
    force = as_bool(f"{candidate['name']}.force", candidate.get("force", False))
    skip = as_bool("skip_ineffective", skip_ineffective)
    plan = trial_plan({**candidate, "force": force}, (findings or {}).get(candidate["name"], []), skip, sglang_version)
    return {**plan, "records": skipped_trial(plan["decision"])} if plan["skip"] else plan


def trial_records(plan: dict) -> dict[str, t.Any]:
    """The records of the plan in the candidate's trial folder: a skip's (its decision; no records of an earlier
    measurement), or for a measured candidate what the preflight found about it (none: no findings.json)."""
    return plan["records"] if plan["skip"] else {record_name("findings"): plan if plan["findings"] else None}
