# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What SGLang prints and accepts, per real release (issue #16 items 3, 4, 5, 7, 9; deliverable 3).

The checks (tests/conformance/release_checks.py) read each release's own artefacts from its PyPI wheel:
its real ``--help`` and option table (``ServerArgs.add_cli_args`` run with the heavy imports stubbed),
its ServerArgs fields, and its log calls' format strings; the support matrix is made of the same checks.
"""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_names import version_tuple
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import (
    deprecated_alias_warnings, parse_help_flags, validate_server_args)
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from tests.conformance.conftest import RELEASES, extracted
from tests.conformance.real_logs import templates
from tests.conformance.release_checks import CHECKS, DOWN, not_checked, real_log, run_check
from tests.conformance.release_cli import real_cli, real_options


@pytest.mark.parametrize("capability", list(CHECKS))
@pytest.mark.parametrize("version", RELEASES)
def test_capability_works_on_the_release(capability, version):
    reason = not_checked(capability, version)
    if reason:
        pytest.skip(reason)
    assert run_check(capability, version) == ()


@pytest.mark.parametrize("version", RELEASES)
def test_dump_format_is_the_releases(version):
    """0.5.10-0.5.17 log the dataclass repr (engine.py f"{server_args=}"), 0.5.20 resolved_dict(), 0.5.23
    _server_args_for_logging(): the log written from the release's call says which."""
    dump = next(line for line in real_log(version).splitlines() if "server_args=" in line).split("] ", 1)[1]
    assert dump.startswith("server_args={'model_path'" if version_tuple(version) >= (0, 5, 20) else "server_args=ServerArgs(model_path=")
    facts = parse_startup_log(real_log(version))
    assert len(facts["server_args"]) == len(real_cli(version)["fields"])


@pytest.mark.parametrize("version", RELEASES)
def test_piecewise_lines_exist_only_before_0_5_14(version):
    src = extracted(version)
    old = templates(src, "Disable piecewise CUDA graph because") + templates(src, "Capture piecewise CUDA graph end.")
    new = templates(src, "Disable prefill CUDA graph because")
    assert (bool(old), bool(new)) == ((True, False) if version_tuple(version) < (0, 5, 14) else (False, True))


@pytest.mark.parametrize("version", RELEASES)
def test_down_kernel_message(version):
    """0.5.16+ reuse the up config for a missing down file and say so; the parser records kernel down."""
    reuse = templates(extracted(version), "Down MoE config file not found at")
    assert bool(reuse) == (version_tuple(version) >= (0, 5, 16))
    facts = parse_startup_log(real_log(version))
    down = [entry for entry in facts["moe_configs"] if entry["kernel"] == "down"]
    assert [(entry["path"], entry["status"]) for entry in down] == [(DOWN, "missing")]
    assert down[0].get("reuses_up_config", False) == (version_tuple(version) >= (0, 5, 16))


@pytest.mark.parametrize("version", RELEASES)
def test_optional_value_and_star_options_are_accepted(version):
    """--model-checksum [MODEL_CHECKSUM] (nargs='?') and --lora-target-modules [{...} ...] (nargs='*')."""
    options, flags = real_options(version), parse_help_flags(real_cli(version)["help"])
    assert options["--model-checksum"]["nargs"] == "?" and options["--lora-target-modules"]["nargs"] == "*"
    assert validate_server_args({"model_checksum": True, "lora_target_modules": ["all"]}, flags) == []
    assert validate_server_args({"model_checksum": "/srv/checksums.json"}, flags) == []


@pytest.mark.parametrize("version", RELEASES)
def test_old_cuda_graph_names_per_release(version):
    """disable_piecewise_cuda_graph: 0.5.10/0.5.11 a flag, 0.5.14/0.5.17 a deprecated alias (warned,
    read as cuda_graph_backend_prefill=disabled), 0.5.20/0.5.23 gone: refused before any change, naming the new flag."""
    flags = parse_help_flags(real_cli(version)["help"])
    request = {"disable_piecewise_cuda_graph": True}
    errors, warnings = validate_server_args(request, flags), deprecated_alias_warnings(request, flags)
    if version_tuple(version) < (0, 5, 14):
        assert errors == [] and warnings == []
    elif version_tuple(version) < (0, 5, 20):
        assert errors == [] and len(warnings) == 1 and "--cuda-graph-backend-prefill=disabled" in warnings[0]
    else:
        assert warnings == [] and errors == [
            "server_args.disable_piecewise_cuda_graph: the installed SGLang has no --disable-piecewise-cuda-graph "
            "(a deprecated alias from 0.5.14, removed in 0.5.20); use --cuda-graph-backend-prefill=disabled "
            "(server_args `cuda_graph_backend_prefill: disabled`)"]


@pytest.mark.parametrize("version", RELEASES)
def test_moe_lines_the_releases_lookup_code_logs(version, tmp_path):
    """The release's own fused_moe_triton_config.py runs (tests/conformance/moe_checks.run_real) on a tree with an
    up file and no down file for one shape and nothing for another; what it logs, parsed, says which kernel's
    file was used or missing (item 5: 0.5.16+ reuse the up config for a missing down file and say so)."""
    from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import config_file_name
    from tests.conformance.moe_checks import DEVICE, run_real

    exact = tmp_path / "configs" / "triton_3_6_0"
    exact.mkdir(parents=True)
    (exact / config_file_name(8, 1792, DEVICE)).write_text('{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, '
                                                          '"BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, '
                                                          '"num_stages": 3}}')
    scenarios = [{"kind": "lookup", "triton": "3.6.0", "config_dir": str(tmp_path), "args": [e, n, None, 0, 0, False, down]}
                 for e, n in ((8, 1792), (64, 128)) for down in (False, True)]
    results = run_real(version, scenarios)
    text = "".join(f"[2026-11-30 10:00:00 TP0] {message}\n" for result in results for message in result["log"])
    entries = {(entry["kernel"], entry["path"].rsplit("/", 1)[-1]): entry for entry in parse_startup_log(text)["moe_configs"]}
    up, down = config_file_name(8, 1792, DEVICE), config_file_name(8, 1792, DEVICE).replace(".json", "_down.json")
    none_up = config_file_name(64, 128, DEVICE)
    none_down = none_up.replace(".json", "_down.json")
    assert {key: entry["status"] for key, entry in entries.items()} == {
        ("up", up): "used", ("down", down): "missing", ("up", none_up): "missing", ("down", none_down): "missing"}
    reuse = version_tuple(version) >= (0, 5, 16)
    assert entries[("down", down)].get("reuses_up_config", False) is reuse
    assert (results[1]["loaded"] is not None) is reuse  # the release really reused the up config
