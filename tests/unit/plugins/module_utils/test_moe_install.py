# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_install.py on real directories (tmp_path).

Config samples are the upstream files of tests/fixtures/moe_configs: the H200 up/down pair agrees on
BLOCK_SIZE_M, the RTX PRO 6000 pair does not (upstream ships it that way).
"""
from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import moe_install
from ansible_collections.llmops.sglang.plugins.module_utils.moe_rules import moe_rules
from ansible_collections.llmops.sglang.plugins.module_utils.moe_install import (
    RequestedConfig,
    apply_changes,
    install_changes,
    list_configs,
    read_requested,
    restore_backup,
    seed_changes,
    validation_report,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "moe_configs"
H200_UP = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
H200_DOWN = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"
RTX_UP = "E=256,N=512,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
RTX_DOWN = "E=256,N=512,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
ENTRY = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4}


def _fixture(name: str) -> RequestedConfig:
    return RequestedConfig(name, name, (FIXTURES / name).read_bytes())


def _tree(root: Path) -> dict[str, bytes]:
    """Every file and directory under root (directories map to b"<dir>")."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(root.rglob("*"))}


# --- reading and validating ---------------------------------------------------------------------


def test_read_requested_from_src_and_content(tmp_path):
    src = tmp_path / "tuned" / RTX_UP
    src.parent.mkdir()
    src.write_bytes(b'{"1": {}}')
    requested = read_requested([{"src": str(src)}, {"name": H200_UP, "content": {"1": ENTRY}}])
    assert [(r.name, r.content) for r in requested] == [
        (RTX_UP, b'{"1": {}}'), (H200_UP, (json.dumps({"1": ENTRY}, indent=4) + "\n").encode())]
    assert requested[0].label == f"configs[0] ({src})"
    with pytest.raises(ValueError, match=r"^configs\[0\]\.src: cannot read"):
        read_requested([{"src": str(tmp_path / "absent.json")}])
    with pytest.raises(ValueError, match=r"^configs\[0\]: give either src"):
        read_requested([{"content": {"1": ENTRY}}])


RULES_0511 = moe_rules("0.5.11")
RULES_0523 = moe_rules("0.5.23")


def validation_errors(requested, rules=RULES_0523, install_dir=None):
    return validation_report(requested, rules, install_dir)[0]


def test_valid_upstream_pair_passes():
    assert validation_report([_fixture(H200_UP), _fixture(H200_DOWN)], RULES_0511) == ([], [])


def test_every_reason_is_reported():
    errors = validation_errors([
        RequestedConfig("a", "tuned.json", b"{}"),
        RequestedConfig("b", RTX_UP, b'{"1": {"BLOCK_SIZE_M": 16,'),
        RequestedConfig("c", H200_UP, json.dumps({"1": {**ENTRY, "num_warps": 3}, "x": ENTRY}).encode()),
        RequestedConfig("d", H200_UP, b"{}"),
    ])
    assert errors[0].startswith("a: 'tuned.json' is not a fused-MoE config file name (E=<E>,N=<N>,device_name=")
    assert errors[1].startswith("b: not valid JSON: ")
    assert "c: up config, batch size 1: num_warps=3 is not one of (1, 2, 4, 8, 16)" in errors
    assert "c: up config: key 'x' is not a positive integer batch size" in errors
    assert f"d: {H200_UP} is given twice" in errors
    assert "d: up config has no batch-size entries" in errors


def test_mismatched_block_size_m_is_refused_where_the_release_asserts_and_a_warning_where_it_overrides():
    # The upstream RTX PRO 6000 pair (two commits) picks different BLOCK_SIZE_M at several token counts.
    errors, warnings = validation_report([_fixture(RTX_UP), _fixture(RTX_DOWN)], RULES_0511)
    assert warnings == [] and len(errors) == 1
    assert errors[0].startswith(f"{RTX_DOWN}: BLOCK_SIZE_M differs from its up file: from M=1 up 16 vs down 32")
    assert "sglang 0.5.11 asserts they are equal" in errors[0] and "crash at its first forward" in errors[0]
    errors, warnings = validation_report([_fixture(RTX_UP), _fixture(RTX_DOWN)], RULES_0523)
    assert errors == [] and len(warnings) == 1 and "sglang 0.5.23 overrides the down value" in warnings[0]
    assert validation_report([_fixture(RTX_UP)], RULES_0511) == ([], [])


