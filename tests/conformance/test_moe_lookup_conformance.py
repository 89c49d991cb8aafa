# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The collection's MoE config rules and tuner driving against each real release (tests/conformance/moe_checks.py:
the release's own ``fused_moe_triton_config.py`` from its PyPI wheel, the tuners' argparse from the repository),
and the emulator's lookup against the release its profile names."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import moe_rules
from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import config_file_name
from tests.conformance.moe_checks import (
    ENTRY, INSTALLED_TRITON, TREE, TUNER_CLI, check_moe_lookup, check_tuner_driving, run_real, write_tree)
from tests.emulator.profiles import profile_document
from tests.emulator.profiles import profile_release as release_of


@pytest.mark.parametrize("version", moe_rules.CHECKED_RELEASES)
def test_names_config_dirs_lookup_and_pairing_are_the_releases(version):
    assert check_moe_lookup(version) == []


@pytest.mark.parametrize("version", sorted(TUNER_CLI))
def test_the_tuner_is_driven_by_what_its_argparse_offers(version):
    assert check_tuner_driving(version) == []


# --- the emulator's lookup is its release's ----------------------------------------------------------------

EMULATOR = Path(__file__).resolve().parents[1] / "emulator"
EMULATOR_PROBE = r"""
import json, os, sys
import triton
from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as config
results = []
for scenario in json.load(sys.stdin):
    triton.__version__ = scenario["triton"]
    os.environ["SGLANG_MOE_CONFIG_DIR"] = scenario["config_dir"]
    config.get_moe_configs.cache_clear()
    try:
        if scenario["kind"] == "lookup":
            *args, down = scenario["args"]
            loaded = config.get_moe_configs(*args, down_moe=down)
            results.append({"loaded": None if loaded is None else sorted(map(str, loaded)), "error": None})
        else:
            config.check_block_size_m(scenario["E"], scenario["N"], None, 0, 0, [scenario["M"]])
            results.append({"error": None})
    except Exception as exc:
        results.append({"error": type(exc).__name__})
print(json.dumps(results))
"""


def emulator_profiles() -> list[Path]:
    return sorted((EMULATOR / "profiles").glob("*.yaml"))


def profile_release(profile: Path) -> tuple[str, str]:
    """(sglang version the profile names, else the emulator package's; its GPU name), from its effective document."""
    return release_of(profile), profile_document(profile)["gpu"]["name"]


def run_emulator(profile: Path, scenarios: list[dict], state_dir: Path) -> list[dict]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{EMULATOR / 'sglang'}:{EMULATOR / 'triton'}",
           "SGLANG_EMULATOR_PROFILE": str(profile), "SGLANG_EMULATOR_STATE_DIR": str(state_dir)}
    probe = subprocess.run([sys.executable, "-c", EMULATOR_PROBE], input=json.dumps(scenarios), text=True,
                           capture_output=True, timeout=60, check=False, env=env)
    assert probe.returncode == 0, probe.stderr[-2000:]
    return json.loads(probe.stdout)


def profile_cases() -> list[tuple[Path, str | None]]:
    """Every profile as it is, and the demo profile playing each checked release (its sglang_version set)."""
    demo = EMULATOR / "profiles" / "demo.yaml"
    return [(path, None) for path in emulator_profiles()] + [(demo, version) for version in moe_rules.CHECKED_RELEASES]


@pytest.mark.parametrize(("profile", "release"), profile_cases(),
                         ids=lambda case: case if isinstance(case, str) else getattr(case, "stem", "as-is"))
def test_the_emulators_lookup_is_its_releases(profile, release, tmp_path):
    if release is not None:
        import yaml

        document = profile_document(profile)
        document["sglang_version"] = release
        profile = tmp_path / f"{profile.stem}-{release}.yaml"
        profile.write_text(yaml.safe_dump(document), encoding="utf-8")
    version, gpu = profile_release(profile)  # the tree and the real release use the profile's GPU name
    root = write_tree(tmp_path / "tree", device=gpu)
    bad = write_tree(tmp_path / "bad", extra_dirs=("triton_3_6_0_post1",), device=gpu)
    (tmp_path / "empty").mkdir()
    scenarios = [{"kind": "lookup", "triton": triton, "config_dir": str(root), "args": [e, n, None, 0, 0, False, down]}
                 for triton in INSTALLED_TRITON for (e, n) in TREE for down in (False, True)]
    scenarios += [{"kind": "lookup", "triton": "3.6.0", "config_dir": str(directory),
                   "args": [64, 128, None, 0, 0, False, False]} for directory in (bad, tmp_path / "empty")]
    pair = tmp_path / "pair" / "configs" / "triton_3_6_0"
    pair.mkdir(parents=True)
    (pair / config_file_name(8, 1792, gpu)).write_text(json.dumps({"64": {"BLOCK_SIZE_M": 64, **ENTRY}}))
    (pair / config_file_name(8, 1792, gpu, down=True)).write_text(json.dumps({"64": {"BLOCK_SIZE_M": 32, **ENTRY}}))
    pairs = [{"kind": "pair", "triton": "3.6.0", "config_dir": str(tmp_path / "pair"), "E": 8, "N": 1792, "M": 64}]
    real = run_real(version, scenarios + pairs, gpu)
    emulated = run_emulator(profile, scenarios + pairs, tmp_path / "state")
    for scenario, mine, theirs in zip(scenarios, emulated, real):
        expected = None if theirs.get("loaded") is None else sorted(theirs["loaded"])
        if mine["error"] or theirs["error"]:
            assert bool(mine["error"]) == bool(theirs["error"]), (version, scenario, mine, theirs)
        else:
            assert mine["loaded"] == expected, (version, scenario, mine, theirs)
    assert (emulated[-1]["error"] == "AssertionError") == (real[-1]["error"] or "").startswith("AssertionError")
