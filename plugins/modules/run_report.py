#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_report
short_description: Internal - write summary.json, report.md and report.html of a tuning run
version_added: 1.0.0
description:
  - Internal to the collection's stage playbooks (role C(llmops.sglang.tuning_run)), not an interface for
    playbooks of your own; its options may change in any release.
  - Builds the report of a tuning run only from its run directory (docs/run-directory.md), so it can be
    regenerated at any time and shows exactly the recorded evidence.
  - C(summary.json) holds per host the status of every stage, every decision with its reasons, the adopted
    configuration and the key numbers (baseline and final throughput per concurrency, max_running_requests).
  - C(report.md) has the outcome table, decisions, throughput tables, side effects the server caused, the MoE
    kernel table and the adopted args; C(report.html) is the same text with the plots (throughput, per-request
    throughput, TTFT p50/p99 against concurrency) inlined as SVG, so it works offline; the plots are also
    written to C(plots/<host>.svg).
  - Output is deterministic; an unchanged run directory gives changed=false.
  - Runs on the controller (action plugin) and needs C(matplotlib) and C(markdown) there.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  action:
    description: Runs on the controller.
    support: full
  check_mode:
    description: Computes the report and reports whether files would change; writes nothing.
    support: full
  diff_mode:
    description: No diff.
    support: none
  idempotent:
    description: Identical run directories give identical reports.
    support: full
options:
  run_dir:
    description: The run directory (C(runs/<run_id>)).
    type: path
    required: true
requirements:
  - matplotlib (controller)
  - markdown (controller)
"""

EXAMPLES = r"""
---
- name: Write the report
  llmops.sglang.run_report:
    run_dir: runs/20261130T120000Z
  register: report

- name: Print the summary
  ansible.builtin.debug:
    msg: "{{ report.lines + ['report: ' ~ report.report_html] }}"
"""

RETURN = r"""
summary:
  description: The content of C(summary.json).
  returned: success
  type: dict
lines:
  description: A few lines for the console (key change per host and every decision).
  returned: success
  type: list
  elements: str
report_md:
  description: Path of C(report.md).
  returned: success
  type: str
report_html:
  description: Path of C(report.html).
  returned: success
  type: str
summary_json:
  description: Path of C(summary.json).
  returned: success
  type: str
written:
  description: Files that changed.
  returned: success
  type: list
  elements: str
"""
