# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: measurement_failure
short_description: Tell a candidate's failure from a measurement that could not be made
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - Turns the failed result of a measurement step into a failure record with C(fault) V(candidate) (the
    configuration did not start, or the server died or failed requests under the sweep - recorded and reverted) or
    V(measurement) (benchmark input, missing client, HTTP 401, server unreachable while healthy, facts not readable
    - the stage fails and is not marked done).
  - The server module's structured failure (kind, message, suggestion, log lines) and the whole message are kept.
options:
  _input:
    description: The failed task's result (C(ansible_failed_result)).
    type: dict
    required: true
  step:
    description: Which step failed.
    type: str
    choices: [deploy, facts, unit, sweep]
    required: true
  unit_status:
    description: C(status) of M(ansible.builtin.systemd_service) for the service after the failure.
    type: dict
  health_status:
    description: HTTP status of the server's C(/health) after the failure (-1 or 0 when nothing answered).
    type: raw
  deployed_invocation:
    description: systemd invocation id of the start that was measured.
    type: str
"""

EXAMPLES = r"""
---
- name: Keep the failure
  ansible.builtin.set_fact:
    failure: >-
      {{ ansible_failed_result | llmops.sglang.measurement_failure(step='sweep', unit_status=unit.status,
         health_status=health.status, deployed_invocation=deploy.invocation_id) }}
"""

RETURN = r"""
_value:
  description: The failure record.
  type: dict
  contains:
    fault:
      description: V(candidate) or V(measurement).
      type: str
    step:
      description: The step that failed.
      type: str
    kind:
      description:
        - What failed - the server module's failure kind (C(oom), C(cuda_error), ...) for a deploy, the bench
          module's C(error_kind) for a sweep, C(died_under_sweep) when the server died.
      type: str
    message:
      description: The whole message.
      type: str
    summary:
      description: Its first line (the reason in the decision).
      type: str
    suggestion:
      description: What to do, or null.
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.measurement import classify


def measurement_failure(result: dict, step: str, unit_status: dict | None = None, health_status=None,
                        deployed_invocation: str | None = None) -> dict:
    if step not in ("deploy", "facts", "unit", "sweep"):
        raise AnsibleFilterError(f"measurement_failure: step must be deploy, facts, unit or sweep, got {step!r}")
    try:
        return classify(step, dict(result or {}), unit_status=unit_status, health_status=health_status,
                        deployed_invocation=deployed_invocation or None)
    except (TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError(f"measurement_failure: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"measurement_failure": measurement_failure}
