# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The SGLang installation of a host as its own Python sees it, and the source checkout used for tuning.

Private to the llmops.sglang collection. Pure stdlib; commands run through a
``run(argv) -> (rc, out, err)`` callable (``AnsibleModule.run_command`` in modules).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable

# Runs inside the SGLang venv; prints one JSON document.
PROBE = r"""
import importlib, importlib.metadata as md, json, os, platform
def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
config_module = None
for name in ("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config",
             "sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_config"):
    try:
        config_module = os.path.dirname(importlib.import_module(name).__file__)
        break
    except Exception:
        pass
print(json.dumps({"versions": {"python": platform.python_version(), "sglang": version("sglang"),
                  "triton": version("triton"), "torch": version("torch"), "ray": version("ray")},
                  "config_module_dir": config_module}))
"""
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


def source_version(source_dir: str) -> str | None:
    """``__version__`` of a checkout's ``python/sglang/version.py``."""
    try:
        with open(os.path.join(source_dir, "python", "sglang", "version.py"), encoding="utf-8") as handle:
            match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", handle.read(), re.MULTILINE)
    except OSError:
        return None
    return match.group(1) if match else None


def tuner_facts(source_dir: str, installed: str | None) -> dict:
    tuner_dir = os.path.join(source_dir, TUNER_SUBDIR)
    version = source_version(source_dir)
    return {"dir": tuner_dir, "scripts": [s for s in TUNER_SCRIPTS if os.path.isfile(os.path.join(tuner_dir, s))],
            "source_version": version, "version_matches": version is not None and version == installed}
