# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""sglang_release through its real main(): the emulator's releases (tests/emulator/build.py's wheelhouse, built once
under .cache) really installed by pip into venvs under tmp_path, from the wheelhouse and from a file:// index made of
it; every refused input is refused before anything exists."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.sglang.plugins.module_utils._sglang_release import MANIFEST_NAME, MANAGED_BY
from ansible_collections.llmops.sglang.plugins.modules import sglang_release
from tests.emulator.build import build_wheelhouse

REPO = Path(__file__).resolve().parents[4]
BASE_PYTHON = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(not os.access(BASE_PYTHON, os.X_OK), reason="needs Debian's python3 (with venv)")


@pytest.fixture(name="wheelhouse", scope="module")
def wheelhouse_fixture() -> Path:
    return build_wheelhouse(REPO / ".cache" / "emulator-wheelhouse" / "wheels")


def run_module(capsys: pytest.CaptureFixture, tmp_path: Path, check: bool = False, diff: bool = False,
               **args) -> tuple[int, dict]:
    args = {"venvs_dir": str(tmp_path / "venvs"), "base_python": BASE_PYTHON, "_ansible_check_mode": check,
            "_ansible_diff": diff, "_ansible_remote_tmp": str(tmp_path / "remote_tmp"),
            "_ansible_keep_remote_files": False, **args}
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        sglang_release.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def imported_versions(python: str) -> list[str]:
    probe = "import json, sglang, triton; print(json.dumps([sglang.__version__, triton.__version__]))"
    return json.loads(subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True,
                                     env={"PATH": "/usr/bin:/bin"}).stdout)


def test_installs_from_the_wheelhouse_with_the_releases_pin_then_changes_nothing(wheelhouse, tmp_path, capsys):
    code, result = run_module(capsys, tmp_path, diff=True, version="0.5.23", wheelhouse=str(wheelhouse))
    assert code == 0, result
    venv = tmp_path / "venvs" / "0.5.23"
    assert result["changed"] is True and result["venv"] == str(venv) and result["python"] == str(venv / "bin/python")
    assert result["versions"] == {"sglang": "0.5.23", "triton": "3.6.0", "torch": None}
    assert result["plan"]["triton"] == {"version": "3.6.0", "from": "pinned by sglang 0.5.23"}
    assert imported_versions(result["python"]) == ["0.5.23", "3.6.0"]
    manifest = json.loads((venv / MANIFEST_NAME).read_text())
    assert manifest["managed_by"] == MANAGED_BY and manifest["state"] == "installed"
    assert "sglang==0.5.23" in manifest["freeze"] and "triton==3.6.0" in manifest["freeze"]
    assert result["diff"]["before"] == "" and '"sglang==0.5.23"' in result["diff"]["after"]
    for check in (False, True):
        code, again = run_module(capsys, tmp_path, check=check, version="0.5.23", wheelhouse=str(wheelhouse))
        assert code == 0 and again["changed"] is False and again["manifest"]["installed_at"] == manifest["installed_at"]


def test_check_mode_says_what_would_be_installed_and_creates_nothing(wheelhouse, tmp_path, capsys):
    code, result = run_module(capsys, tmp_path, check=True, diff=True, version="0.5.24", wheelhouse=str(wheelhouse))
    assert code == 0 and result["changed"] is True
    assert result["plan"] == {"sglang": {"version": "0.5.24", "from": "requested"},
                              "triton": {"version": "3.9.0", "from": "pinned by sglang 0.5.24"}, "torch": None}
    assert result["versions"] == {"sglang": "0.5.24", "triton": "3.9.0", "torch": None}
    assert result["manifest"] is None and '"3.9.0"' in result["diff"]["after"]
    assert not (tmp_path / "venvs").exists()


def _wheelhouse_without(wheelhouse: Path, tmp_path: Path, prefix: str) -> str:
    copy = tmp_path / "partial-wheelhouse"
    shutil.copytree(wheelhouse, copy, ignore=shutil.ignore_patterns(f"{prefix}*"))
    return str(copy)


