# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What an installed, not yet serving, SGLang release will do with this host's deployment, before anything restarts:
the logic of ``llmops.sglang.sglang_upgrade_check``.

MoE configs: for each fused-MoE config file the deployment looks up (moe_targets, from the model's config.json, the
TP/EP sizes and the GPU), which tuned config the current and the new release load, from where, and which the new one
misses. Each release is asked with its own code: :data:`LOOKUP_PROGRAM` runs with the release's python, imports its
config module (the one the server uses), names the host's GPU to it (no CUDA device needed) and calls its
``get_config_file_name`` and ``get_moe_configs`` with the server's ``SGLANG_MOE_CONFIG_DIR``; the messages they log are
read by the startup-log parser, as the server's own would be. Where that import or call fails, the answer comes from
the collection's model of the release's rules (moe_rules.lookup), and ``source`` says which was used.

Carry or retune: a tuned config the new release would miss or only fall back to is carried to the directory the new
release reads when it was tuned for the new release's Triton (its ``triton_*`` directory) and both releases hold the
same kernel source (the hash moe_engine_key's host probe takes, the one the engine's cache keys on); otherwise it
must be retuned for the new release (:func:`config_action`).

Flags: the new release's ``launch_server --help`` against the server arguments the deployment uses (the names table,
sglang_names, through server_args.validate_server_args): options it no longer takes (removed or renamed, with the
replacement), and deprecated aliases it still reads.

