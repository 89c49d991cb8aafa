# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The version of an SGLang source checkout as real checkouts tell it (issue #16 item 1): setuptools-scm's
python/sglang/_version.py, else the git tag (real git, real repositories), else a literal version.py."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_env import source_version_info, tuner_facts

# sglang 0.5.11's python/sglang/version.py (PyPI wheel, the same text in 0.5.10 .. 0.5.23): it only imports
# the scm-written _version.py, with importlib.metadata and setuptools_scm as fallbacks.
SCM_VERSION_PY = """try:
    from sglang._version import __version__, __version_tuple__
except ImportError:
    __version__ = "0.0.0.dev0"
"""
# The shape setuptools-scm (vcs-versioning) writes, as in the 0.5.11 wheel's sglang/_version.py.
SCM_WRITTEN = "__version__ = version = '0.5.11'\n__version_tuple__ = version_tuple = (0, 5, 11)\n"


def git(source: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    source = tmp_path / "sglang"
    (source / "python" / "sglang").mkdir(parents=True)
    (source / "python" / "sglang" / "version.py").write_text(SCM_VERSION_PY)
    (source / "benchmark" / "kernels" / "fused_moe_triton").mkdir(parents=True)
    (source / "benchmark" / "kernels" / "fused_moe_triton" / "tuning_fused_moe_triton.py").write_text("")
    git(source, "init", "-q")
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", "release")
    return source


def test_a_clone_at_a_release_tag_is_that_release(checkout):
    git(checkout, "tag", "v0.5.11")
    assert source_version_info(str(checkout)) == {"version": "0.5.11", "origin": "git tag v0.5.11", "problem": None}
    facts = tuner_facts(str(checkout), "0.5.11")
    assert facts["version_matches"] is True and facts["scripts"] == ["tuning_fused_moe_triton.py"]
    assert tuner_facts(str(checkout), "0.5.14")["version_matches"] is False


def test_commits_past_a_tag_are_not_the_release(checkout):
    git(checkout, "tag", "v0.5.11")
    (checkout / "x").write_text("x")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "later")
    info = source_version_info(str(checkout))
    assert info["version"] is None
    assert info["problem"].startswith("it is 1 commit(s) past the tag v0.5.11 (v0.5.11-1-g")


def test_the_scm_written_version_file_wins(checkout):
    git(checkout, "tag", "v0.5.10")
    (checkout / "python" / "sglang" / "_version.py").write_text(SCM_WRITTEN)
    assert source_version_info(str(checkout))["version"] == "0.5.11"
    assert source_version_info(str(checkout))["origin"] == "python/sglang/_version.py"


def test_no_tag_and_no_git_metadata_say_so(checkout, tmp_path):
    info = source_version_info(str(checkout))
    assert info["version"] is None and info["problem"].startswith("git describe --tags found no release tag")
    copy = tmp_path / "copy"
    (copy / "python" / "sglang").mkdir(parents=True)
    (copy / "python" / "sglang" / "version.py").write_text(SCM_VERSION_PY)
    info = source_version_info(str(copy))
    assert info["version"] is None and "no git metadata (.git) and no python/sglang/_version.py" in info["problem"]
    assert "not an SGLang source checkout" in source_version_info(str(tmp_path / "nothing"))["problem"]


def test_an_old_literal_version_file_still_counts(tmp_path):
    (tmp_path / "python" / "sglang").mkdir(parents=True)
    (tmp_path / "python" / "sglang" / "version.py").write_text('__version__ = "0.4.9"\n')
    assert source_version_info(str(tmp_path))["version"] == "0.4.9"


def test_the_emulator_build_tags_its_checkout(tmp_path):
    from tests.emulator.build import _copy_tree, _tag_checkout, emulated_version, EMULATOR_DIR

    src = tmp_path / "src"
    _copy_tree(EMULATOR_DIR / "sglang_src", src)
    _tag_checkout(src, emulated_version())
    assert source_version_info(str(src))["version"] == emulated_version() == "0.5.11"