def test_a_down_file_is_paired_with_the_installed_up_file_or_the_default_config(tmp_path):
    install_dir = tmp_path / "configs" / "triton_3_6_0"
    (tmp_path / "configs" / "triton_3_4_0").mkdir(parents=True)
    (tmp_path / "configs" / "triton_3_4_0" / RTX_UP).write_bytes((FIXTURES / RTX_UP).read_bytes())
    # 0.5.11 falls back to triton_3_4_0 for the up file: that is the one its down file is paired with.
    errors = validation_errors([_fixture(RTX_DOWN)], RULES_0511, str(install_dir))
    assert len(errors) == 1 and "differs from its up file" in errors[0]
    # Without an up file the server runs SGLang's default config: BLOCK_SIZE_M 16 up to M=E, then 64.
    down = {"1": {**ENTRY, "BLOCK_SIZE_M": 16}, "4096": {**ENTRY, "BLOCK_SIZE_M": 64}}
    name = "E=8,N=1792,device_name=NVIDIA_H200_down.json"
    errors = validation_errors([RequestedConfig("x", name, json.dumps(down).encode())], RULES_0511, str(install_dir))
    assert len(errors) == 1 and "SGLang's default up config" in errors[0]
    assert "from M=9 up 64 vs down 16" in errors[0]  # E=8: the default turns to 64 at M=9, the down file at 2049
    good = {"1": {**ENTRY, "BLOCK_SIZE_M": 16}, "8": {**ENTRY, "BLOCK_SIZE_M": 16}, "9": {**ENTRY, "BLOCK_SIZE_M": 64}}
    assert validation_errors([RequestedConfig("x", name, json.dumps(good).encode())], RULES_0511) == []


def test_a_triton_dir_the_release_cannot_sort_is_refused_where_it_scans_every_dir():
    errors, _ = validation_report([_fixture(H200_UP)], moe_rules("0.5.14"), triton_dir="triton_3_6_0_post1")
    assert errors and errors[0].startswith("triton_dir: sglang 0.5.14 cannot sort the config directories")
    assert validation_report([_fixture(H200_UP)], RULES_0511, triton_dir="triton_3_6_0_post1") == ([], [])


# --- install, backup, rollback, restore ---------------------------------------------------------


def test_install_replaces_creates_and_restore_puts_everything_back(tmp_path):
    configs = tmp_path / "configs"
    (configs / "triton_3_6_0").mkdir(parents=True)
    (configs / "triton_3_6_0" / H200_UP).write_text("old up\n")
    before = _tree(tmp_path)
    install_dir = str(configs / "triton_3_6_0")
    changes = install_changes(install_dir, [_fixture(H200_UP), _fixture(H200_DOWN)])
    assert [(os.path.basename(c.path), c.before) for c in changes] == [(H200_UP, b"old up\n"), (H200_DOWN, None)]
    backup_dir = apply_changes(changes, str(tmp_path / "backups"), keep_backup=True)
    assert (configs / "triton_3_6_0" / H200_DOWN).read_bytes() == (FIXTURES / H200_DOWN).read_bytes()
    assert install_changes(install_dir, [_fixture(H200_UP), _fixture(H200_DOWN)]) == []  # idempotent
    would = restore_backup(backup_dir, check_mode=True)
    assert would["restored"] == [str(configs / "triton_3_6_0" / H200_UP)]
    assert would["removed"] == [str(configs / "triton_3_6_0" / H200_DOWN)]
    assert (configs / "triton_3_6_0" / H200_DOWN).exists()  # check mode changed nothing
    assert restore_backup(backup_dir) == {**would, "changed": True}
    after = {k: v for k, v in _tree(tmp_path).items() if not k.startswith("backups")}
    assert after == before
    assert restore_backup(backup_dir)["changed"] is False


def test_restore_removes_directories_the_install_created(tmp_path):
    target = tmp_path / "moe" / "configs" / "triton_3_6_0" / H200_UP
    changes = install_changes(str(target.parent), [_fixture(H200_UP)])
    backup_dir = apply_changes(changes, str(tmp_path / "backups"), keep_backup=True)
    assert target.exists()
    result = restore_backup(backup_dir)
    assert result["removed"] == [str(target), str(tmp_path / "moe" / "configs" / "triton_3_6_0"),
                                 str(tmp_path / "moe" / "configs"), str(tmp_path / "moe")]
    assert not (tmp_path / "moe").exists()


