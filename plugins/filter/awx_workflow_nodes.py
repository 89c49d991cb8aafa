# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: awx_workflow_nodes
short_description: The awx.awx workflow_nodes of a simplified workflow definition
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - Turns the nodes of C(extensions/awx/workflow.yml) (C(identifier), C(job_template) or C(approval),
    C(success_nodes), C(failure_nodes), C(always_nodes) as identifier lists) into the C(workflow_nodes) argument of
    M(awx.awx.workflow_job_template).
  - Fails naming the problem when identifiers repeat, a link names an unknown node, a node is neither a job
    template nor an approval, or the graph has a cycle.
options:
  _input:
    description: The simplified nodes.
    type: list
    elements: dict
    required: true
  organization:
    description: Organization of the job templates.
    type: str
    required: true
"""

EXAMPLES = r"""
---
- name: Define the workflow
  awx.awx.workflow_job_template:
    name: "{{ llmops_awx_workflow.name }}"
    organization: Default
    workflow_nodes: "{{ llmops_awx_workflow.nodes | llmops.sglang.awx_workflow_nodes(organization='Default') }}"
"""

RETURN = r"""
_value:
  description: Nodes with C(identifier), C(unified_job_template) and C(related) links.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.plugin_utils.awx_workflow import awx_workflow_nodes as _convert
from ansible_collections.llmops.sglang.plugins.plugin_utils.awx_workflow import workflow_errors


def awx_workflow_nodes(nodes: list, organization: str) -> list:
    errors = workflow_errors(nodes)
    if errors:
        raise AnsibleFilterError("awx_workflow_nodes: " + "; ".join(errors))
    return _convert(nodes, organization)


class FilterModule:
    def filters(self) -> dict:
        return {"awx_workflow_nodes": awx_workflow_nodes}
