# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations


class ModuleDocFragment:
    # Read-only fact modules: they never change the host.
    FACTS = r"""
attributes:
  check_mode:
    description: Only reads; runs the same in check mode.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
  idempotent:
    description: Never changes the host.
    support: full
"""

    # Controller-side actions (run directory bookkeeping): nothing reaches the managed host.
    CONTROLLER = r"""
attributes:
  action:
    description: Runs on the controller.
    support: full
  diff_mode:
    description: No diff.
    support: none
"""
