#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_lock
short_description: Internal - hold a tuning run directory for this ansible-playbook until it exits
version_added: 2.1.0
description:
  - Internal to the collection's stage playbooks (role C(llmops.sglang.tuning_run)), not an interface for
    playbooks of your own; its options may change in any release.
  - Takes the flock of C(<runs_root>/<run_id>/.lock) for the C(ansible-playbook) process that runs the task, until that
    process exits (a holder process keeps it; Ctrl-C and a crash release it too). Another C(ansible-playbook) with the
    same run id fails here, naming the process that holds the run, before any stage-done check or deploy; a later
    stage of the same C(ansible-playbook) finds the lock its own.
  - The run directory must resolve right under the runs root (a run id with a path in it, or a link leaving the root,
    is refused).
  - Runs entirely on the controller (action plugin); nothing is sent to the managed host.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  action:
    description: Runs on the controller.
    support: full
  check_mode:
    description: Fails as well when another run holds the directory; takes no lock.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
options:
  runs_root:
    description: Where runs live (C(tuning_run_root)).
    type: path
    required: true
  run_id:
    description: The run id, the directory under O(runs_root).
    type: str
    required: true
"""

EXAMPLES = r"""
---
- name: Hold the run directory for this ansible-playbook
  llmops.sglang.run_lock:
    runs_root: "{{ tuning_run_root }}"
    run_id: "{{ tuning_run_dir | basename }}"
  run_once: true
"""

RETURN = r"""
lock:
  description: V(acquired), V(held) (this ansible-playbook held it already) or V(free) (check mode, or no directory).
  returned: always
  type: str
  sample: acquired
run_dir:
  description: The run directory, resolved.
  returned: always
  type: str
"""
