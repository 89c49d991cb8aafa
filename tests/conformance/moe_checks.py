# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The MoE side of the collection checked against one real release (issue #16 items 2, 6, 8): each ``check_*``
returns the problems found (empty: the capability works on that release). Used by the conformance tests
(test_moe_lookup_conformance.py) and the support matrix (release_checks.CHECKS).

- ``check_moe_lookup``: ``moe_configs.config_file_name`` and ``moe_rules`` (config module dir, configs/ next to
  it, exact / fallback / missing / server error, BLOCK_SIZE_M assert or override) against the release's own
  ``fused_moe_triton_config.py`` run from its wheel with the heavy imports stubbed (real_moe_lookup.py).
- ``check_tuner_driving``: ``moe_tuning.tuner_cli`` reads the argparse ``--help`` of the release's tuners
  (options from sgl-project/sglang, tests/fixtures/sglang_tuner_cli) and every command line ``tuner_command``
  builds for it parses with that argparse.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import moe_rules
from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import config_file_name, parse_config_file_name
from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuning import size_runs, tuner_cli, tuner_command
from tests.conformance.conftest import extracted

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("real_moe_lookup.py")
DEVICE = "NVIDIA H200"
ENTRY = {"BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}
# Where each shape's file lies in the test tree: (E, N) -> triton dirs holding it.
TREE = {(8, 1792): ["triton_3_6_0"], (16, 512): ["triton_3_5_1"], (32, 256): ["triton_3_4_0", "triton_3_7_1"],
        (64, 128): [], (128, 64): ["triton_3_1_0", "triton_3_3_1"]}
INSTALLED_TRITON = ("3.6.0", "3.4.0", "3.8.0")
NAME_CASES = [[256, 256, None, None, False, False], [257, 256, "fp8_w8a8", [128, 128], False, True],
              [128, 768, "int8_w8a8", None, True, False], [64, 512, "int4_w4a16", [0, 128], False, False]]


def run_real(version: str, scenarios: list[dict], device: str = DEVICE) -> list[dict]:
    """Results of the release's own lookup code on ``scenarios`` (see real_moe_lookup.py)."""
    rules = moe_rules.moe_rules(version)
    module = Path(moe_rules.config_module_dir(str(extracted(version)), rules)) / "fused_moe_triton_config.py"
    probe = subprocess.run([sys.executable, str(PROBE), str(module)], input=json.dumps(scenarios), text=True,
                           capture_output=True, timeout=60, check=False, env={"DEVICE_NAME": device, "PATH": "/usr/bin"})
    if probe.returncode != 0:
        raise RuntimeError(f"the {version} lookup probe failed: {probe.stderr[-2000:]}")
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
            (root / "configs" / directory / config_file_name(e, n, device)).write_text(
                json.dumps({marker(directory, e): {"BLOCK_SIZE_M": 16, **ENTRY}}))
    return root


def tree_scenarios(root: Path) -> list[dict]:
    return [{"kind": "lookup", "triton": triton, "config_dir": str(root), "args": [e, n, None, 0, 0, False, down]}
            for triton in INSTALLED_TRITON for (e, n) in TREE for down in (False, True)]


def error_scenarios(bad: Path, empty: Path) -> list[dict]:
    return [{"kind": "lookup", "triton": "3.6.0", "config_dir": str(directory), "args": [64, 128, None, 0, 0, False, False]}
            for directory in (bad, empty)]


def write_mismatched_pair(root: Path, device: str = DEVICE) -> tuple[dict, dict]:
    up = {"1": {"BLOCK_SIZE_M": 16, **ENTRY}, "64": {"BLOCK_SIZE_M": 64, **ENTRY}}
    down = {"1": {"BLOCK_SIZE_M": 16, **ENTRY}, "64": {"BLOCK_SIZE_M": 32, **ENTRY}}
    directory = root / "configs" / "triton_3_6_0"
    directory.mkdir(parents=True)
    (directory / config_file_name(8, 1792, device)).write_text(json.dumps(up))
    (directory / config_file_name(8, 1792, device, down=True)).write_text(json.dumps(down))
    return up, down


def pair_scenarios(root: Path) -> list[dict]:
    return [{"kind": "pair", "triton": "3.6.0", "config_dir": str(root), "E": 8, "N": 1792, "M": m} for m in (1, 64)]


def expected_path(root: Path, triton: str, e: int, n: int, down: bool, rules: dict) -> list[str] | None:
    """What ``moe_rules.lookup`` says the release loads, as the marker keys of that file."""
    found = moe_rules.lookup(str(root / "configs"), triton, config_file_name(e, n, DEVICE, down=down), rules)
    if found["status"] == "missing" and down and rules["down_missing"] == "reuse_up":
        found = moe_rules.lookup(str(root / "configs"), triton, config_file_name(e, n, DEVICE), rules)
    return None if found["path"] is None else [marker(Path(found["path"]).parent.name, e)]


def check_moe_lookup(version: str) -> list[str]:
    rules, problems = moe_rules.moe_rules(version), []
    root = extracted(version)
    module_dir = Path(moe_rules.config_module_dir(str(root), rules))
    if not (module_dir / "fused_moe_triton_config.py").is_file():
        return [f"no fused_moe_triton_config.py in {rules['config_module']}"]
    other = moe_rules.OLD_CONFIG_MODULE if rules["config_module"] == moe_rules.CONFIG_MODULE else moe_rules.CONFIG_MODULE
    if (root / other / "fused_moe_triton_config.py").exists():
        problems.append(f"the release also has {other}/fused_moe_triton_config.py")
    shipped = sorted((module_dir / "configs" / "triton_3_4_0").glob("E=*,N=*,device_name=NVIDIA_H200*.json"))[0]
    fields = parse_config_file_name(shipped.name)
    block = fields["block_shape"] or [0, 0]
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        tree = write_tree(tmp / "tree")
        bad = write_tree(tmp / "bad", extra_dirs=("triton_3_6_0_post1",))
        (tmp / "empty").mkdir()
        up, down = write_mismatched_pair(tmp / "pair")
        scenarios = ([{"kind": "name", "args": case} for case in NAME_CASES]
                     + [{"kind": "lookup", "triton": "3.4.0", "args": [fields["E"], fields["N"], fields["dtype"], block[0],
                                                                       block[1], fields["per_channel_quant"], fields["down"]]}]
                     + tree_scenarios(tree) + error_scenarios(bad, tmp / "empty") + pair_scenarios(tmp / "pair"))
        real = run_real(version, scenarios)
        names = real[:len(NAME_CASES)]
        for case, result in zip(NAME_CASES, names):
            ours = config_file_name(case[0], case[1], DEVICE, *case[2:])
            if result.get("name") != ours:
                problems.append(f"get_config_file_name{tuple(case)} is {result.get('name')!r}, ours {ours!r}")
        own = real[len(NAME_CASES)]
        if own["loaded"] != json.loads(shipped.read_text()):
            problems.append(f"without SGLANG_MOE_CONFIG_DIR the release did not read {shipped} next to its module")
        offset = len(NAME_CASES) + 1
        for scenario, result in zip(tree_scenarios(tree), real[offset:]):
            e, n, *_, down_moe = scenario["args"]
            loaded = None if result["loaded"] is None else sorted(result["loaded"])
            ours = expected_path(tree, scenario["triton"], e, n, down_moe, rules)
            if result["error"] or loaded != ours:
                problems.append(f"triton {scenario['triton']} E={e} down={down_moe}: the release loads {loaded or result['error']}, "
                                f"the rules say {ours}")
        offset += len(tree_scenarios(tree))
        for directory, result in zip((bad, tmp / "empty"), real[offset:offset + 2]):
            ours = moe_rules.lookup(str(directory / "configs"), "3.6.0", config_file_name(64, 128, DEVICE), rules)
            if (result["error"] is not None) != (ours["status"] == "error"):
                problems.append(f"{directory.name} tree: the release {'fails' if result['error'] else 'does not fail'}, "
                                f"the rules say {ours['status']}")
        at_one, at_64 = real[-2:]
        if at_one["error"] or at_one["up_m"] != at_one["down_m"]:
            problems.append(f"an agreeing pair at M=1 gives {at_one}")
        asserted = (at_64["error"] or "").startswith("AssertionError")
        if asserted != (rules["block_m_mismatch"] == "assert"):
            problems.append(f"a BLOCK_SIZE_M mismatch {'asserts' if asserted else 'does not assert'}; the rules say "
                            f"{rules['block_m_mismatch']}")
        if not asserted and not any("overriding down BLOCK_SIZE_M" in message for message in at_64["log"]):
            problems.append("a BLOCK_SIZE_M mismatch is neither asserted nor overridden with SGLang's warning")
        if [m for m, _, _ in moe_rules.block_m_pairs(up, down, lambda m: 0)] != [33]:
            problems.append("block_m_pairs does not find the first token count (33) whose picks differ")
    return problems


def _fixtures_script():
    spec = importlib.util.spec_from_file_location("tuner_cli_fixtures", ROOT / "scripts" / "tuner_cli_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The tuners' options read at each release tag (tests/fixtures/sglang_tuner_cli/v<release>.json), by release.
TUNER_CLI = _fixtures_script().load_fixtures()


def check_tuner_driving(version: str) -> list[str]:
    entry = TUNER_CLI.get(version)
    if entry is None:
        return [f"no tuner option set for {version} in tests/fixtures/sglang_tuner_cli"]
    script_module, problems = _fixtures_script(), []
    for script, spec in entry["scripts"].items():
        if spec is None:
            continue
        parser = script_module.parser_from_options(script, spec["options"])
        cli = tuner_cli(script, parser.format_help())
        listed = {flag[2:].replace("-", "_") for option in spec["options"] for flag in option["option_strings"]}
        if set(cli["options"]) != listed:
            problems.append(f"{script}: --help read as {sorted(cli['options'])}, its argparse has {sorted(listed)}")
        kernel = "down" if script == "tune_down_moe.py" else "up"
        for mode in ("tune",) if kernel == "down" else ("tune", "benchmark"):
            for sizes in size_runs([1, 8, 4096], cli):
                argv = tuner_command("/py", "/src/t", kernel=kernel, mode=mode, model_path="/m", tp_size=4, ep_size=2,
                                     tuner_args=["--dtype", "fp8_w8a8", "--disable-shared-experts-fusion"],
                                     batch_sizes=sizes, cli=cli, gate_up_config="/w/up.json", out_dir="/w/r",
                                     search_space_file="/w/s.json" if cli["search_space_file"] else None)
                try:
                    parsed = vars(parser.parse_args(argv[2:]))
                except SystemExit:
                    problems.append(f"{script} {mode}: its argparse refuses {argv[2:]}")
                    continue
                if (parsed.get("batch_sizes") or [parsed.get("batch_size")]) != sizes or parsed["tp_size"] != 4:
                    problems.append(f"{script} {mode}: {argv[2:]} parses to {parsed}")
    return problems
