# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A unit systemd-analyze refuses is never installed. Real files (tmp_path), a fake systemctl."""
from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import server_preflight
from ansible_collections.llmops.sglang.plugins.modules import server

OLD_UNIT = "[Service]\nExecStart=/py /l.py sglang.launch_server --model-path /m --port 30000\n"
NEW_UNIT = "[Service]\nExecStart=/py /l.py sglang.launch_server --model-path /m --port 30001\n"


class Failed(Exception):
    def __init__(self, result: dict) -> None:
        super().__init__(result["msg"])
        self.result = result


class StubModule:
    check_mode = False

    def __init__(self, tmp_path, **params) -> None:
        self.tmpdir = str(tmp_path / "module-tmp")
        os.makedirs(self.tmpdir, exist_ok=True)
        self.params = {"name": "sglang", "unit_dir": str(tmp_path / "units"), "env_dir": str(tmp_path / "env"),
                       "host": "127.0.0.1", "port": 30001, "api_key": "new-key", "user": "root",
                       "launcher_path": str(tmp_path / "launcher.py"), "ready_timeout": 5, **params}
        self.warnings: list[str] = []

    def fail_json(self, **result):
        raise Failed(result)

    def warn(self, text: str) -> None:
        self.warnings.append(text)


class FakeSystemd:
    """systemctl and systemd-analyze of a host: the commands run, and failures asked for by verb."""

    def __init__(self, enabled: str = "enabled", **failures: int) -> None:
        self.commands: list[str] = []
        self.enabled = enabled
        self.failures = failures

    def __call__(self, argv, changes=False, **_):
        self.commands.append(" ".join(argv))
        if argv[:2] == ["systemctl", "show"]:
            return 0, "ActiveState=active\nSubState=running\nInvocationID=old\nMainPID=42\nNRestarts=0\n", ""
        if argv[:2] == ["systemctl", "is-enabled"]:
            return (0 if self.enabled == "enabled" else 1), self.enabled + "\n", ""
        verb = argv[1].replace("-", "_") if argv[0] == "systemctl" else os.path.basename(argv[0]).replace("-", "_")
        if self.failures.get(verb, 0) > 0:
            self.failures[verb] -= 1
            return 1, "", f"Failed to {verb}: boom"
        return 0, "", ""

    def ran(self, *prefixes: str) -> list[str]:
        return [c for c in self.commands if c.startswith(prefixes)]


@pytest.fixture
def host(tmp_path):
    """A host with the previous unit and API key file installed."""
    (tmp_path / "units").mkdir()
    (tmp_path / "env").mkdir()
    (tmp_path / "units" / "sglang.service").write_text(OLD_UNIT)
    (tmp_path / "env" / "sglang.env").write_text("SGLANG_API_KEY=old-key\n")
    return tmp_path


def files(tmp_path) -> dict[str, str]:
    return {str(p.relative_to(tmp_path)): p.read_text() for p in sorted(tmp_path.rglob("*"))
            if p.is_file() and "module-tmp" not in p.parts}


def test_a_unit_systemd_analyze_refuses_is_never_installed(host, monkeypatch):
    monkeypatch.setattr(server_preflight, "_which", lambda program: f"/usr/bin/{program}")
    systemd = FakeSystemd(systemd_analyze=1)
    before = files(host)
    deployment = server.ServerDeployment(StubModule(host), {"unit_content": NEW_UNIT})
    deployment.run = systemd
    with pytest.raises(Failed) as failed:
        deployment.verify_unit()
    result = failed.value.result
    assert result["msg"].startswith("cannot deploy, nothing was changed: unit: systemd-analyze verify refuses the "
                                    "rendered unit (rc=1): Failed to systemd_analyze: boom"), result["msg"]
    assert files(host) == before and result["actions"] == []
    [verify] = systemd.ran("/usr/bin/systemd-analyze")
    assert verify.startswith("/usr/bin/systemd-analyze verify ") and verify.endswith("/sglang.service")
    assert not os.listdir(deployment.module.tmpdir), "the unit to verify is written to a temporary file, then removed"


def test_without_systemd_analyze_the_unit_is_installed_unverified_and_the_result_says_so(host, monkeypatch):
    monkeypatch.setattr(server_preflight, "_which", lambda program: None)
    deployment = server.ServerDeployment(StubModule(host), {"unit_content": NEW_UNIT})
    deployment.run = FakeSystemd()
    deployment.verify_unit()
    assert deployment.unit_verify == {"verified": False, "skipped": "systemd-analyze is not installed on the host",
                                      "messages": []}
    assert deployment.module.warnings == ["the unit was not checked with `systemd-analyze verify`: "
                                          "systemd-analyze is not installed on the host"]
