# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: sweep_table
short_description: Markdown table of a benchmark sweep
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - Renders a sweep (as returned by the P(llmops.sglang.bench#module) module in RV(sweep)) as a Markdown pipe table
    with the columns C, Agg tok/s, Per-req tok/s, Tokens, Wall(s) and Ok.
  - Numbers are medians over the repeats of a level; C(Ok) is successful/attempted requests summed over the repeats.
options:
  _input:
    description: The sweep (a dict with a C(levels) list).
    type: dict
    required: true
seealso:
  - plugin: llmops.sglang.compare_sweeps
    plugin_type: filter
"""

EXAMPLES = r"""
---
- name: Print the baseline sweep
  ansible.builtin.debug:
    msg: "{{ baseline.sweep | llmops.sglang.sweep_table }}"
  # | C | Agg tok/s | Per-req tok/s | Tokens | Wall(s) | Ok |
  # |---:|---:|---:|---:|---:|---:|
  # | 1 | 121.6 | 121.7 | 4000 | 32.89 | 12/12 |
  # | 64 | 1582.5 | 24.9 | 128000 | 80.88 | 384/384 |
"""

RETURN = r"""
_value:
  description: The Markdown table, a header line, a separator line and one line per level.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import sweep_table as _sweep_table


def sweep_table(sweep: dict) -> str:
    try:
        return _sweep_table(sweep)
    except (ValueError, TypeError) as exc:
        raise AnsibleFilterError(f"sweep_table: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"sweep_table": sweep_table}
