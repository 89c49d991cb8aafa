# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: compare_sweeps
short_description: Noise-aware comparison of two benchmark sweeps
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - Compares a candidate sweep with a baseline sweep (both as returned by the P(llmops.sglang.bench#module) module in
    RV(sweep)), level by level, matched by concurrency.
  - With at least three runs per side a level is V(improved) or V(regressed) only when the difference is significant
    (two-sided Mann-Whitney U p < O(alpha), or a bootstrap confidence interval of the median ratio that excludes 1)
    AND at least max(O(min_effect_pct), 2 x pooled coefficient of variation); otherwise it is V(within_noise).
    Fewer than five runs per side are flagged C(low_confidence).
  - With fewer than three runs on a side no test is possible; then only the noise band (plus or minus
    O(noise_band_pct)) decides and the level is flagged C(low_confidence).
  - The overall verdict is V(improved) (some level improved, none regressed), V(regressed) (the reverse), V(mixed) or
    V(no significant change).
  - Needs C(scipy) on the controller for levels with three or more runs per side.
options:
  _input:
    description: The baseline sweep (a dict with a C(levels) list).
    type: dict
    required: true
  candidate:
    description: The candidate sweep to compare with the baseline.
    type: dict
    required: true
  metric:
    description: Run metric the verdict is based on (higher is better).
    type: str
    choices: [agg_tok_s, per_req_tok_s, steady_agg_tok_s]
    default: agg_tok_s
  min_effect_pct:
    description: Smallest change in percent that can count as a real effect.
    type: float
    default: 2.0
  noise_band_pct:
    description: Plus/minus band in percent treated as noise when a side has fewer than three runs.
    type: float
    default: 5.0
  alpha:
    description: Significance level of the rank test and of the two-sided bootstrap interval.
    type: float
    default: 0.05
  n_boot:
    description: Bootstrap resamples.
    type: int
    default: 2000
  seed:
    description: Seed of the bootstrap, so the same inputs always give the same result.
    type: int
    default: 0
seealso:
  - plugin: llmops.sglang.sweep_table
    plugin_type: filter
"""

EXAMPLES = r"""
---
- name: Decide whether the flag set helped
  ansible.builtin.set_fact:
    comparison: "{{ baseline.sweep | llmops.sglang.compare_sweeps(candidate.sweep, min_effect_pct=3) }}"

- name: Show the comparison table
  ansible.builtin.debug:
    msg: "{{ comparison.verdict }}\n{{ comparison.table }}"
  # no significant change
  # | Concurrency | Baseline (tok/s) | Candidate (tok/s) | Change | Verdict |
  # |---:|---:|---:|---:|---|
  # | 1 | 121.6 | 121.9 | +0.2% | within_noise (low confidence) |
"""

RETURN = r"""
_value:
  description: The comparison.
  type: dict
  contains:
    verdict:
      description: V(improved), V(regressed), V(mixed) or V(no significant change).
      type: str
    improved:
      description: Concurrency levels that improved.
      type: list
      elements: int
    regressed:
      description: Concurrency levels that regressed.
      type: list
      elements: int
    low_confidence:
      description: Whether any compared level had too few runs for a confident verdict.
      type: bool
    levels:
      description:
        - One dict per compared level with C(concurrency), C(baseline_median), C(candidate_median), C(change_pct),
          C(baseline_per_req_median), C(candidate_per_req_median), C(per_req_change_pct), C(n_baseline),
          C(n_candidate), C(cv_baseline_pct), C(cv_candidate_pct), C(p_value), C(ci_low_pct), C(ci_high_pct),
          C(threshold_pct), C(significant), C(method), C(verdict), C(low_confidence) and C(evidence) (a sentence).
        - C(change_pct) is the change of the medians, except for a candidate measured with the stopping rule, where it
          is the rule's estimate (mean of the log ratio, the number it held against C(threshold_pct)), and the
          medians' change is C(median_change_pct).
      type: list
      elements: dict
    skipped:
      description: Levels that could not be compared, with C(concurrency) and C(reason).
      type: list
      elements: dict
    parameters:
      description: The options used.
      type: dict
    table:
      description:
        - Markdown pipe table with the columns Concurrency, Baseline (tok/s), Candidate (tok/s), Change, Verdict.
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import compare_sweeps as _compare_sweeps


def compare_sweeps(baseline: dict, candidate: dict, metric: str = "agg_tok_s", min_effect_pct: float = 2.0,
                   noise_band_pct: float = 5.0, alpha: float = 0.05, n_boot: int = 2000, seed: int = 0) -> dict:
    try:
        return _compare_sweeps(baseline, candidate, metric=metric, min_effect_pct=min_effect_pct,
                               noise_band_pct=noise_band_pct, alpha=alpha, n_boot=n_boot, seed=seed)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise AnsibleFilterError(f"compare_sweeps: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"compare_sweeps": compare_sweeps}
