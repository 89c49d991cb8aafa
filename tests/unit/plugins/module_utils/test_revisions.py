"""Revisions of a host's serving configuration (issue #36 item 15): several kept, each put back exactly."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import revisions
from ansible_collections.llmops.sglang.plugins.module_utils.revisions import (
    RevisionError, put_back, read_manifest, record, restore, revision_ids)
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import ReadyResult

UNIT_A = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --port 30000\n"
UNIT_B = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --port 31000 --host 10.0.0.5\n"


@pytest.fixture
def host(tmp_path):
    """A host's files: the unit, the API key file, one MoE config that exists and one a change would create."""
    paths = {"unit": tmp_path / "units" / "sglang.service", "key": tmp_path / "env" / "sglang.env",
             "config": tmp_path / "configs" / "E=256,N=256.json", "new_config": tmp_path / "configs" / "E=8,N=64.json"}
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    paths["unit"].write_text(UNIT_A)
    paths["key"].write_text("SGLANG_API_KEY=secret-one\n")
    paths["key"].chmod(0o600)
    paths["config"].write_text('{"1": {"BLOCK_SIZE_M": 16}}')
    return paths


def snapshot(paths: dict) -> dict:
    return {name: (path.read_bytes(), path.stat().st_mode & 0o777) if path.exists() else None
            for name, path in paths.items()}


def change_everything(paths: dict) -> None:
    paths["unit"].write_text(UNIT_B)
    paths["key"].write_text("SGLANG_API_KEY=secret-two\n")
    paths["config"].write_text('{"1": {"BLOCK_SIZE_M": 64}}')
    paths["new_config"].write_text("{}")


def test_a_restore_puts_every_file_back_exactly_and_removes_what_the_change_created(tmp_path, host):
    store = str(tmp_path / "store")
    before = snapshot(host)
    manifest = record(store, [str(p) for p in host.values()], label="rollout R1", keep=5)
    assert manifest["id"] == "000001" and manifest["label"] == "rollout R1" and manifest["pruned"] == []
    assert [entry["present"] for entry in manifest["files"]] == [True, True, True, False]
    change_everything(host)
    changed = restore(store, manifest["id"])
    assert sorted(changed) == sorted(str(p) for p in host.values())
    assert snapshot(host) == before, "contents and modes as recorded; the new config removed"
    assert restore(store, manifest["id"]) == [], "a second restore finds nothing to change"


def test_the_store_keeps_the_newest_revisions_and_restores_any_of_them(tmp_path, host):
    store = str(tmp_path / "store")
    recorded = []
    for generation in range(7):
        host["unit"].write_text(f"{UNIT_A}# generation {generation}\n")
        recorded.append(record(store, [str(host["unit"])], label="", keep=3))
    assert revision_ids(store) == ["000005", "000006", "000007"]
    assert recorded[-1]["pruned"] == ["000004"] and recorded[1]["pruned"] == []
    restore(store, "000005")
    assert host["unit"].read_text().endswith("# generation 4\n")
    with pytest.raises(RevisionError, match=r"revision 000002 is not in .* \(recorded: 000005, 000006, 000007\)"):
        restore(store, "000002")


def test_the_store_and_the_kept_key_are_roots_only_from_their_creation(tmp_path, host, modes_seen):
    store = tmp_path / "store"
    manifest = record(str(store), [str(host["key"])], label="", keep=5)
    assert store.stat().st_mode & 0o777 == 0o700
    kept = store / manifest["id"] / manifest["files"][0]["stored"]
    assert kept.read_text() == "SGLANG_API_KEY=secret-one\n"
    assert all(mode & 0o077 == 0 for path, mode in modes_seen if path.startswith(str(store))), modes_seen