Private to the llmops.sglang collection. Pure stdlib; commands run through ``run(argv, environ=...) -> (rc, out, err)``.
"""
from __future__ import annotations

import json
import os
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine_key import probe_host
from ansible_collections.llmops.sglang.plugins.module_utils.moe_install import config_roots
from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import triton_dir_for
from ansible_collections.llmops.sglang.plugins.module_utils.moe_rules import lookup as model_lookup
from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import moe_config_targets
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import (
    deprecated_alias_warnings, parse_help_flags, validate_server_args)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_env import CONFIG_MODULE_NAMES, probe_sglang
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log

# Runs with a release's python: argv[1] is {"device_name", "model_path", "targets": [{kernel, E, N, dtype,
# block_shape, per_channel_quant}]}; prints {"error", "lookups": [{file_name, messages, error}]}.
LOOKUP_PROGRAM = r"""
import importlib, inspect, json, logging, sys
request = json.loads(sys.argv[1])
out = {"error": None, "lookups": []}
class Messages(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []
    def emit(self, record):
        self.lines.append(record.getMessage())
try:
    config = None
    for name in %r:
        try:
            config = importlib.import_module(name)
            break
        except ImportError:
            pass
    if config is None:
        raise ImportError("no fused-MoE config module in this SGLang")
    # The host's GPU by name: the config module calls get_device_name(), which would need a CUDA device.
    config.get_device_name = lambda device_id=0: request["device_name"]
    if request.get("model_path"):  # the runtime context a server publishes, as SGLang's tuner does
        try:
            from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
            set_global_server_args_for_scheduler(ServerArgs(model_path=request["model_path"], tp_size=1))
        except Exception:
            pass
    messages = Messages()
    logger = logging.getLogger(config.__name__)
    logger.addHandler(messages)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    if not hasattr(logger, "warning_once"):
        logging.Logger.warning_once = logging.Logger.warning
    takes_down = "down_moe" in inspect.signature(config.get_config_file_name).parameters
    for target in request["targets"]:
        down = target["kernel"] == "down"
        entry = {"kernel": target["kernel"], "file_name": None, "messages": [], "error": None}
        messages.lines = []
        try:
            if down and not takes_down:
                raise TypeError("this release reads no separate down config file")
            block = target["block_shape"] or [0, 0]
            entry["file_name"] = config.get_config_file_name(target["E"], target["N"], target["dtype"],
                                                             target["block_shape"], target["per_channel_quant"],
                                                             **({"down_moe": True} if down else {}))
            config.get_moe_configs.cache_clear()
            config.get_moe_configs(target["E"], target["N"], target["dtype"], block[0], block[1],
                                   per_channel_quant=target["per_channel_quant"], **({"down_moe": True} if down else {}))
        except Exception as exc:
            entry["error"] = "%%s: %%s" %% (type(exc).__name__, exc)
        entry["messages"] = list(messages.lines)
        out["lookups"].append(entry)
except Exception as exc:
    out["error"] = "%%s: %%s" %% (type(exc).__name__, exc)
print(json.dumps(out))
""" % (CONFIG_MODULE_NAMES,)


class UpgradeCheckError(ValueError):
    """Bad input: the message names the option to fix."""


# --- MoE configs ------------------------------------------------------------------------------------------------


def deployment_targets(model_config: dict, server_args: dict, gpu_name: str, triton_version: str) -> list[dict]:
    """The up and down config files the deployment looks up (moe_targets), for its TP/EP sizes."""
    try:
        return moe_config_targets(model_config, int(server_args.get("tp_size") or 1),
                                  int(server_args.get("ep_size") or 1), gpu_name, triton_version,
                                  disable_shared_experts_fusion=bool(server_args.get("disable_shared_experts_fusion")))
    except (KeyError, ValueError) as exc:
        raise UpgradeCheckError(f"model_path: the MoE shape of this deployment cannot be derived ({exc})") from None


def _release_lookups(run, python: str, gpu_name: str, model_path: str | None, targets: list[dict],
                     moe_config_dir: str | None) -> tuple[list[dict] | None, str | None]:
    """(per target ``{status, path, triton_version, reuses_up_config, file_name}``, None) from the release's own
    code, or (None, why it could not be asked)."""
    request = {"device_name": gpu_name, "model_path": model_path,
               "targets": [{key: target[key] for key in ("kernel", "E", "N", "dtype", "block_shape")}
                           | {"per_channel_quant": False} for target in targets]}
    environ = {"SGLANG_MOE_CONFIG_DIR": moe_config_dir} if moe_config_dir else None
    rc, out, err = run([python, "-c", LOOKUP_PROGRAM, json.dumps(request)], environ=environ)
    try:
        answer = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, f"its lookup program failed (rc={rc}): {(err or out).strip()[-400:]}"
    if answer["error"]:
        return None, answer["error"]
    failed = [entry for entry in answer["lookups"] if entry["error"]]
    if failed:
        return None, f"{failed[0]['kernel']}: {failed[0]['error']}"
    return [_from_messages(entry) for entry in answer["lookups"]], None


def _from_messages(entry: dict) -> dict:
    """A lookup's outcome from the messages the release logged (the startup-log parser's reading)."""
    seen = [e for e in parse_startup_log("\n".join(entry["messages"]))["moe_configs"] if e["kernel"] == entry["kernel"]]
    if not seen:
        return {"file_name": entry["file_name"], "status": "unknown", "path": None, "reuses_up_config": False,
                "messages": entry["messages"]}
    found = seen[0]
    path = found["fallback_path"] if found["status"] == "fallback" else (
        found["path"] if found["status"] == "used" else None)
    return {"file_name": entry["file_name"], "status": found["status"], "path": path,
            "reuses_up_config": bool(found.get("reuses_up_config")), "messages": entry["messages"]}


def _model_lookups(run, python: str, targets: list[dict], moe_config_dir: str | None) -> list[dict]:
    """The same answers from the collection's model of the release's rules (moe_rules)."""
    roots = config_roots(run, python, moe_config_dir, None)
    triton_version = roots.triton_dir.removeprefix("triton_").replace("_", ".")
    results = []
    for target in targets:
        found = model_lookup(roots.root, triton_version, target["file_name"], roots.rules)
        results.append({"file_name": target["file_name"], "status": found["status"], "path": found["path"],
                        "reuses_up_config": False, "error": found["error"]})
    up = results[0] if targets[0]["kernel"] == "up" else None
    for target, result in zip(targets, results):
        if (target["kernel"] == "down" and result["status"] == "missing" and roots.rules["down_missing"] == "reuse_up"
                and up is not None and up["path"]):
            result["reuses_up_config"] = True
    return results


def release_lookups(run, python: str, gpu_name: str, model_path: str | None, targets: list[dict],
                    moe_config_dir: str | None) -> dict[str, Any]:
    """``{source, why_model, lookups}``: the release's own answer (``source: release``), else the model's."""
    lookups, problem = _release_lookups(run, python, gpu_name, model_path, targets, moe_config_dir)
    if lookups is not None:
        return {"source": "release", "why_model": None, "lookups": lookups}
    try:
        return {"source": "model", "why_model": problem, "lookups": _model_lookups(run, python, targets, moe_config_dir)}
    except ValueError as exc:
        raise UpgradeCheckError(f"the MoE config lookup of {python} could not be run ({problem}) nor modelled "
                                f"({exc})") from None


# What happens to a tuned config across the upgrade, from (current status, new status).
def verdict(current: dict, new: dict) -> str:
    """``kept`` (the new release loads a tuned config for its own Triton), ``fallback`` (only another Triton's:
    sub-optimal), ``lost`` (the current release loads one, the new one runs defaults), ``gained``, ``untuned``
    (neither loads one) or ``error`` (the new release raises during the lookup)."""
    tuned = ("used", "fallback")
    if new["status"] == "error":
        return "error"
    if new["status"] == "used":
        return "kept" if current["status"] in tuned else "gained"
    if new["status"] == "fallback":
        return "fallback"
    return "lost" if current["status"] in tuned else "untuned"


def config_action(row: dict, kernels: dict, new_triton: str) -> tuple[str, str | None]:
    """(``none`` | ``carry`` | ``retune``, why) for a row the new release would miss (``lost``) or only fall back on
    (``fallback``). A tuned config is valid for the Triton it was tuned with (the ``triton_*`` directory it lies in)
    and the kernel source it was tuned on (taken to be the current release's: the one that loads it): carried where
    both hold for the new release, else retuned, saying what changed."""
    if row["verdict"] not in ("lost", "fallback"):
        return "none", None
    tuned_dir = os.path.basename(os.path.dirname(row["current"]["path"] or ""))
    changed = []
    if tuned_dir != triton_dir_for(new_triton):
        changed.append(f"it was tuned for {tuned_dir or 'another Triton'}, the new release runs Triton {new_triton}")
    if not kernels["current"] or not kernels["new"]:
        changed.append("the kernel source of a release could not be read")
    elif kernels["current"] != kernels["new"]:
        changed.append(f"the fused-MoE kernel source changed ({kernels['current'][:12]} -> {kernels['new'][:12]})")
    if changed:
        return "retune", "; ".join(changed)
    return "carry", f"same Triton ({new_triton}) and kernel source ({kernels['new'][:12]})"


def moe_prediction(targets: list[dict], current: dict, new: dict, kernels: dict, new_triton: str) -> list[dict]:
    rows = []
    for target, before, after in zip(targets, current["lookups"], new["lookups"]):
        row = {"kernel": target["kernel"], "E": target["E"], "N": target["N"], "dtype": target["dtype"],
               "file_name": after["file_name"] or target["file_name"],
               "current": {key: before.get(key) for key in ("status", "path", "reuses_up_config")},
               "new": {key: after.get(key) for key in ("status", "path", "reuses_up_config")},
               "verdict": verdict(before, after)}
        row["action"], row["action_reason"] = config_action(row, kernels, new_triton)
        rows.append(row)
    return rows


def carry_plan(rows: list[dict]) -> list[dict]:
    """What to install for the new release, as llmops.sglang.moe_configs takes it (``src``: the config the current
    release loads, ``name``: the file name the new release looks up)."""
    return [{"src": row["current"]["path"], "name": row["file_name"]} for row in rows if row["action"] == "carry"]


def retune_plan(rows: list[dict]) -> list[dict]:
    return [{"kernel": row["kernel"], "E": row["E"], "N": row["N"], "dtype": row["dtype"],
             "file_name": row["file_name"], "why": row["action_reason"]} for row in rows if row["action"] == "retune"]


# --- flags ------------------------------------------------------------------------------------------------------


def help_flags(run, python: str, field: str) -> dict[str, dict]:
    rc, out, err = run([python, "-m", "sglang.launch_server", "--help"])
    if rc != 0:
        raise UpgradeCheckError(f"{field}: `{python} -m sglang.launch_server --help` failed (rc={rc}); is SGLang "
                                f"installed there? {(err or out).strip()[-400:]}")
    return parse_help_flags(out)


def flag_prediction(server_args: dict, current_flags: dict, new_flags: dict, new_version: str) -> dict[str, Any]:
    """What the new release says about the server arguments in use: ``errors`` (it refuses them: removed, renamed,
    unknown; each names the replacement), ``warnings`` (deprecated aliases it still reads), and the options it
    dropped or added compared with the current release."""
    return {"errors": validate_server_args(server_args, new_flags, version=new_version),
            "warnings": deprecated_alias_warnings(server_args, new_flags, version=new_version),
            "removed_options": sorted(current_flags[name]["flag"] for name in set(current_flags) - set(new_flags)),
            "added_options": sorted(new_flags[name]["flag"] for name in set(new_flags) - set(current_flags))}


# --- the whole prediction ---------------------------------------------------------------------------------------


def _probe(run, python: str, field: str) -> dict:
    try:
        return probe_sglang(run, python)
    except ValueError as exc:
        raise UpgradeCheckError(str(exc).replace("python:", f"{field}:", 1)) from None


def read_model_config(model_path: str) -> dict:
    path = os.path.join(model_path, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise UpgradeCheckError(f"model_path: cannot read {path} ({exc}); set it to the served model's directory") from None


def predict(run, params: dict) -> dict[str, Any]:
    """The module's result: versions, per MoE config what each release loads and the verdict, flag findings, and a
    summary; ``ready`` is false when the new release loses a tuned config or refuses an argument."""
    current_probe = _probe(run, params["current_python"], "current_python")
    new_probe = _probe(run, params["python"], "python")
    versions = {"current": current_probe["versions"], "new": new_probe["versions"]}
    if not new_probe["versions"]["triton"]:
        raise UpgradeCheckError(f"python: triton is not installed for {params['python']}; install the release with "
                                "llmops.sglang.sglang_release")
    targets = deployment_targets(read_model_config(params["model_path"]), params["server_args"], params["gpu_name"],
                                 new_probe["versions"]["triton"])
    lookup_args = (params["gpu_name"], params["model_path"], targets, params["moe_config_dir"])
    current = release_lookups(run, params["current_python"], *lookup_args)
    new = release_lookups(run, params["python"], *lookup_args)
    kernels = {side: probe_host(run, params[key]).get("kernel_source_sha256")
               for side, key in (("current", "current_python"), ("new", "python"))}
    moe = moe_prediction(targets, current, new, kernels, new_probe["versions"]["triton"])
    flags = flag_prediction(params["server_args"], help_flags(run, params["current_python"], "current_python"),
                            help_flags(run, params["python"], "python"), new_probe["versions"]["sglang"])
    for side, digest in kernels.items():
        versions[side] = {**versions[side], "kernel_source_sha256": digest}
    return {"changed": False, "versions": versions, "moe": moe, "carry": carry_plan(moe), "retune": retune_plan(moe),
            "lookup_source": {"current": current["source"], "new": new["source"]},
            "lookup_model_reason": {"current": current["why_model"], "new": new["why_model"]},
            "flags": flags, "ready": not flags["errors"] and not any(row["verdict"] in ("lost", "error") for row in moe),
            "summary": summary(versions, moe, flags, new["source"])}


def summary(versions: dict, moe: list[dict], flags: dict, source: str) -> list[str]:
    """One line per finding, in the operator's words."""
    old, new = versions["current"], versions["new"]
    answered = "release" if source == "release" else "collection's model of the release"
    lines = [f"sglang {old['sglang']} -> {new['sglang']}, triton {old['triton']} -> {new['triton']}, torch "
             f"{old['torch']} -> {new['torch']} (MoE lookup answered by the {answered})"]
    for row in moe:
        what = {"kept": f"loads {row['new']['path']}",
                "gained": f"loads {row['new']['path']} (the current release runs defaults)",
                "fallback": f"falls back to {row['new']['path']} (another Triton's: sub-optimal)",
                "lost": f"MISSES it: runs defaults where the current release loads {row['current']['path']}",
                "untuned": "runs defaults, as the current release does (never tuned)",
                "error": "fails during the lookup"}[row["verdict"]]
        if row["new"].get("reuses_up_config"):
            what += "; reuses the tuned up config for down"
        if row["action"] != "none":
            what += f"; {row['action'].upper()} it: {row['action_reason']}"
        lines.append(f"{row['kernel']} {row['file_name']}: {row['verdict']}: {what}")
    lines += [f"flag error: {error}" for error in flags["errors"]]
    lines += [f"flag warning: {warning}" for warning in flags["warnings"]]
    return lines
