# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The adopted configuration of a tuning run: what a stage starts from, how a measurement becomes it, and the one
adoption policy every stage applies (docs/run-directory.md, "Adopted configuration").

An adopted configuration is the record ``<run>/<stage>/<host>/adopted.json``: the stage that adopted it, the server
args and environment, the tuned MoE config files it runs with, and where its evidence lies - ``sweep_file`` and
``facts_file``, paths relative to the run directory, the measurement every later candidate is compared with.
"""
from __future__ import annotations

import shutil
import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import restart_check
from ansible_collections.llmops.sglang.plugins.module_utils.decisions import decide_trial
from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.stages import adopted_from
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import compare_sweeps
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_unit import environment_errors, server_arg_errors
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_dir as layout
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import read_json, record_files

# Runs recorded before 2.0.0 named the evidence paths `sweep` and `facts`; a resumed old run reads them still.
_OLD_KEYS = {"sweep": "sweep_file", "facts": "facts_file"}
# The decision of a measurement that check mode did not make.
CHECK_DECISION = {"adopt": False, "action": "check", "reasons": ["check mode - not measured"],
                  "summary": "check mode: not measured, not decided"}


def normalized(record: dict) -> dict:
    """``record`` with the evidence paths under their current names."""
    return {_OLD_KEYS.get(key, key): value for key, value in record.items()}


def latest(run_dir: Path, host: str, stage: str) -> dict | None:
    """The configuration ``stage`` starts from on ``host``: the adopted.json of the most recent stage before it that
    recorded one (the stage registry's ``adopted_from``), with ``stage`` set to the stage that adopted it."""
    for earlier in adopted_from(stage):
        path = layout.path(run_dir, earlier, host, record="adopted")
        record = read_json(path)
        if record is not None:
            _check_unit_values(path, record)
            return {"stage": earlier, **normalized(record)}
    return None


def _check_unit_values(path: Path, record: dict) -> None:
    """The args and environment read back go into a unit (the next stage's, a rollout's): checked as the deploy's own
    inputs are, before a stage changes anything with them."""
    errors = (server_arg_errors("args", record.get("args") or {})
              + environment_errors("environment", record.get("environment") or {}))
    if errors:
        raise ValueError(f"{path}: the adopted configuration holds values that cannot go into a unit, so it is not "
                         f"used: " + "; ".join(errors))


def adopt(stage: str, run_dir: Path, measurement_dir: Path, *, args: dict, environment: dict,
          moe_configs: t.Sequence[str] = ()) -> dict:
    """The record of a measured configuration adopted by ``stage``: its evidence is the measurement's sweep.json and
    facts.json in ``measurement_dir`` (inside ``run_dir``)."""
    evidence = Path(measurement_dir).resolve().relative_to(Path(run_dir).resolve())
    return {"stage": stage, "args": dict(args), "environment": dict(environment), "moe_configs": list(moe_configs),
            "sweep_file": str(evidence / layout.record_name("sweep")),
            "facts_file": str(evidence / layout.record_name("facts"))}


def record(run_dir: Path, stage: str, host: str, adopted: dict | None, *, check_mode: bool = False) -> tuple[list, list]:
    """Record ``adopted`` as what ``stage`` adopted on ``host`` (the adopted.json that latest() reads); None removes
    the one an earlier attempt of the stage recorded. Returns the paths written and removed."""
    return record_files(layout.path(run_dir, stage, host), {layout.record_name("adopted"): adopted},
                        check_mode=check_mode)


def evidence_path(run_dir: Path, adopted: dict, name: str) -> Path:
    """The record ``name`` (a run_dir.RECORDS key) of the measurement an adopted configuration was adopted from: the
    folder its ``sweep_file`` lies in."""
    return Path(run_dir) / Path(normalized(adopted)["sweep_file"]).parent / layout.record_name(name)


def evidence(run_dir: Path, adopted: dict) -> tuple[dict, dict]:
    """The sweep and the facts the adopted configuration was measured with; ValueError naming a missing file."""
    adopted = normalized(adopted)
    documents = []
    for key in ("sweep_file", "facts_file"):
        path = Path(run_dir) / adopted[key]
        document = read_json(path)
        if document is None:
            raise ValueError(f"the adopted configuration's {key} {path} is missing; resume the run from the stage "
                             f"that adopted it ({adopted.get('stage')}) with -e force={adopted.get('stage')}")
        documents.append(document)
    return documents[0], documents[1]


def still_missing(facts: dict, moe_configs: t.Sequence[str]) -> list[str]:
    """The installed MoE config files the server still reports missing (it did not load them)."""
    missing = {Path(path).name for path in facts.get("missing_moe_configs") or ()}
    return [name for name in moe_configs if name in missing]


def check_dir(measurement_dir: Path, restarted: dict | None, *, check_mode: bool = False) -> tuple[Path, list[Path]]:
    """Where the restart check of a measurement records its own measurement, and what was removed from there: the
    first decision on a measurement (``restarted`` None) removes the check an earlier attempt of it left, so the
    directory never mixes two attempts; the decision after the check keeps it."""
    directory = Path(measurement_dir) / restart_check.DIRECTORY
    if restarted is not None or not directory.is_dir():
        return directory, []
    if not check_mode:
        shutil.rmtree(directory)
    return directory, [directory]


def verdict(run_dir: Path, measured: dict, adopted: dict, *, compare: dict | None = None,
            policy: dict | None = None, moe_configs: t.Sequence[str] = (), restart: dict | None = None,
            restarted: dict | None = None) -> dict:
    """Compare a measurement with the adopted configuration's and apply the decision policy: ``comparison``,
    ``side_effects`` (what the server set differently), ``decision``, ``failure`` (the measurement's own, or a
    tuned MoE config the server did not load) and ``restart_check`` (None unless an adoption was planned for it).
    ``measured`` is what measure.yml keeps: ``failure``, ``facts``, ``sweep``, ``requested_args``.

    ``restart`` holds the restart check's options (None: no check): an adoption it finds in need of one is pending
    (``decision.action`` ``restart_check``, not adopted) until the check's measurement on a fresh start of the
    candidate, ``restarted`` (the same keys as ``measured``), decides it."""
    failure = measured.get("failure")
    missing = [] if failure else still_missing(measured.get("facts") or {}, moe_configs)
    if missing:
        failure = f"the server still reports missing MoE configs after the install: {', '.join(missing)}"
    comparison = side_effects = checked = None
    if not failure:
        reference_sweep, reference_facts = evidence(run_dir, adopted)
        comparison = compare_sweeps(reference_sweep, measured["sweep"], **(compare or {}))
        side_effects = diff_server_facts(reference_facts, measured["facts"], adopted.get("args"),
                                         measured.get("requested_args"))
    decision = decide_trial(comparison, side_effects, policy, failure)
    if decision["adopt"] and restart is not None:
        checked = restart_check.plan(reference_sweep, measured["sweep"], comparison, restart)
        if checked["needed"] and restarted is None:
            decision = restart_check.pending_decision(decision, checked)
        elif checked["needed"]:
            if not restarted.get("failure"):
                checked = restart_check.judge(reference_sweep, restarted["sweep"], checked,
                                              comparison["parameters"]["metric"])
            decision = restart_check.checked_decision(decision, checked, restarted.get("failure"))
    return {"comparison": comparison, "side_effects": side_effects, "decision": decision, "failure": failure,
            "restart_check": checked}