def test_failed_step_restores_what_was_already_installed(tmp_path):
    install_dir = tmp_path / "configs" / "triton_3_6_0"
    install_dir.mkdir(parents=True)
    (install_dir / H200_UP).write_text("old up\n")
    changes = install_changes(str(install_dir), [_fixture(H200_UP), _fixture(H200_DOWN)])
    (install_dir / H200_DOWN).mkdir()  # a directory where the second file must go: its os.replace fails
    with pytest.raises(ValueError, match=re.escape(f"installing {install_dir / H200_DOWN} failed (") + ".*every file was restored"):
        apply_changes(changes, str(tmp_path / "backups"), keep_backup=False)
    assert (install_dir / H200_UP).read_text() == "old up\n"
    assert sorted(p.name for p in install_dir.iterdir()) == [H200_UP, H200_DOWN]  # no temp files left


def test_a_restore_that_fails_too_reports_both_errors_and_keeps_the_backup(tmp_path, monkeypatch):
    """ENOSPC while installing, and again while restoring: the message holds both errors and where the backup is, and
    the backup stays (a bare errno and a half-written config dir before)."""
    install_dir = tmp_path / "configs" / "triton_3_6_0"
    install_dir.mkdir(parents=True)
    (install_dir / H200_UP).write_text("old up\n")
    changes = install_changes(str(install_dir), [_fixture(H200_UP), _fixture(H200_DOWN)])
    real_write = moe_install.write_atomically

    def disk_full_after_the_backup(path, data, mode=0o644):
        if str(install_dir) in path and path.endswith(H200_DOWN) or path.endswith(H200_UP) and data == b"old up\n":
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, data, mode)
    monkeypatch.setattr(moe_install, "write_atomically", disk_full_after_the_backup)
    with pytest.raises(ValueError) as failed:
        apply_changes(changes, str(tmp_path / "backups"), keep_backup=False)
    [backup_dir] = list((tmp_path / "backups").iterdir())
    message = str(failed.value)
    assert message.startswith(f"installing {install_dir / H200_DOWN} failed ([Errno 28] No space left on device), "
                              f"and restoring failed too ([Errno 28] No space left on device)"), message
    assert f"the backup is {backup_dir}" in message and "moe_configs state=restored" in message, message
    assert json.loads((backup_dir / "manifest.json").read_text())["entries"][0]["path"] == str(install_dir / H200_UP)


def test_backup_is_dropped_when_not_kept(tmp_path):
    changes = install_changes(str(tmp_path / "t"), [_fixture(H200_UP)])
    assert apply_changes(changes, str(tmp_path / "backups"), keep_backup=False) is None
    assert list((tmp_path / "backups").iterdir()) == []


def test_restore_rejects_a_directory_without_manifest(tmp_path):
    with pytest.raises(ValueError, match="^backup_dir: .* is not a moe_configs backup"):
        restore_backup(str(tmp_path))


# --- seeding and listing --------------------------------------------------------------------------


def test_first_use_of_a_managed_dir_copies_the_built_in_configs(tmp_path):
    builtin = tmp_path / "pkg" / "configs"
    (builtin / "triton_3_5_1").mkdir(parents=True)
    (builtin / "triton_3_5_1" / H200_UP).write_bytes(b"builtin")
    (builtin / "README.md").write_text("not a triton dir")
    managed = tmp_path / "moe" / "configs"
    seeds = seed_changes(str(builtin), str(managed))
    assert [(c.path, c.content, c.before) for c in seeds] == [(str(managed / "triton_3_5_1" / H200_UP), b"builtin", None)]
    apply_changes(seeds, str(tmp_path / "backups"), keep_backup=False)
    assert seed_changes(str(builtin), str(managed)) == []  # only the first use


def test_listing_parses_moe_files_per_triton_dir(tmp_path):
    for directory, name in (("triton_3_5_1", H200_DOWN), ("triton_3_6_0", RTX_UP), ("triton_3_6_0", "silu_and_mul_sm_90.json")):
        (tmp_path / directory).mkdir(exist_ok=True)
        (tmp_path / directory / name).write_text("{}")
    (tmp_path / "legacy.json").write_text("{}")
    listing = list_configs(str(tmp_path))
    assert list(listing) == ["triton_3_5_1", "triton_3_6_0"]
    assert listing["triton_3_5_1"] == [{"file_name": H200_DOWN, "kernel": "down", "E": 257, "N": 256,
                                        "device_name": "NVIDIA_H200", "dtype": "fp8_w8a8", "block_shape": [128, 128],
                                        "per_channel_quant": False}]
    assert [entry["file_name"] for entry in listing["triton_3_6_0"]] == [RTX_UP]
    assert list_configs(str(tmp_path / "absent")) == {}