BAD_INPUTS = {
    "unknown release": ({"version": "0.5.99"}, "version: the wheelhouse {wh} has no sglang 0.5.99 (it has sglang "
                                               "0.5.10, 0.5.11, 0.5.17, 0.5.23, 0.5.24); add that release's wheel"),
    "not a version": ({"version": "latest"}, "version: 'latest' is not a version (e.g. 0.5.23)"),
    "conflicting triton": ({"version": "0.5.23", "triton": "3.9.0"},
                           "triton: sglang 0.5.23 pins triton==3.6.0, so triton 3.9.0 cannot be installed with it; "
                           "leave triton unset"),
    "no wheelhouse": ({"version": "0.5.23", "wheelhouse": "{tmp}/nowhere"}, "wheelhouse: {tmp}/nowhere is not a "
                                                                            "directory on the host"),
    "wheelhouse without the pinned triton": (
        {"version": "0.5.24", "wheelhouse": "without:triton-3.9.0"},
        "wheelhouse: the wheelhouse {tmp}/partial-wheelhouse has no triton 3.9.0 (pinned by sglang 0.5.24; it has "
        "triton 3.5.1, 3.6.0)"),
    "wheelhouse without the release": (
        {"version": "0.5.24", "wheelhouse": "without:sglang-0.5.24"},
        "version: the wheelhouse {tmp}/partial-wheelhouse has no sglang 0.5.24 (it has sglang 0.5.10, 0.5.11, 0.5.17, 0.5.23)"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_fails_naming_the_field_before_anything_changes(case, wheelhouse, tmp_path, capsys):
    args, expected = BAD_INPUTS[case]
    args = {"wheelhouse": str(wheelhouse), **args}
    if args["wheelhouse"].startswith("without:"):
        args["wheelhouse"] = _wheelhouse_without(wheelhouse, tmp_path, args["wheelhouse"].partition(":")[2])
    args["wheelhouse"] = args["wheelhouse"].format(tmp=tmp_path)
    code, result = run_module(capsys, tmp_path, **args)
    assert code == 1 and result["msg"].startswith(expected.format(wh=wheelhouse, tmp=tmp_path)), result["msg"]
    assert not (tmp_path / "venvs").exists()


def test_a_venv_that_is_not_ours_or_holds_another_request_is_refused(wheelhouse, tmp_path, capsys):
    foreign = tmp_path / "venvs" / "0.5.23"
    (foreign / "bin").mkdir(parents=True)
    code, result = run_module(capsys, tmp_path, version="0.5.23", wheelhouse=str(wheelhouse))
    assert code == 1 and result["msg"].startswith(
        f"venv: {foreign} exists and was not made by llmops.sglang.sglang_release (it has no {MANIFEST_NAME})")
    ours = {"managed_by": MANAGED_BY, "state": "installed",
            "request": {"versions": {"sglang": "0.5.23", "triton": None, "torch": None}, "source": {}}}
    (foreign / MANIFEST_NAME).write_text(json.dumps(ours))
    code, result = run_module(capsys, tmp_path, check=True, version="0.5.23", triton="3.6.0", wheelhouse=str(wheelhouse))
    assert code == 1 and result["msg"].startswith(
        f"venv: {foreign} holds sglang 0.5.23 (its {MANIFEST_NAME}), not the requested sglang 0.5.23 with triton 3.6.0")
    assert sorted(os.listdir(foreign)) == ["bin", MANIFEST_NAME]


def _simple_index(wheelhouse: Path, root: Path) -> str:
    """A PEP 503 index (file://) of the wheelhouse, as an internal mirror would serve it."""
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang_release import wheelhouse_files
    for name, versions in wheelhouse_files(str(wheelhouse)).items():
        links = "".join(f'<a href="{wheelhouse / f}">{f}</a>\n' for files in versions.values() for f in files)
        (root / name).mkdir(parents=True)
        (root / name / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root.as_uri()


def test_a_release_the_index_lacks_names_version_and_leaves_no_venv(wheelhouse, tmp_path, capsys):
    index = _simple_index(wheelhouse, tmp_path / "simple")
    code, result = run_module(capsys, tmp_path, version="0.5.99", index_url=index)
    assert code == 1 and result["msg"].startswith(
        f"version: the index {index} has no sglang 0.5.99 (it has 0.5.10, 0.5.11, 0.5.17, 0.5.23, 0.5.24); set version to a version "
        "it has. The venv that was being created has been removed"), result["msg"]
    assert not (tmp_path / "venvs" / "0.5.99").exists()


def test_an_unfinished_install_of_ours_is_redone_from_the_index(wheelhouse, tmp_path, capsys):
    venv = tmp_path / "venvs" / "0.5.24"
    venv.mkdir(parents=True)
    (venv / MANIFEST_NAME).write_text(json.dumps({"managed_by": MANAGED_BY, "state": "installing"}))
    (venv / "half-installed").write_text("")
    code, result = run_module(capsys, tmp_path, version="0.5.24", index_url=_simple_index(wheelhouse, tmp_path / "s"))
    assert code == 0 and result["changed"] is True, result
    assert result["versions"] == {"sglang": "0.5.24", "triton": "3.9.0", "torch": None}
    assert not (venv / "half-installed").exists() and imported_versions(result["python"]) == ["0.5.24", "3.9.0"]
