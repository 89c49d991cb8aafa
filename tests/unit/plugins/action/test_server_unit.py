# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The unit llmops.sglang.server renders: canonical command line (reordered args, same unit), the API key never in
it, the hardening the GPU server needs."""
from __future__ import annotations

import itertools

import jinja2
import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action.server import (
    DEFAULT_DEVICE_ALLOW, DEFAULT_LAUNCHER_PATH, DEFAULT_TEMPLATE, server_command)
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import parse_help_flags
from ansible_collections.llmops.sglang.plugins.module_utils._unit_file import exec_start_argv, unit_setting
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_unit import template_variables

ARGS = {"tp_size": 4, "speculative_algorithm": "NEXTN", "enable_fused_moe_sum_all_reduce": True,
        "cuda_graph_bs": [1, 2, 4], "max_running_requests": None, "mem_fraction_static": 0.8}


def render(server_args: dict, api_key: str | None = None, **overrides) -> str:
    """The default template rendered with the variables the action plugin passes (plain Jinja, same filters)."""
    args = {"name": "sglang", "model_path": "/srv/models/m", "port": 30000, "server_args": server_args,
            "api_key": api_key, "environment": {"CUDA_VISIBLE_DEVICES": "0,1"}, **overrides}
    template = jinja2.Environment(keep_trailing_newline=True, trim_blocks=True).from_string(DEFAULT_TEMPLATE.read_text())
    return template.render(template_variables(args, server_command(args), DEFAULT_DEVICE_ALLOW))


def test_command_is_canonical_model_host_port_first_then_flags_sorted():
    command = server_command({"model_path": "/srv/models/m", "server_args": ARGS})
    assert command[:3] == ["/opt/sglang/venv/bin/python", DEFAULT_LAUNCHER_PATH, "sglang.launch_server"]
    assert command[3:9] == ["--model-path", "/srv/models/m", "--host", "127.0.0.1", "--port", "30000"]
    flags = [a for a in command[9:] if a.startswith("--")]
    assert flags == sorted(flags) == ["--cuda-graph-bs", "--enable-fused-moe-sum-all-reduce",
                                      "--mem-fraction-static", "--speculative-algorithm", "--tp-size"]
    assert command[command.index("--cuda-graph-bs") + 1:][:3] == ["1", "2", "4"], "a list keeps its own order"


# Lines of `python -m sglang.launch_server --help` of the 0.5.23 wheel (tests/conformance/release_cli.py): a three-state
# flag (argparse BooleanOptionalAction, arg_groups/fields/exec_.py lines 45-53) and a plain switch.
HELP_0523 = """  --enable-tf32-matmul, --no-enable-tf32-matmul
                        Enable float32 matmuls to use TensorFloat32 precision for better
                        performance (via torch.set_float32_matmul_precision). CUDA only. Defaults
                        to the model's preference, otherwise disabled.
  --enable-fused-moe-sum-all-reduce
