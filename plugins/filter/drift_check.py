# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: drift_check
short_description: Has a configuration measured twice in one tuning run moved?
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - Compares a fresh start of a configuration (O(again)) with the same configuration's earlier measurement
    (O(_input)) by the test every verdict of the run uses (P(llmops.sglang.compare_sweeps#filter)).
  - The verify stage applies it to the adopted configuration; its own stage measured it earlier in the run and verify
    measures it again at the end, so the drift over the run is measured without an extra restart.
  - The result says whether it drifted (some level moved significantly and beyond the effect threshold) and by how
    much per level; the report lists the run's verdicts a drift of that size could have flipped.
options:
  _input:
    description: The configuration's earlier sweep (a dict with a C(levels) list, as the P(llmops.sglang.bench#module) module returns it).
    type: dict
    required: true
  again:
    description: The sweep of the same configuration's fresh start.
    type: dict
    required: true
  label:
    description: Where the earlier sweep was measured (a stage or trial name), for the summary.
    type: str
    required: true
  same_start:
    description:
      - Whether both sweeps were measured in one server start (verify found the configuration running and did not
        restart it); then the check sees what moved over time, not the spread between starts.
    type: bool
    required: true
  metric:
    description: Run metric compared (higher is better).
    type: str
    choices: [agg_tok_s, per_req_tok_s, steady_agg_tok_s]
    default: agg_tok_s
  min_effect_pct:
    description: Smallest change in percent that counts as a real effect.
    type: float
    default: 2.0
  noise_band_pct:
    description: Plus/minus band in percent treated as noise when a side has fewer than three runs.
    type: float
    default: 5.0
  alpha:
    description: Significance level of the comparison.
    type: float
    default: 0.05
  n_boot:
    description: Bootstrap resamples.
    type: int
    default: 2000
  seed:
    description: Seed of the bootstrap.
    type: int
    default: 0
seealso:
  - plugin: llmops.sglang.compare_sweeps
    plugin_type: filter
"""

EXAMPLES = r"""
---
- name: Check the adopted configuration for drift
  ansible.builtin.set_fact:
    drift: "{{ adopted_sweep | llmops.sglang.drift_check(verify_sweep, label='moe_tune', same_start=true) }}"

- name: Say it
  ansible.builtin.debug:
    msg: "{{ drift.summary }}"
  # no drift beyond noise between moe_tune (same server start) and verify (largest difference 0.8% at C=16)
"""

RETURN = r"""
_value:
  description: The drift check.
  type: dict
  contains:
    drifted:
      description: Whether some level moved significantly and beyond the effect threshold.
      type: bool
    earlier:
      description: The O(label) of the earlier measurement.
      type: str
    same_start:
      description: The O(same_start) given.
      type: bool
    moved:
      description: Concurrency levels that moved.
      type: list
      elements: int
    drift_pct:
      description: Absolute change in percent per concurrency level (keys are strings).
      type: dict
    largest_pct:
      description: The largest absolute change in percent.
      type: float
    largest_concurrency:
      description: The level of the largest change.
      type: int
    summary:
      description: One line for the operator.
      type: str
    comparison:
      description: The full comparison (as P(llmops.sglang.compare_sweeps#filter) returns it).
      type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.drift import drift_check as _drift_check


def drift_check(earlier: dict, again: dict, label: str, same_start: bool, metric: str = "agg_tok_s", min_effect_pct: float = 2.0,
                noise_band_pct: float = 5.0, alpha: float = 0.05, n_boot: int = 2000, seed: int = 0) -> dict:
    try:
        return _drift_check(earlier, again, label=label, same_start=same_start, metric=metric, min_effect_pct=min_effect_pct,
                            noise_band_pct=noise_band_pct, alpha=alpha, n_boot=n_boot, seed=seed)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise AnsibleFilterError(f"drift_check: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"drift_check": drift_check}
