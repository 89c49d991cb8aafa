# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A deploy that fails after its first change puts everything back and says what it put back: a failing systemctl
(daemon-reload, enable, restart), an exception while reading the unit's state, a start that never becomes ready. A
failed first deploy leaves no unit enabled. A unit systemd-analyze refuses is never installed. Real files (tmp_path),
a fake systemctl."""
from __future__ import annotations

import errno
import os

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _server_deploy, server_preflight, unit_change
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import ReadyResult

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
                       "host": "127.0.0.1", "port": 30001, "api_key": "new-key-2f9a", "user": "root",
                       "launcher_path": str(tmp_path / "launcher.py"), "ready_timeout": 5, **params}
        self.warnings: list[str] = []

    def fail_json(self, **result):
        raise Failed(result)

    def warn(self, text: str) -> None:
        self.warnings.append(text)


class FakeSystemd:
    """systemctl and systemd-analyze of a host: the commands run, and failures asked for by verb."""

    def __init__(self, enabled: str = "enabled", active: str = "active/running", **failures: int) -> None:
        self.commands: list[str] = []
        self.enabled, self.active = enabled, active.split("/")
        self.failures = failures

    def __call__(self, argv, changes=False, **_):
        self.commands.append(" ".join(argv))
        if argv[:2] == ["systemctl", "show"]:
            return 0, (f"ActiveState={self.active[0]}\nSubState={self.active[1]}\nInvocationID=old\nMainPID=42\n"
                       "NRestarts=0\n"), ""
        if argv[:2] == ["systemctl", "is-enabled"]:
            return (0 if self.enabled == "enabled" else 1), self.enabled + "\n", ""
        verb = argv[1].replace("-", "_") if argv[0] == "systemctl" else os.path.basename(argv[0]).replace("-", "_")
        if self.failures.get(verb, 0) > 0:
            self.failures[verb] -= 1
            return 1, "", f"Failed to {verb}: boom"
        return 0, "", ""

    def ran(self, *prefixes: str) -> list[str]:
        return [c for c in self.commands if c.startswith(prefixes)]


def ready(ok: bool, seconds: float = 1.0) -> ReadyResult:
    return ReadyResult(ok, "ready" if ok else "the service stopped while starting (state failed/failed)",
                       "new", "RuntimeError: Not enough memory.\n" if not ok else "", seconds)


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


def deploy(tmp_path, systemd, monkeypatch, waits=(), unit=NEW_UNIT, **params):
    """ServerDeployment.present on the fake host; ``waits``: what each wait until ready gives (or raises)."""
    outcomes = list(waits)

    def wait(run, unit_name, url, timeout):
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    monkeypatch.setattr(unit_change, "wait_until_ready", wait)
    deployment = _server_deploy.ServerDeployment(StubModule(tmp_path, **params), {"unit_content": unit})
    deployment.run = systemd
    monkeypatch.setattr(deployment, "facts", lambda invocation, log: {"invocation_id": invocation})
    return deployment.present(force_restart=False)


@pytest.mark.parametrize("verb", ["daemon_reload", "enable"])
def test_a_systemctl_failure_before_the_restart_puts_the_unit_and_key_back(host, monkeypatch, verb):
    systemd = FakeSystemd(enabled="disabled", **{verb: 1})
    before = files(host)
    with pytest.raises(Failed) as failed:
        deploy(host, systemd, monkeypatch)
    msg = failed.value.result["msg"]
    assert msg.startswith(f"systemctl {verb.replace('_', '-')}"), msg
    assert "the previous unit was restored; its server kept running (it was not restarted)" in msg, msg
    assert "put back the previous unit" in msg and "put back the previous API key file" in msg, msg
    assert files(host) == before, "the unit and the key file are the previous ones, and no backup is left"
    assert not systemd.ran("systemctl restart"), "the previous server was never stopped"
    assert failed.value.result["rolled_back"] is True


def test_a_stopped_server_is_left_stopped_and_the_message_says_so(host, monkeypatch):
    with pytest.raises(Failed) as failed:
        deploy(host, FakeSystemd(active="inactive/dead", daemon_reload=1), monkeypatch)
    assert "the previous unit was restored; its server was not running (undone: " in failed.value.result["msg"]


def test_a_failed_restart_restores_and_restarts_the_previous_unit_on_its_own_port(host, monkeypatch):
    systemd = FakeSystemd(restart=1)
    before = files(host)
    with pytest.raises(Failed) as failed:
        deploy(host, systemd, monkeypatch, waits=[ready(True, 2.5)])
    msg = failed.value.result["msg"]
    assert msg.startswith("systemctl restart sglang.service failed: Failed to restart: boom"), msg
    assert "the previous unit was restored and is running again" in msg
    assert files(host) == before
    assert systemd.ran("systemctl stop", "systemctl restart", "systemctl reset-failed") == [
        "systemctl reset-failed sglang.service", "systemctl restart sglang.service", "systemctl stop sglang.service",
        "systemctl reset-failed sglang.service", "systemctl restart sglang.service"]
    assert failed.value.result["rollback_seconds"] == 2.5


def test_an_exception_while_waiting_is_undone_too(host, monkeypatch):
    systemd = FakeSystemd()
    before = files(host)
    with pytest.raises(Failed) as failed:
        deploy(host, systemd, monkeypatch, waits=[RuntimeError("systemctl show sglang.service failed: bus"),
                                                  ready(True)])
    assert failed.value.result["msg"].startswith("systemctl show sglang.service failed: bus; the previous unit was "
                                                 "restored and is running again"), failed.value.result["msg"]
    assert files(host) == before


def test_a_failed_start_is_classified_and_rolled_back(host, monkeypatch):
    systemd = FakeSystemd()
    before = files(host)
    with pytest.raises(Failed) as failed:
        deploy(host, systemd, monkeypatch, waits=[ready(False), ready(True)])
    result = failed.value.result
    assert result["failure"]["kind"] == "oom" and result["rolled_back"] is True
    assert result["msg"].startswith("SGLang failed to start (oom): RuntimeError: Not enough memory.")
    assert "the previous unit was restored and is running again" in result["msg"]
    assert files(host) == before


def test_a_failed_first_deploy_is_stopped_disabled_and_removed(tmp_path, monkeypatch):
    systemd = FakeSystemd(enabled="not-found")
    with pytest.raises(Failed) as failed:
        deploy(tmp_path, systemd, monkeypatch, waits=[ready(False)])
    result = failed.value.result
    assert "there was no previous unit: the new one is disabled and removed" in result["msg"], result["msg"]
    assert result["rolled_back"] is False
    assert files(tmp_path) == {}, "neither the unit nor the key of a server that never started stays"
    assert systemd.ran("systemctl stop", "systemctl disable") == ["systemctl stop sglang.service",
                                                                  "systemctl disable sglang.service"]
    assert systemd.commands.index("systemctl disable sglang.service") < systemd.commands.index(
        "systemctl daemon-reload", systemd.commands.index("systemctl disable sglang.service") - 1)


def test_a_restore_that_fails_too_reports_both_errors_and_the_backups(host, monkeypatch):
    systemd = FakeSystemd(daemon_reload=1)

    replace = os.replace

    def no_space_to_put_back(source, target):
        if source.endswith(unit_change.BACKUP_SUFFIX):
            raise OSError(errno.ENOSPC, "No space left on device")
        replace(source, target)
    monkeypatch.setattr(unit_change.os, "replace", no_space_to_put_back)
    with pytest.raises(Failed) as failed:
        deploy(host, systemd, monkeypatch)
    msg = failed.value.result["msg"]
    unit_path = host / "units" / "sglang.service"
    assert msg.startswith("systemctl daemon-reload failed: Failed to daemon_reload: boom; "), msg
    assert "putting the previous state back failed too: put back the previous unit failed: [Errno 28] No space" in msg
    assert f"the backups are {unit_path}.llmops-backup, {host / 'env' / 'sglang.env'}.llmops-backup" in msg, msg
    assert (host / "units" / "sglang.service.llmops-backup").read_text() == OLD_UNIT


def test_a_deploy_resets_a_crash_loops_start_limit_before_it_restarts(host, monkeypatch):
    systemd = FakeSystemd()
    result = deploy(host, systemd, monkeypatch, waits=[ready(True)])
    assert result["restarted"] is True
    assert systemd.ran("systemctl reset-failed", "systemctl restart") == [
        "systemctl reset-failed sglang.service", "systemctl restart sglang.service"]
    assert not (host / "env" / "sglang.env.llmops-backup").exists()


def test_a_unit_systemd_analyze_refuses_is_never_installed(host, monkeypatch):
    monkeypatch.setattr(server_preflight, "_which", lambda program: f"/usr/bin/{program}")
    systemd = FakeSystemd(systemd_analyze=1)
    before = files(host)
    deployment = _server_deploy.ServerDeployment(StubModule(host), {"unit_content": NEW_UNIT})
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
    deployment = _server_deploy.ServerDeployment(StubModule(host), {"unit_content": NEW_UNIT})
    deployment.run = FakeSystemd()
    deployment.verify_unit()
    assert deployment.unit_verify == {"verified": False, "skipped": "systemd-analyze is not installed on the host",
                                      "messages": []}
    assert deployment.module.warnings == ["the unit was not checked with `systemd-analyze verify`: "
                                          "systemd-analyze is not installed on the host"]


def test_the_api_key_files_backup_and_restore_are_never_readable_by_others(host, monkeypatch, modes_seen):
    """Issue 36 item 10: the backup was a copy (0644 under umask 022) chmodded to 0600 afterwards; every file that
    holds the key is created with its final mode, through a backup, a failed deploy and its restore."""
    os.chmod(host / "env" / "sglang.env", 0o600)
    modes_seen.clear()
    with pytest.raises(Failed):
        deploy(host, FakeSystemd(daemon_reload=1), monkeypatch)
    key_files = [(path, mode) for path, mode in modes_seen if "sglang.env" in path]
    assert any(path.endswith(unit_change.BACKUP_SUFFIX) for path, _mode in key_files), "the key was backed up"
    assert all(mode & 0o077 == 0 for _path, mode in key_files), key_files
    assert (host / "env" / "sglang.env").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(("key", "problem"), [
    ("k", "must be at least 8 characters"),
    (" sk-spaced-key ", "has whitespace at its start or end, which the server's launcher strips"),
    ("sk-two-lines\nExecStartPre=+/bin/true", "holds a control character"),
])
def test_an_api_key_the_server_would_not_match_fails_before_any_change(host, monkeypatch, key, problem):
    """Issue 36 item 12: a key with spaces was written raw and stripped by the launcher (bench then got 401); a
    one-character key garbled the masked log."""
    systemd = FakeSystemd()
    before = files(host)
    with pytest.raises(Failed) as failed:
        deploy(host, systemd, monkeypatch, api_key=key)
    msg = failed.value.result["msg"]
    assert msg.startswith(f"api_key: {problem}") and msg.endswith("nothing was changed"), msg
    assert files(host) == before and not systemd.ran("systemctl")
