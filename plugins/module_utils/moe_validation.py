# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Validation of fused-MoE Triton config JSON content (one document per kernel).

Private to the llmops.sglang collection; not a public API. Pure functions, stdlib only, so it imports on any
managed host with plain Python 3.11.
"""
from __future__ import annotations


_POWER_OF_TWO_RANGES = {"BLOCK_SIZE_M": (16, 256), "BLOCK_SIZE_N": (16, 256), "BLOCK_SIZE_K": (16, 256)}
_INT_RANGES = {"GROUP_SIZE_M": (1, 64), "num_stages": (1, 8), "waves_per_eu": (0, 8)}
_INT_CHOICES = {"num_warps": (1, 2, 4, 8, 16), "kpack": (1, 2)}
_REQUIRED_FIELDS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_OPTIONAL_FIELDS = ("USE_TMA", "waves_per_eu", "kpack")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field_error(field: str, value: object) -> str | None:
    if field == "USE_TMA":
        return None if isinstance(value, bool) else f"USE_TMA={value!r} is not a boolean"
    if not _is_int(value):
        return f"{field}={value!r} is not an integer"
    if field in _POWER_OF_TWO_RANGES:
        low, high = _POWER_OF_TWO_RANGES[field]
        if not (low <= value <= high and value & (value - 1) == 0):
            return f"{field}={value} is not a power of two in {low}..{high}"
    elif field in _INT_RANGES:
        low, high = _INT_RANGES[field]
        if not low <= value <= high:
            return f"{field}={value} is outside {low}..{high}"
    elif value not in _INT_CHOICES[field]:
        return f"{field}={value} is not one of {_INT_CHOICES[field]}"
    return None


def _entry_errors(entry: object) -> list[str]:
    if not isinstance(entry, dict):
        return [f"entry is {type(entry).__name__}, not an object"]
    errors = [f"missing {field}" for field in _REQUIRED_FIELDS if field not in entry]
    errors += [f"unknown key {key!r}" for key in entry if key not in _REQUIRED_FIELDS + _OPTIONAL_FIELDS]
    for field in _REQUIRED_FIELDS + _OPTIONAL_FIELDS:
        if field in entry and (error := _field_error(field, entry[field])):
            errors.append(error)
    return errors


def _is_batch_size_key(key: object) -> bool:
    return isinstance(key, str) and key.isdigit() and key == str(int(key)) and int(key) > 0


def validate_config(data: object, *, kernel: str) -> list[str]:
    """Errors in a parsed config JSON for the ``up`` or ``down`` kernel; empty means valid."""
    if kernel not in ("up", "down"):
        raise ValueError(f"kernel must be 'up' or 'down', not {kernel!r}")
    if not isinstance(data, dict):
        return [f"{kernel} config is {type(data).__name__}, not a JSON object of batch sizes"]
    if not data:
        return [f"{kernel} config has no batch-size entries"]
    errors = []
    for key, entry in data.items():
        if not _is_batch_size_key(key):
            errors.append(f"{kernel} config: key {key!r} is not a positive integer batch size")
            continue
        errors += [f"{kernel} config, batch size {key}: {error}" for error in _entry_errors(entry)]
    return errors
