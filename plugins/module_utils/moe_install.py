# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Installing fused-MoE config JSONs where SGLang reads them: validate all, back up, install
atomically, roll back, restore a backup, list what is installed.

Private to the llmops.sglang collection. Pure stdlib, so it runs on the managed hosts' python3.

Layout (sglang 0.5.11 python/sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py,
get_moe_configs): ``<root>/configs/triton_X_Y_Z/<name>.json`` where ``<root>`` is the
package's config module directory or ``SGLANG_MOE_CONFIG_DIR``. A backup directory holds
``manifest.json`` (every path the install touched, whether it replaced or created it, and the
directories it created) and ``files/`` (the replaced contents).
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, NamedTuple

from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import parse_config_file_name, triton_dir_for
from ansible_collections.llmops.sglang.plugins.module_utils.moe_validation import validate_config
from ansible_collections.llmops.sglang.plugins.module_utils.moe_rules import (
    block_m_pairs, default_block_m, fallback_order, lookup, moe_rules)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_env import Runner, probe_sglang

MANIFEST = "manifest.json"
NAME_FORMAT = "E=<E>,N=<N>,device_name=<gpu>[,dtype=...][,block_shape=[a, b]][,per_channel_quant=True][_down].json"


class ConfigRoots(NamedTuple):
    root: str  # the configs/ directory SGLang reads
    builtin: str  # the installed package's own configs/
    triton_dir: str
    rules: dict  # the installed SGLang's MoE config rules


def config_roots(run: Runner, python: str, config_dir: str | None, triton_dir: str | None) -> ConfigRoots:
    """Where the SGLang behind ``python`` reads fused-MoE configs (``config_dir``: a managed
    ``SGLANG_MOE_CONFIG_DIR``), the Triton directory (``triton_dir``, default the installed Triton's)
    and the release's lookup rules. Shared by moe_configs (install/restore) and moe_configs_info (list)."""
    probe = probe_sglang(run, python)
    if probe["config_module_dir"] is None:
        raise ValueError(f"python: the SGLang of {python} has no fused_moe_triton_config module; set config_dir")
    builtin = os.path.join(probe["config_module_dir"], "configs")
    if not triton_dir:
        if not probe["versions"]["triton"]:
            raise ValueError(f"triton_dir: triton is not installed for {python}; set triton_dir")
        triton_dir = triton_dir_for(probe["versions"]["triton"])
    root = os.path.join(config_dir, "configs") if config_dir else builtin
    return ConfigRoots(root, builtin, triton_dir, moe_rules(probe["versions"]["sglang"]))


@dataclass
class RequestedConfig:
    label: str  # where it came from, for messages: "configs[0] (/root/x.json)"
    name: str
    content: bytes


@dataclass
class Change:
    path: str
    content: bytes
    before: bytes | None  # None: the file does not exist yet


def read_requested(configs: list[dict]) -> list[RequestedConfig]:
    """The ``configs`` option as names and bytes; ``{src}`` files are read from this host."""
    requested = []
    for index, item in enumerate(configs):
        label = f"configs[{index}]"
        if item.get("src") and item.get("content") is None:
            try:
                with open(item["src"], "rb") as handle:
                    content = handle.read()
            except OSError as exc:
                raise ValueError(f"{label}.src: cannot read {item['src']}: {exc.strerror}") from None
            name = item.get("name") or os.path.basename(item["src"])
            requested.append(RequestedConfig(f"{label} ({item['src']})", name, content))
        elif item.get("name") and isinstance(item.get("content"), dict) and not item.get("src"):
            content = (json.dumps(item["content"], indent=4) + "\n").encode()
            requested.append(RequestedConfig(f"{label} ({item['name']})", item["name"], content))
        else:
            raise ValueError(f"{label}: give either src (a JSON file on the host) or name + content (a mapping)")
    return requested


