# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Where the installed release keeps its fused-MoE config module, and the module itself.

The real wheels moved it between 0.5.10 and 0.5.11: PyPI sglang 0.5.10 has
`sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py` (its `configs/triton_*` beside it, newest
`triton_3_5_1`), 0.5.11 `sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py`. The source tree
has the new location; tests/emulator/build.py moves the module of a release older than :data:`MOVED_IN` into the old
one, so that release's lookup, its `configs/` and what a probe of it finds are where the real release has them.
"""
from __future__ import annotations

import importlib
from types import ModuleType

MOVED_IN = (0, 5, 11)
CONFIG_MODULE = "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config"
OLD_CONFIG_MODULE = "sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_config"


def config_module() -> ModuleType:
    """The installed release's config module (the new location first, as the collection's probe asks)."""
    try:
        return importlib.import_module(CONFIG_MODULE)
    except ModuleNotFoundError as exc:
        if not CONFIG_MODULE.startswith(f"{exc.name}."):  # a package on its path is absent: the old layout
            raise
    return importlib.import_module(OLD_CONFIG_MODULE)