"""


def test_false_of_a_three_state_flag_is_spelled_out_where_the_host_lists_it():
    server_args = {"enable_tf32_matmul": False, "enable_fused_moe_sum_all_reduce": False}
    args = {"model_path": "/srv/models/m", "server_args": server_args}
    assert server_command(args, parse_help_flags(HELP_0523))[9:] == ["--no-enable-tf32-matmul"]
    assert server_command(args)[9:] == [], "without the host's flags false is left out"


def test_the_same_args_in_any_order_render_the_same_unit():
    units = {render(dict(order)) for order in itertools.permutations(ARGS.items())}
    assert len(units) == 1


def test_the_key_is_never_in_the_unit_only_the_credential_is():
    with_key = render(ARGS, api_key="sk-never-in-unit")
    assert "sk-never-in-unit" not in with_key and "--api-key" not in with_key and "SGLANG_API_KEY" not in with_key
    assert "LoadCredential=sglang-api-key:/etc/sglang/sglang.env" in with_key
    assert "EnvironmentFile" not in with_key
    assert "LoadCredential" not in render(ARGS)


@pytest.mark.parametrize("secret", ["api_key", "admin_api_key"])
def test_a_secret_in_server_args_is_refused(secret):
    with pytest.raises(AnsibleActionFail, match=f"server_args.{secret}: .*`api_key` option"):
        server_command({"model_path": "/srv/models/m", "server_args": {**ARGS, secret: "k"}})


def test_hardening_of_a_gpu_server():
    unit = render(ARGS)
    lines = set(unit.splitlines())
    for expected in ("User=sglang", "CapabilityBoundingSet=", "NoNewPrivileges=yes", "ProtectSystem=strict",
                     "ProtectHome=yes", "PrivateTmp=yes", "DevicePolicy=closed", "DeviceAllow=/dev/nvidiactl rw",
                     "DeviceAllow=/dev/nvidia-uvm rw", "DeviceAllow=char-nvidia-frontend rw",
                     "ReadOnlyPaths=-/srv/models/m", "StateDirectory=sglang", "CacheDirectory=sglang",
                     "Environment=HOME=/var/lib/sglang", "Environment=HF_HOME=/var/cache/sglang/huggingface",
                     "Environment=TRITON_CACHE_DIR=/var/cache/sglang/triton", "SystemCallArchitectures=native",
                     "RestrictNamespaces=yes", "WantedBy=multi-user.target"):
        assert expected in lines, expected
    # CUDA needs W+X memory and libcuda reads /proc/driver/nvidia.
    assert not any(line.startswith(("MemoryDenyWriteExecute=", "ProcSubset=")) for line in lines)
    # The operator's environment comes after the defaults, so it wins (systemd: the last assignment counts).
    assert unit.index("Environment=HOME=") < unit.index('Environment="CUDA_VISIBLE_DEVICES=0,1"')


def test_a_server_that_keeps_failing_is_given_up_after_a_few_starts():
    """Restart=on-failure with no start limit crash-loops for good (after a reboot too): systemd gives up after 5
    starts in an hour; a deploy resets the count before its own restart (tests/unit/plugins/modules/test_server_deploy_faults)."""
    unit = render(ARGS)
    assert unit_setting(unit, "Restart") == "on-failure"
    assert unit_setting(unit, "StartLimitIntervalSec") == "1h" and unit_setting(unit, "StartLimitBurst") == "5"


def test_hard_values_are_quoted_by_each_settings_syntax():
    """Spaces, quotes, backslashes, % and $ reach systemd as written; the settings stay one line each."""
    model = "/srv/my models/it's 100% $HOME"
    unit = render({"chat_template": 'a "b" \\n %n $x'}, model_path=model,
                  environment={"A": 'q "x" \\ 50%'}, read_write_paths=["/srv/out dir"])
    assert exec_start_argv(unit)[exec_start_argv(unit).index("--model-path") + 1] == model
    assert exec_start_argv(unit)[-1] == 'a "b" \\n %n $x'
    lines = unit.splitlines()
    assert "Description=SGLang server sglang (/srv/my models/it's 100%% $HOME)" in lines
    assert "ReadOnlyPaths='-/srv/my models/it\\'s 100%% $HOME'" in lines
    assert "ReadWritePaths='-/srv/out dir'" in lines
    assert 'Environment="A=q \\"x\\" \\\\ 50%%"' in lines


def test_a_unit_of_ordinary_values_renders_as_before():
    """Values without special characters render byte for byte as the earlier template did: no restart on upgrade
    (beyond the start limit's lines)."""
    lines = render(ARGS).splitlines()
    for expected in ("Description=SGLang server sglang (/srv/models/m)", 'Environment="CUDA_VISIBLE_DEVICES=0,1"',
                     "ReadOnlyPaths=-/srv/models/m", "ExecStart=/opt/sglang/venv/bin/python "
                     "/usr/local/libexec/llmops-sglang/sglang_launcher.py sglang.launch_server --model-path "
                     "/srv/models/m --host 127.0.0.1 --port 30000 --cuda-graph-bs 1 2 4 "
                     "--enable-fused-moe-sum-all-reduce --mem-fraction-static 0.8 --speculative-algorithm NEXTN "
                     "--tp-size 4"):
        assert expected in lines, expected