def validation_report(requested: list[RequestedConfig], rules: dict, install_dir: str | None = None,
                      triton_dir: str | None = None) -> tuple[list[str], list[str]]:
    """(errors, warnings) for installing this set under ``install_dir`` for the release ``rules`` describe
    (:func:`moe_rules.moe_rules`). Errors are every reason not to install; empty means all files may go in.

    An up file and its ``_down`` file (given together, or one given and the other already installed) are
    compared as the server pairs them: for every token count the nearest key of each file. Where they pick a
    different BLOCK_SIZE_M the release either asserts (the server dies at its first forward: refused) or
    overrides the down value (a warning). A down file without an up file is paired with SGLang's default config.
    """
    errors: list[str] = []
    parsed: dict[str, dict] = {}
    seen: set[str] = set()
    for config in requested:
        if config.name in seen:
            errors.append(f"{config.label}: {config.name} is given twice")
        seen.add(config.name)
        fields = parse_config_file_name(config.name)
        if fields is None or os.path.basename(config.name) != config.name:
            errors.append(f"{config.label}: {config.name!r} is not a fused-MoE config file name ({NAME_FORMAT})")
            continue
        try:
            data = json.loads(config.content)
        except ValueError as exc:
            errors.append(f"{config.label}: not valid JSON: {exc}")
            continue
        kernel_errors = validate_config(data, kernel="down" if fields["down"] else "up")
        errors += [f"{config.label}: {error}" for error in kernel_errors]
        if not kernel_errors:
            parsed[config.name] = data
    if triton_dir and requested:
        try:
            fallback_order(rules, "", [triton_dir])
        except ValueError as exc:
            errors.append(f"triton_dir: {exc}; install under a triton_X_Y_Z name")
    warnings: list[str] = []
    for name, down in parsed.items():
        if not name.endswith("_down.json"):
            continue
        up_name = name.removesuffix("_down.json") + ".json"
        if up_name in seen and up_name not in parsed:
            continue  # the up file itself is refused above
        up = parsed.get(up_name) if up_name in seen else _up_the_server_loads(install_dir, up_name, rules)
        problems = _pair_problems(name, up, down, rules)
        (errors if rules["block_m_mismatch"] == "assert" else warnings).extend(problems)
    return errors, warnings


def _pair_problems(down_name: str, up: dict | None, down: dict, rules: dict) -> list[str]:
    """The token counts where the server would pair different BLOCK_SIZE_M, said as the release handles it."""
    fields = parse_config_file_name(down_name)
    mismatches = block_m_pairs(
        up, down, lambda m: default_block_m(m, fields["E"], fields["dtype"], fields["block_shape"]))
    if not mismatches:
        return []
    up_label = "its up file" if up is not None else "SGLang's default up config (no up file is given or installed)"
    where = "; ".join(f"from M={m} up {up_m} vs down {down_m}" for m, up_m, down_m in mismatches[:6])
    where += f" (and {len(mismatches) - 6} more)" if len(mismatches) > 6 else ""
    if rules["block_m_mismatch"] == "assert":
        consequence = (f"sglang {rules['version']} asserts they are equal (try_get_optimal_moe_config), so the server "
                       "would crash at its first forward; tune the down kernel with this up file as gate_up_config")
    else:
        consequence = f"sglang {rules['version']} overrides the down value with the up one (a warning, slower down GEMM)"
    return [f"{down_name}: BLOCK_SIZE_M differs from {up_label}: {where}; {consequence}"]


def _up_the_server_loads(install_dir: str | None, name: str, rules: dict) -> dict | None:
    """The installed up config the release would load for ``name`` (exact or fallback dir), None for none."""
    if not install_dir:
        return None
    configs_root, triton_dir = os.path.split(install_dir)
    found = lookup(configs_root, triton_dir.removeprefix("triton_").replace("_", "."), name, rules)
    content = read_bytes(found["path"]) if found["path"] else None
    try:
        data = json.loads(content) if content is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) and not validate_config(data, kernel="up") else None


def install_changes(install_dir: str, requested: list[RequestedConfig]) -> list[Change]:
    """One change per requested file whose content differs from what is installed."""
    changes = []
    for config in requested:
        path = os.path.join(install_dir, config.name)
        before = read_bytes(path)
        if before != config.content:
            changes.append(Change(path, config.content, before))
    return changes


def seed_changes(builtin_configs: str, managed_configs: str) -> list[Change]:
    """The package's built-in ``triton_*`` files for a managed ``SGLANG_MOE_CONFIG_DIR`` used for the
    first time. With the variable set SGLang no longer searches the package, so without them every
    shape that has a built-in config would fall back to SGLang's default config."""
    if os.path.isdir(managed_configs) or not os.path.isdir(builtin_configs):
        return []
    changes = []
    for triton_dir in sorted(os.listdir(builtin_configs)):
        source_dir = os.path.join(builtin_configs, triton_dir)
        if not triton_dir.startswith("triton_") or not os.path.isdir(source_dir):
            continue
        for name in sorted(os.listdir(source_dir)):
            source = os.path.join(source_dir, name)
            if os.path.isfile(source):
                changes.append(Change(os.path.join(managed_configs, triton_dir, name), read_bytes(source), None))
    return changes


def read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _missing_dirs(paths: list[str]) -> list[str]:
    """Directories that must be created for ``paths``, parents first."""
    missing: list[str] = []
    for path in paths:
        directory = os.path.dirname(path)
        chain = []
        while directory and not os.path.isdir(directory) and directory not in missing:
            chain.append(directory)
            directory = os.path.dirname(directory)
        missing += reversed(chain)
    return missing


