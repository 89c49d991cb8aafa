# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: upgrade_prediction_markdown
author: llmops.sglang contributors (@llmops)
version_added: 2.2.0
short_description: An upgrade prediction's C(prediction.md), with the prediction made before the carry and the retune
description:
  - The summary lines of M(llmops.sglang.sglang_upgrade_check)'s result as Markdown, one bullet each.
  - With O(before), the prediction made before the carry and the retune comes first (what the new release would have
    loaded on its own, the configs it would miss), then what it starts with.
options:
  _input:
    description: The prediction the new release starts with (M(llmops.sglang.sglang_upgrade_check)'s result).
    type: dict
    required: true
  host:
    description: The host, in the title.
    type: str
    required: true
  before:
    description: The prediction made before the carry and the retune; omitted or null where they changed nothing.
    type: dict
"""

EXAMPLES = r"""
- name: Record the prediction
  llmops.sglang.run_record:
    dir: /var/lib/llmops-sglang/runs/20261207T1200Z/upgrade/gpu1
    files:
      prediction.md: "{{ prediction | llmops.sglang.upgrade_prediction_markdown(host=inventory_hostname, before=first) }}"
"""

RETURN = r"""
_value:
  description: The Markdown text, ending in a newline.
  type: str
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.upgrade_verdict import prediction_markdown


def upgrade_prediction_markdown(prediction: Any, host: str, before: Any = None) -> str:
    for name, value in (("_input", prediction), ("before", before or {})):
        if not isinstance(value, Mapping):
            raise AnsibleFilterError(f"upgrade_prediction_markdown: {name} must be a dict, got {type(value).__name__}")
    return prediction_markdown(dict(prediction), host, dict(before) if before else None)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"upgrade_prediction_markdown": upgrade_prediction_markdown}
