# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The SGLang installation of a host as its own Python sees it, and the source checkout used for tuning.

Private to the llmops.sglang collection. Pure stdlib; commands run through a
``run(argv) -> (rc, out, err)`` callable (``command_runner.CommandRunner`` in modules).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable

from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import command_environment

# The fused-MoE config module of each release (0.5.11+, then 0.5.10's; moe_rules.RULE_CHANGES).
CONFIG_MODULE_NAMES = ("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config",
                       "sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_config")
# Runs inside the SGLang venv; prints one JSON document.
PROBE = r"""
import importlib, importlib.metadata as md, json, os, platform
def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
config_module = None
for name in %r:
    try:
        config_module = os.path.dirname(importlib.import_module(name).__file__)
        break
    except Exception:
        pass
print(json.dumps({"versions": {"python": platform.python_version(), "sglang": version("sglang"),
                  "triton": version("triton"), "torch": version("torch"), "ray": version("ray")},
                  "config_module_dir": config_module}))
""" % (CONFIG_MODULE_NAMES,)
TUNER_SCRIPTS = ("tuning_fused_moe_triton.py", "tune_down_moe.py", "tuning_fused_moe_triton_sep.py", "common_utils.py")
TUNER_SUBDIR = os.path.join("benchmark", "kernels", "fused_moe_triton")

Runner = Callable[[list], tuple]


def probe_sglang(run: Runner, python: str) -> dict:
    """Versions and the fused-MoE config module dir of the SGLang installation behind ``python``.

    Raises ValueError naming the ``python`` option when it is not an SGLang interpreter.
    """
    if not os.path.exists(python):
        raise ValueError(f"python: {python} does not exist; set it to the SGLang venv's interpreter")
    rc, out, err = run([python, "-c", PROBE])
    if rc != 0:
        raise ValueError(f"python: {python} could not report its environment: {err.strip()[-800:]}")
    probe = json.loads(out)
    if probe["versions"]["sglang"] is None:
        raise ValueError(f"python: sglang is not installed for {python}; set it to the SGLang venv's interpreter")
    return probe


# A checkout's version: setuptools-scm writes python/sglang/_version.py when the package is built or installed
# from it (sglang 0.5.10 .. 0.5.23 wheels: ``__version__ = version = '0.5.11'``); a plain clone has none and its
# version is its git tag (``v0.5.11``). Since 0.5.10 python/sglang/version.py only imports _version.py
# (``try: from sglang._version import __version__``); older checkouts and the emulator's stand-in still
# carry a literal ``__version__ = "..."`` there.
_VERSION_ASSIGNMENT = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.MULTILINE)
_RELEASE_TAG = re.compile(r"^v?(\d+\.\d+\.\d+(?:[.\w]*)?)$")


def _file_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            match = _VERSION_ASSIGNMENT.search(handle.read())
    except OSError:
        return None
    return match.group(1) if match else None


def _git_describe(run: Runner, source_dir: str) -> tuple[str | None, str | None]:
    """(``git describe --tags`` output, problem). ``safe.directory`` because checkouts are often owned by
    another user than the one Ansible becomes."""
    if shutil.which("git") is None:
        return None, "git is not installed on this host, so the checkout's tag cannot be read"
    try:
        rc, out, err = run(["git", "-c", f"safe.directory={source_dir}", "-C", source_dir, "describe", "--tags",
                            "--match", "v[0-9]*"])
    except OSError as exc:
        return None, f"git is not usable on this host ({exc.strerror})"
    if rc != 0:
        return None, f"git describe --tags found no release tag ({(err or out).strip()[-200:]})"
    return out.strip(), None


def source_version_info(source_dir: str, run: Runner | None = None) -> dict:
    """``{version, origin, problem}`` of an SGLang source checkout; version None when it cannot be told.

    ``origin`` is where it came from: ``python/sglang/_version.py`` (setuptools-scm's file), ``git tag vX``,
    ``python/sglang/version.py`` (a literal assignment). A checkout some commits past a tag is not that
    release: its version is None and ``problem`` says how far it is.
    """
    package = os.path.join(source_dir, "python", "sglang")
    if not os.path.isdir(package):
        return {"version": None, "origin": None,
                "problem": f"{source_dir} has no python/sglang/; it is not an SGLang source checkout"}
    scm = _file_version(os.path.join(package, "_version.py"))
    if scm:
        return {"version": scm, "origin": "python/sglang/_version.py", "problem": None}
    problem = None
    if os.path.exists(os.path.join(source_dir, ".git")):
        described, problem = _git_describe(run or _run, source_dir)
        if described:
            match = _RELEASE_TAG.match(described)
            if match:
                return {"version": match.group(1), "origin": f"git tag {described}", "problem": None}
            tag, _sep, rest = described.rpartition("-g")[0].rpartition("-")
            problem = (f"it is {rest} commit(s) past the tag {tag} ({described}), not a release"
                       if tag else f"git describe gives {described}, not a release tag")
    literal = _file_version(os.path.join(package, "version.py"))
    if literal:
        return {"version": literal, "origin": "python/sglang/version.py", "problem": None}
    if problem is None:
        problem = ("it has no git metadata (.git) and no python/sglang/_version.py, so its version cannot be told "
                   "(a source archive or a copy without .git); clone it with git, tags included")
    return {"version": None, "origin": None, "problem": problem}


def source_version(source_dir: str, run: Runner | None = None) -> str | None:
    """Version of an SGLang source checkout (see :func:`source_version_info`), None when it cannot be told."""
    return source_version_info(source_dir, run)["version"]


def _run(argv: list) -> tuple:
    """The runner of a caller without a module (the tests, the controller): modules pass their CommandRunner."""
    # pylint: disable-next=ansible-bad-function
    completed = subprocess.run(argv, capture_output=True, text=True, check=False,
                               env=command_environment(base=os.environ))
    return completed.returncode, completed.stdout, completed.stderr


def tuner_facts(source_dir: str, installed: str | None, run: Runner | None = None) -> dict:
    """Tuner scripts of a checkout, its version (and where that came from, or why it is unknown)."""
    tuner_dir = os.path.join(source_dir, TUNER_SUBDIR)
    info = source_version_info(source_dir, run)
    return {"dir": tuner_dir, "scripts": [s for s in TUNER_SCRIPTS if os.path.isfile(os.path.join(tuner_dir, s))],
            "source_version": info["version"], "source_version_origin": info["origin"],
            "source_version_problem": info["problem"],
            "version_matches": info["version"] is not None and info["version"] == installed}
