# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Run a real SGLang release's fused-MoE config lookup on scenarios, from the release's own code.

``python real_moe_lookup.py CONFIG_MODULE_FILE`` with a JSON list of scenarios on stdin; prints a JSON list
of results. The release's ``fused_moe_triton_config.py`` (its ``get_config_file_name``, ``get_moe_configs``
and ``try_get_optimal_moe_config``) runs unchanged; only what it imports is stubbed: ``torch`` (no CUDA),
``triton`` (``__version__`` from the scenario), ``get_device_name``, ``is_hip``, the server args / runtime
context (deterministic inference off) and ``get_config`` (no override config).

A scenario: ``{"kind": "name", "args": [E, N, dtype, block_shape, per_channel_quant, down]}``,
``{"kind": "lookup", "triton": "3.6.0", "config_dir": DIR, "args": [E, N, dtype, block_n, block_k, pcq, down]}``
(result: ``{"loaded": {...} | None, "log": [messages], "error": str | None}``) or
``{"kind": "pair", "triton": ..., "config_dir": DIR, "E": .., "N": .., "dtype": .., "M": m}`` (calls
``try_get_optimal_moe_config(..., return_down_config=True)``; result ``{"up_m", "down_m", "error"}``).
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import types


class _Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _module(name: str, **attributes) -> types.ModuleType:
    module = sys.modules.get(name) or types.ModuleType(name)
    module.__path__ = []
    for key, value in attributes.items():
        setattr(module, key, value)
    sys.modules[name] = module
    return module


def _install_stubs(device_name: str) -> types.ModuleType:
    class _Cuda:
        @staticmethod
        def is_available() -> bool:
            return False

    _module("torch", float=object(), dtype=type("dtype", (), {}), cuda=_Cuda())
    triton = _module("triton", __version__="0.0.0")
    settings = types.SimpleNamespace(enable_deterministic_inference=False)
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.moe",
                 "sglang.srt.layers.moe.moe_runner"):
        _module(name)
    _module("sglang.srt.server_args", get_global_server_args=lambda: settings)
    _module("sglang.srt.runtime_context", get_exec=lambda: types.SimpleNamespace(deterministic=settings),
            get_server_args=lambda: settings)
    _module("sglang.srt.utils", get_device_name=lambda device_id=0: device_name, is_hip=lambda: False)
    for name in ("sglang.srt.layers.moe.moe_runner.triton_utils", "sglang.srt.layers.moe.fused_moe_triton"):
        _module(name, get_config=lambda: None)
    # sglang adds warning_once to its loggers (sglang/srt/utils); plain logging has none.
    logging.Logger.warning_once = logging.Logger.warning
    return triton


def main() -> None:
    path = sys.argv[1]
    scenarios = json.load(sys.stdin)
    triton = _install_stubs(os.environ.get("DEVICE_NAME", "NVIDIA H200"))
    spec = importlib.util.spec_from_file_location("real_fused_moe_triton_config", path)
    real = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real)
    logs = _Logs()
    logging.getLogger(real.__name__).addHandler(logs)
    logging.getLogger(real.__name__).setLevel(logging.DEBUG)
    results = []
    for scenario in scenarios:
        logs.messages.clear()
        real.get_moe_configs.cache_clear()
        triton.__version__ = scenario.get("triton", "0.0.0")
        if scenario.get("config_dir"):
            os.environ["SGLANG_MOE_CONFIG_DIR"] = scenario["config_dir"]
        else:  # the release's own configs/ next to its module
            os.environ.pop("SGLANG_MOE_CONFIG_DIR", None)
        result: dict = {"error": None}
        try:
            if scenario["kind"] == "name":
                result["name"] = real.get_config_file_name(*scenario["args"][:5], down_moe=scenario["args"][5])
            elif scenario["kind"] == "lookup":
                *args, down = scenario["args"]
                loaded = real.get_moe_configs(*args, down_moe=down)
                result["loaded"] = None if loaded is None else {str(key): value for key, value in loaded.items()}
            else:
                e, n, m = scenario["E"], scenario["N"], scenario["M"]
                up, (down, _) = real.try_get_optimal_moe_config(
                    (e, 2 * n, 1024), (e, 1024, n), 8, scenario.get("dtype"), m, return_down_config=True)
                result.update(up_m=up["BLOCK_SIZE_M"], down_m=None if down is None else down["BLOCK_SIZE_M"])
        except Exception as exc:  # pylint: disable=broad-except
            result["error"] = f"{type(exc).__name__}: {exc}"
        result["log"] = list(logs.messages)
        results.append(result)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
