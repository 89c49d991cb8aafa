# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The collection's MoE config rules (plugins/module_utils/moe_rules.py, moe_configs.config_file_name) against
each real release's own ``fused_moe_triton_config.py``, run from its PyPI wheel with the heavy imports stubbed
(tests/conformance/real_moe_lookup.py): file names, where the module and its configs/ live, which file a
lookup loads (exact, fallback, missing, a server error) and what an up/down pair with different BLOCK_SIZE_M
does (assert or override)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import moe_rules
from ansible_collections.llmops.sglang.plugins.module_utils.moe_configs import config_file_name
from tests.conformance.conftest import extracted

PROBE = Path(__file__).with_name("real_moe_lookup.py")
DEVICE = "NVIDIA H200"
ENTRY = {"BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}
# Where each shape's file lies in the test tree: (E, N) -> triton dirs holding it.
TREE = {(8, 1792): ["triton_3_6_0"], (16, 512): ["triton_3_5_1"], (32, 256): ["triton_3_4_0", "triton_3_7_1"],
        (64, 128): [], (128, 64): ["triton_3_1_0", "triton_3_3_1"]}
INSTALLED_TRITON = ("3.6.0", "3.4.0", "3.8.0")


def run_real(version: str, scenarios: list[dict]) -> list[dict]:
    return run_real_on(version, scenarios, DEVICE)


def run_real_on(version: str, scenarios: list[dict], device: str) -> list[dict]:
    rules = moe_rules.moe_rules(version)
    module = Path(moe_rules.config_module_dir(str(extracted(version)), rules)) / "fused_moe_triton_config.py"
    probe = subprocess.run([sys.executable, str(PROBE), str(module)], input=json.dumps(scenarios), text=True,
                           capture_output=True, timeout=60, check=False, env={"DEVICE_NAME": device, "PATH": "/usr/bin"})
    assert probe.returncode == 0, probe.stderr[-2000:]
    return json.loads(probe.stdout)


def marker(triton_dir: str, e: int) -> str:
    """A batch-size key unique to one file, so the loaded content says which file the release read."""
    return str(1000 * int(triton_dir.removeprefix("triton_").replace("_", "")) + e)


def write_tree(root: Path, extra_dirs: tuple[str, ...] = (), device: str = DEVICE) -> Path:
    for directory in ("triton_3_1_0", "triton_3_3_1", "triton_3_4_0", "triton_3_5_1", "triton_3_6_0",
                      "triton_3_7_1", *extra_dirs):
        (root / "configs" / directory).mkdir(parents=True, exist_ok=True)
    for (e, n), dirs in TREE.items():
        for directory in dirs:
            name = config_file_name(e, n, device)
            (root / "configs" / directory / name).write_text(
                json.dumps({marker(directory, e): {"BLOCK_SIZE_M": 16, **ENTRY}}))
    return root


@pytest.mark.parametrize("version", moe_rules.CHECKED_RELEASES)
def test_config_file_names_are_the_releases(version):
    cases = [[256, 256, None, None, False, False], [257, 256, "fp8_w8a8", [128, 128], False, True],
             [128, 768, "int8_w8a8", None, True, False], [64, 512, "int4_w4a16", [0, 128], False, False]]
    real = run_real(version, [{"kind": "name", "args": case} for case in cases])
    assert [result["name"] for result in real] == [
        config_file_name(e, n, DEVICE, dtype, block, pcq, down) for e, n, dtype, block, pcq, down in cases]


@pytest.mark.parametrize("version", moe_rules.CHECKED_RELEASES)
def test_config_module_and_configs_dir_are_where_the_rules_say(version):
    root = extracted(version)
    rules = moe_rules.moe_rules(version)
    module_dir = Path(moe_rules.config_module_dir(str(root), rules))
    assert (module_dir / "fused_moe_triton_config.py").is_file()
    other = moe_rules.OLD_CONFIG_MODULE if rules["config_module"] == moe_rules.CONFIG_MODULE else moe_rules.CONFIG_MODULE
    assert not (root / other / "fused_moe_triton_config.py").exists()
    # Without SGLANG_MOE_CONFIG_DIR the release reads configs/ next to its module: a file it ships is found there.
    shipped = sorted((module_dir / "configs" / "triton_3_4_0").glob("E=*,N=*,device_name=NVIDIA_H200*.json"))[0]
    from ansible_collections.llmops.sglang.plugins.module_utils.moe_configs import parse_config_file_name
    fields = parse_config_file_name(shipped.name)
    block = fields["block_shape"] or [0, 0]
    real = run_real(version, [{"kind": "lookup", "triton": "3.4.0", "args": [
        fields["E"], fields["N"], fields["dtype"], block[0], block[1], fields["per_channel_quant"], fields["down"]]}])
    ours = moe_rules.lookup(str(module_dir / "configs"), "3.4.0", shipped.name, rules)
    assert ours["status"] == "used" and ours["path"] == str(shipped)
    assert real[0]["loaded"] == {key: value for key, value in json.loads(shipped.read_text()).items()}


@pytest.mark.parametrize("version", moe_rules.CHECKED_RELEASES)
def test_lookup_and_fallback_are_the_releases(version, tmp_path):
    rules = moe_rules.moe_rules(version)
    root = write_tree(tmp_path)
    scenarios, expected = [], []
    for triton in INSTALLED_TRITON:
        for (e, n), _ in TREE.items():
            for down in (False, True):
                scenarios.append({"kind": "lookup", "triton": triton, "config_dir": str(root),
                                  "args": [e, n, None, 0, 0, False, down]})
                name = config_file_name(e, n, DEVICE, down=down)
                found = moe_rules.lookup(str(root / "configs"), triton, name, rules)
                if found["status"] == "missing" and down and rules["down_missing"] == "reuse_up":
                    found = moe_rules.lookup(str(root / "configs"), triton, config_file_name(e, n, DEVICE), rules)
                expected.append(None if found["path"] is None else
                                [marker(Path(found["path"]).parent.name, e)])
    real = run_real(version, scenarios)
    assert [result["error"] for result in real] == [None] * len(real)
    assert [None if result["loaded"] is None else sorted(result["loaded"]) for result in real] == expected
    # The fixed list never reaches triton_3_5_1; scanning every directory does.
    only_351 = [r for s, r in zip(scenarios, real) if s["args"][:2] == [16, 512] and not s["args"][-1]]
    assert all((r["loaded"] is None) == (rules["fallback"] == "fixed") for r in only_351)


@pytest.mark.parametrize("version", moe_rules.CHECKED_RELEASES)
def test_server_errors_of_the_lookup_are_the_releases(version, tmp_path):
    rules = moe_rules.moe_rules(version)
    bad = write_tree(tmp_path / "bad", extra_dirs=("triton_3_6_0_post1",))
    empty = tmp_path / "empty"
    empty.mkdir()
    scenarios = [{"kind": "lookup", "triton": "3.6.0", "config_dir": str(root), "args": [64, 128, None, 0, 0, False, False]}
                 for root in (bad, empty)]
    real = run_real(version, scenarios)
    ours = [moe_rules.lookup(str(root / "configs"), "3.6.0", config_file_name(64, 128, DEVICE), rules)
            for root in (bad, empty)]
    for result, mine in zip(real, ours):
        assert (result["error"] is not None) == (mine["status"] == "error"), (result, mine)
    assert (ours[0]["status"] == "error") == (rules["fallback"] == "all_dirs")


@pytest.mark.parametrize("version", moe_rules.CHECKED_RELEASES)
def test_block_size_m_mismatch_asserts_or_is_overridden_as_the_rules_say(version, tmp_path):
    rules = moe_rules.moe_rules(version)
    up = {"1": {"BLOCK_SIZE_M": 16, **ENTRY}, "64": {"BLOCK_SIZE_M": 64, **ENTRY}}
    down = {"1": {"BLOCK_SIZE_M": 16, **ENTRY}, "64": {"BLOCK_SIZE_M": 32, **ENTRY}}
    directory = tmp_path / "configs" / "triton_3_6_0"
    directory.mkdir(parents=True)
    (directory / config_file_name(8, 1792, DEVICE)).write_text(json.dumps(up))
    (directory / config_file_name(8, 1792, DEVICE, down=True)).write_text(json.dumps(down))
    real = run_real(version, [{"kind": "pair", "triton": "3.6.0", "config_dir": str(tmp_path), "E": 8, "N": 1792,
                               "M": m} for m in (1, 64)])
    mismatches = moe_rules.block_m_pairs(up, down, lambda m: 0)
    assert [m for m, _, _ in mismatches] == [33]  # 33 is the first M whose nearest key is 64
    assert real[0]["error"] is None and real[0]["up_m"] == real[0]["down_m"] == 16
    if rules["block_m_mismatch"] == "assert":
        assert real[1]["error"].startswith("AssertionError")
    else:
        assert real[1]["error"] is None and real[1]["up_m"] == real[1]["down_m"] == 64
        assert any("overriding down BLOCK_SIZE_M" in message for message in real[1]["log"])


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
    """(sglang version the profile names, else the emulator package's; its GPU name)."""
    import yaml

    document = yaml.safe_load(profile.read_text(encoding="utf-8"))
    package = re.search(r'__version__ = "([^"]+)"', (EMULATOR / "sglang" / "sglang" / "version.py").read_text()).group(1)
    return str(document.get("sglang_version") or package), document["gpu"]["name"]


def run_emulator(profile: Path, scenarios: list[dict], state_dir: Path) -> list[dict]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{EMULATOR / 'sglang'}:{EMULATOR / 'triton'}",
           "SGLANG_EMULATOR_PROFILE": str(profile), "SGLANG_EMULATOR_STATE_DIR": str(state_dir)}
    probe = subprocess.run([sys.executable, "-c", EMULATOR_PROBE], input=json.dumps(scenarios), text=True,
                           capture_output=True, timeout=60, check=False, env=env)
    assert probe.returncode == 0, probe.stderr[-2000:]
    return json.loads(probe.stdout)


@pytest.mark.parametrize("profile", emulator_profiles(), ids=lambda path: path.stem)
def test_the_emulators_lookup_is_its_releases(profile, tmp_path):
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
    real = run_real_on(version, scenarios + pairs, gpu)
    emulated = run_emulator(profile, scenarios + pairs, tmp_path / "state")
    for scenario, mine, theirs in zip(scenarios, emulated, real):
        expected = None if theirs.get("loaded") is None else sorted(theirs["loaded"])
        if mine["error"] or theirs["error"]:
            assert bool(mine["error"]) == bool(theirs["error"]), (version, scenario, mine, theirs)
        elif scenario["args"][-1] and expected is not None and mine["loaded"] is None:
            # The emulator's down lookup returns None where 0.5.16+ reuse the up file; only those may differ.
            assert moe_rules.moe_rules(version)["down_missing"] == "reuse_up", (version, scenario)
        else:
            assert mine["loaded"] == expected, (version, scenario, mine, theirs)
    assert (emulated[-1]["error"] == "AssertionError") == (real[-1]["error"] or "").startswith("AssertionError")