def test_a_failed_record_leaves_no_partial_revision(tmp_path, host, monkeypatch):
    store = str(tmp_path / "store")
    record(store, [str(host["unit"])], label="", keep=5)

    def fail(*_args, **_kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(revisions, "write_atomically", fail)
    with pytest.raises(OSError, match="No space"):
        record(store, [str(host["unit"])], label="", keep=5)
    assert sorted(os.listdir(store)) == ["000001"]


def test_keep_must_keep_one(tmp_path, host):
    with pytest.raises(RevisionError, match="keep must be at least 1"):
        record(str(tmp_path / "store"), [str(host["unit"])], label="", keep=0)


class FakeSystemd:
    """systemctl answers; the calls that change the host are recorded."""

    def __init__(self, running: bool) -> None:
        self.running, self.calls = running, []

    def __call__(self, argv, changes=False, **_kwargs):
        if argv[:2] == ["systemctl", "show"]:
            state = "active" if self.running else "failed"
            return 0, f"ActiveState={state}\nSubState=running\nInvocationID=abc\nMainPID=7\nNRestarts=0\n", ""
        self.calls.append(" ".join(argv[1:]))
        return 0, "", ""


@pytest.fixture
def ready_waits(monkeypatch):
    waits = []

    def wait(_run, unit, url, timeout):
        waits.append((unit, url, timeout))
        return ReadyResult(ready=True, reason="ready", invocation_id="new", log="", seconds=1.25)
    monkeypatch.setattr(revisions, "wait_until_ready", wait)
    return waits


def test_put_back_restarts_the_restored_unit_and_waits_at_its_own_address(tmp_path, host, ready_waits):
    store = str(tmp_path / "store")
    host["unit"].write_text(UNIT_B)
    revision = record(store, [str(host["unit"])], label="", keep=5)["id"]
    host["unit"].write_text(UNIT_A)
    systemd = FakeSystemd(running=True)
    outcome = put_back(systemd, store, revision, unit="sglang.service", unit_path=str(host["unit"]), ready_timeout=60)
    assert systemd.calls == ["daemon-reload", "reset-failed sglang.service", "restart sglang.service"]
    assert ready_waits == [("sglang.service", "http://10.0.0.5:31000/health", 60)]
    assert outcome["restarted"] and outcome["ready"] and outcome["changed_paths"] == [str(host["unit"])]


def test_put_back_leaves_a_host_alone_that_already_runs_the_revision(tmp_path, host, ready_waits):
    store = str(tmp_path / "store")
    revision = record(store, [str(host["unit"])], label="", keep=5)["id"]
    systemd = FakeSystemd(running=True)
    outcome = put_back(systemd, store, revision, unit="sglang.service", unit_path=str(host["unit"]), ready_timeout=60)
    assert systemd.calls == [] and ready_waits == [] and not outcome["restarted"]
    stopped = FakeSystemd(running=False)
    assert put_back(stopped, store, revision, unit="sglang.service", unit_path=str(host["unit"]),
                    ready_timeout=60)["restarted"], "a server that does not run is started on the revision"


def test_put_back_of_a_revision_before_the_first_deploy_disables_before_the_unit_goes(tmp_path, host, ready_waits):
    store = str(tmp_path / "store")
    host["unit"].unlink()
    revision = record(store, [str(host["unit"])], label="", keep=5)["id"]
    host["unit"].write_text(UNIT_A)
    systemd = FakeSystemd(running=True)
    outcome = put_back(systemd, store, revision, unit="sglang.service", unit_path=str(host["unit"]), ready_timeout=60)
    assert systemd.calls == ["stop sglang.service", "disable sglang.service", "daemon-reload"]
    assert not host["unit"].exists() and not outcome["restarted"] and ready_waits == []


def test_a_failing_restart_names_the_revision(tmp_path, host, ready_waits):
    store = str(tmp_path / "store")
    revision = record(store, [str(host["unit"])], label="", keep=5)["id"]
    host["unit"].write_text(UNIT_B)

    def refuse_restart(argv, changes=False, **_kwargs):
        return (1, "", "Job failed") if argv[1] == "restart" else (0, "", "")
    with pytest.raises(RevisionError, match="systemctl restart sglang.service failed after revision 000001 was put "
                                            "back: Job failed"):
        put_back(refuse_restart, store, revision, unit="sglang.service", unit_path=str(host["unit"]), ready_timeout=60)


def test_the_manifest_says_what_was_recorded(tmp_path, host):
    store = str(tmp_path / "store")
    revision = record(store, [str(host["unit"]), str(host["unit"])], label="x", keep=5)["id"]
    manifest = read_manifest(store, revision)
    assert [entry["path"] for entry in manifest["files"]] == [str(host["unit"])], "a path named twice is kept once"
    assert json.loads((tmp_path / "store" / revision / "manifest.json").read_text()) == manifest


def test_a_directory_the_change_created_goes_with_its_files_when_empty(tmp_path, host):
    store = str(tmp_path / "store")
    new_dir = tmp_path / "configs" / "triton_3_6_0"
    created, kept = new_dir / "E=256,N=256.json", tmp_path / "configs" / "other" / "E=8.json"
    (tmp_path / "configs" / "other").mkdir()
    revision = record(store, [str(created), str(kept)], label="", keep=5)["id"]
    new_dir.mkdir()
    created.write_text("{}")
    kept.write_text("{}")
    restore(store, revision)
    assert not new_dir.exists(), "an empty triton_X_Y_Z directory would still count as present to SGLang"
    assert not kept.exists() and kept.parent.is_dir(), "a directory that existed stays"
