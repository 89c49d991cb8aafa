# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: service_name
short_description: The systemd service name of the SGLang server
version_added: 2.1.0
author: llmops.sglang contributors (@llmops)
description:
  - The one name of the SGLang server's systemd service (without C(.service)) for the host the task runs for - the
    inventory variable C(sglang_service_name), else V(sglang). The deploy (role C(llmops.sglang.sglang_server)), the
    preflight, the host's guard (M(llmops.sglang.server_guard)) and the rollout all take it from here, so they act on
    the same unit.
  - The names earlier releases read, C(sglang_server_name) (role C(sglang_server)) and C(sglang_preflight_service_name)
    (role C(sglang_preflight)), are still read, with a deprecation warning naming C(sglang_service_name), until 3.0.0.
  - Fails, naming both variables, when two of these names are set to different services.
  - Takes no terms. Whether the name is a service name is checked by the run's input check
    (M(llmops.sglang.run_inputs)) and by M(llmops.sglang.server).
"""

EXAMPLES = r"""
- name: Guard the service while the stage changes it
  llmops.sglang.server_guard:
    name: "{{ lookup('llmops.sglang.service_name') }}"

- name: Read the deployed unit
  ansible.builtin.slurp:
    src: "/etc/systemd/system/{{ lookup('llmops.sglang.service_name') }}.service"
"""

RETURN = r"""
_raw:
  description: The service name, one element.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.utils.display import Display

from ansible_collections.llmops.sglang.plugins.plugin_utils import service_name

display = Display()


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError(f"llmops.sglang.service_name takes no terms (it reads {service_name.NAME}), "
                                     f"got {terms!r}")
        variables = variables or {}
        given = {name: self._templar.template(variables[name])
                 for name in (service_name.NAME, *service_name.OLD_NAMES) if name in variables}
        try:
            resolved = service_name.resolve(given)
        except service_name.ServiceNameConflict as exc:
            raise AnsibleLookupError(str(exc)) from exc
        for old_name in resolved.old_names:
            # A real deprecation (ansible-playbook, AWX and ansible-runner show it as one), like llmops_run_id's; the
            # version is service_name.REMOVED_IN, written out for ansible-test's check of deprecation calls.
            display.deprecated(service_name.deprecation(old_name), version="3.0.0", collection_name="llmops.sglang")
        return [resolved.value]
