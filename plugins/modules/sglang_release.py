#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release
short_description: Install an SGLang release into a versioned virtualenv beside the serving one
version_added: 2.0.0
description:
  - Creates a virtualenv of its own for one SGLang release (default C(<venvs_dir>/<version>), e.g.
    C(/opt/sglang/venvs/0.5.23)) and installs the release into it, with the Triton and torch versions given in
    O(triton) and O(torch), else the ones the release pins; from the index, or from a wheelhouse directory on the
    host (air-gapped fleets; C(pip install --no-index --find-links)).
  - Records what was requested and what pip installed (C(pip freeze --all)) in C(llmops-release.json) inside the venv.
    That file makes the venv this module's own. The same request again changes nothing. A venv without that file,
    or one that holds another request, is refused. An installed release is never changed in place, because it may
    be serving or be the rollback target.
  - Bad input fails before anything changes, and the message names the option to fix. Examples are a release or
    Triton/torch version the wheelhouse lacks, a requested version that conflicts with the release's own pin, and a
    venv path that exists but is not this module's. A version the index lacks is found by pip. The venv that was
    being created is then removed, and the error names O(version) and lists the versions the index has.
  - Restarts nothing. To switch the server, point its C(sglang_python) at RV(python) (role llmops.sglang.sglang_server,
    C(sglang_server_python)). The old venv stays intact for a rollback.
  - M(llmops.sglang.sglang_upgrade_check) predicts, before any restart, what the new release will do with the
    host's tuned MoE configs and server arguments.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  check_mode:
    description: Checks every input, including the wheelhouse's wheels and the release's pins. Reports what would be
      installed (RV(plan)) without creating anything.
    support: full
  diff_mode:
    description: The venv's manifest before and after (request, plan, installed versions).
    support: full
  idempotent:
    description: A venv of this module holding the same versions reports no change.
    support: full
options:
  version:
    description: The SGLang release to install, e.g. C(0.5.23).
    type: str
    required: true
  triton:
    description: Triton version to install with it; default the one the release (its torch) pins.
    type: str
  torch:
    description: torch version to install with it; default the one the release pins.
    type: str
  venvs_dir:
    description: Directory of the versioned venvs; the venv is C(<venvs_dir>/<version>) unless O(venv) is set.
    type: path
    default: /opt/sglang/venvs
  venv:
    description: The venv's path, in place of C(<venvs_dir>/<version>) (e.g. to install a second Triton of one release).
    type: path
  wheelhouse:
    description:
      - Directory on the host holding the wheels to install from, the release's dependencies included
        (C(pip install --no-index --find-links)); no index is asked.
      - Default install from the index.
    type: path
  index_url:
    description: Package index to install from (pip's C(--index-url)); default pip's own configuration. Ignored with O(wheelhouse).
    type: str
  base_python:
    description: Python the venv is created from (C(python -m venv)); its version is the venv's.
    type: path
    default: /usr/bin/python3
"""

EXAMPLES = r"""
---
- name: Install SGLang 0.5.23 (and the Triton it pins) beside the serving release
  llmops.sglang.sglang_release:
    version: 0.5.23
  register: release

- name: Same from an air-gapped wheelhouse, with a chosen Triton, into a named venv
  llmops.sglang.sglang_release:
    version: 0.5.23
    triton: 3.6.0
    wheelhouse: /srv/wheelhouse
    venv: /opt/sglang/venvs/0.5.23-triton3.6.0

- name: Switch the server to it (the deploy restarts it; the old venv stays for a rollback)
  ansible.builtin.include_role:
    name: llmops.sglang.sglang_server
  vars:
    sglang_server_python: "{{ release.python }}"
"""

RETURN = r"""
venv:
  description: The release's venv.
  returned: always
  type: str
  sample: /opt/sglang/venvs/0.5.23
python:
  description: Its interpreter, the value for the server's C(sglang_python).
  returned: always
  type: str
  sample: /opt/sglang/venvs/0.5.23/bin/python
versions:
  description: Installed versions of sglang, triton and torch (null when not installed). In check mode, the versions
    that would be installed (null where only pip's resolution will tell).
  returned: always
  type: dict
  sample: {sglang: 0.5.23, triton: 3.6.0, torch: null}
request:
  description: What was asked for (C(versions)) and from where (C(source)).
  returned: always
  type: dict
plan:
  description:
    - What the install takes, per sglang, triton and torch. Each is C(version) and C(from) (V(requested), or
      V(pinned by sglang X) as read from the wheelhouse's wheel), or null where only pip's resolution will tell.
    - Null when nothing is installed (the venv already holds the request).
  returned: always
  type: dict
manifest:
  description: The venv's C(llmops-release.json), with C(request), C(freeze) (C(pip freeze --all) lines), C(versions),
    C(python), C(state) and C(installed_at). Null in check mode before an install.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils._sglang_release import ReleaseError, ensure_release
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandError, CommandRunner


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(version=dict(type="str", required=True), triton=dict(type="str"), torch=dict(type="str"),
                           venvs_dir=dict(type="path", default="/opt/sglang/venvs"), venv=dict(type="path"),
                           wheelhouse=dict(type="path"), index_url=dict(type="str"),
                           base_python=dict(type="path", default="/usr/bin/python3")),
        supports_check_mode=True,
    )
    try:
        result = ensure_release(CommandRunner(module), module.params, module.check_mode)
    except (ReleaseError, CommandError) as exc:
        module.fail_json(msg=str(exc))
    if not module._diff:
        result.pop("diff")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
