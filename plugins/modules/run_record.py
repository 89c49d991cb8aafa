#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_record
short_description: Internal - write evidence files into the tuning run directory on the controller
version_added: 1.0.0
description:
  - Internal to the collection's stage playbooks (role C(llmops.sglang.tuning_run)), not an interface for
    playbooks of your own; its options may change in any release.
  - Writes files (requested args, units, startup logs, facts, sweeps, comparisons, decisions) into a directory of
    the run directory on the controller (see docs/run-directory.md). Mappings and lists are written as JSON
    (indented, keys sorted), strings as they are.
  - Each file is written atomically (temporary file in the same directory, then renamed), so a crashed run never
    leaves a half-written record that a resumed run would trust.
  - Runs entirely on the controller (action plugin); nothing is sent to the managed host.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  action:
    description: Runs on the controller.
    support: full
  check_mode:
    description: Reports which files would change and writes nothing.
    support: full
  diff_mode:
    description: Lists the files that would change.
    support: none
  idempotent:
    description: Files whose content is unchanged are not rewritten and do not count as a change.
    support: full
options:
  dir:
    description: Directory on the controller, created if missing.
    type: path
    required: true
  files:
    description:
      - File name (relative to O(dir), no C(..)) to content. Mappings and lists become JSON.
      - V(null) content means there is no such record (e.g. the sweep of a candidate that failed to start). Nothing is
        written for that name, and a file of that name left by an earlier attempt (a C(failure.txt) of a start that
        failed before the same measurement succeeded) is removed.
    type: dict
    required: true
"""

EXAMPLES = r"""
---
- name: Record the baseline evidence
  llmops.sglang.run_record:
    dir: "{{ llmops_run_dir }}/baseline/{{ inventory_hostname }}"
    files:
      requested_args.json: "{{ sglang_baseline_args }}"
      startup_log.txt: "{{ deploy.startup_log }}"
      facts.json: "{{ facts.facts }}"
"""

RETURN = r"""
paths:
  description: Paths of the files of O(files) with content.
  returned: always
  type: list
  elements: str
written:
  description: Files whose content changed (written unless in check mode).
  returned: always
  type: list
  elements: str
removed:
  description: Files of O(files) with V(null) content that existed and were removed (unless in check mode).
  returned: always
  type: list
  elements: str
"""