def _new_backup_dir(backup_root: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    path = os.path.join(backup_root, stamp)
    os.makedirs(os.path.join(path, "files"))
    return path


def apply_changes(changes: list[Change], backup_root: str, keep_backup: bool,
                  before_install: Callable[[str], None] | None = None) -> str | None:
    """Back up, then install every change atomically; on any failure restore everything and raise.

    ``before_install(backup_dir)`` runs between the complete backup and the first change (the host's guard learns
    what to put back); when it raises, the backup goes and nothing is installed.
    Returns the backup directory (None when ``keep_backup`` is false and all went well).
    """
    backup_dir = _new_backup_dir(backup_root)
    entries = []
    for index, change in enumerate(changes):
        backup = None
        if change.before is not None:
            backup = os.path.join("files", str(index))
            write_atomically(os.path.join(backup_dir, backup), change.before)
        entries.append({"path": change.path, "backup": backup})
    manifest = {"entries": entries, "created_dirs": _missing_dirs([change.path for change in changes])}
    write_atomically(os.path.join(backup_dir, MANIFEST), (json.dumps(manifest, indent=2) + "\n").encode())
    if before_install is not None:
        try:
            before_install(backup_dir)
        except BaseException:
            shutil.rmtree(backup_dir)
            raise
    for change in changes:
        try:
            os.makedirs(os.path.dirname(change.path), exist_ok=True)
            write_atomically(change.path, change.content)
        except OSError as exc:
            raise ValueError(_install_failure(change.path, exc, backup_dir)) from None
    if keep_backup:
        return backup_dir
    shutil.rmtree(backup_dir)
    return None


def _install_failure(path: str, error: OSError, backup_dir: str) -> str:
    """Restore what the install changed; the message says what failed, and, when restoring failed too (the same full
    disk), that error and where the backup is: the backup is then all that holds the replaced files."""
    try:
        restore_backup(backup_dir)
    except (OSError, ValueError) as restore_error:
        return (f"installing {path} failed ({error}), and restoring failed too ({restore_error}): the config "
                f"directory may hold a part of the new files; the backup is {backup_dir} (its manifest.json lists every "
                f"file); once the cause is fixed, put it back with moe_configs state=restored backup_dir={backup_dir}")
    return f"installing {path} failed ({error}); every file was restored from the backup {backup_dir}"


def read_manifest(backup_dir: str) -> dict:
    """A backup's manifest: ``entries`` (``path``, ``backup`` relative to the backup dir or None when the
    install created the file) and ``created_dirs``."""
    try:
        with open(os.path.join(backup_dir, MANIFEST), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError(f"backup_dir: {backup_dir} is not a moe_configs backup ({exc})") from None


def restore_backup(backup_dir: str, check_mode: bool = False) -> dict:
    """Put the files a backup recorded back exactly: replaced files get their old content, created
    files and directories are removed. Running it twice changes nothing the second time."""
    manifest = read_manifest(backup_dir)
    restored, removed = [], []
    for entry in reversed(manifest["entries"]):
        path = entry["path"]
        if entry["backup"] is None:
            if os.path.isfile(path):
                removed.append(path)
                if not check_mode:
                    os.remove(path)
            continue
        old = read_bytes(os.path.join(backup_dir, entry["backup"]))
        if read_bytes(path) != old:
            restored.append(path)
            if not check_mode:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                write_atomically(path, old)
    gone, removed_dirs = set(removed), []
    for directory in reversed(manifest["created_dirs"]):  # deepest first
        if os.path.isdir(directory) and all(os.path.join(directory, name) in gone for name in os.listdir(directory)):
            gone.add(directory)
            removed_dirs.append(directory)
            if not check_mode:
                os.rmdir(directory)
    return {"restored": restored, "removed": removed + removed_dirs, "changed": bool(restored or removed or removed_dirs)}


def list_configs(configs_root: str) -> dict[str, list[dict]]:
    """Every ``triton_*`` directory under ``configs_root`` with its fused-MoE files parsed."""
    listing: dict[str, list[dict]] = {}
    if not os.path.isdir(configs_root):
        return listing
    for triton_dir in sorted(os.listdir(configs_root)):
        directory = os.path.join(configs_root, triton_dir)
        if not triton_dir.startswith("triton_") or not os.path.isdir(directory):
            continue
        listing[triton_dir] = [
            {"file_name": name, "kernel": "down" if fields["down"] else "up",
             **{key: fields[key] for key in ("E", "N", "device_name", "dtype", "block_shape", "per_channel_quant")}}
            for name in sorted(os.listdir(directory))
            if (fields := parse_config_file_name(name)) is not None
        ]
    return listing
