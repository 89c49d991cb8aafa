# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""An SGLang release installed into a versioned virtualenv of its own, beside the one serving: the logic of
``llmops.sglang.sglang_release``.

A release is never changed in place (the old venv stays intact for a rollback, a new one may be serving): a venv
is created once for one request (the SGLang version, and the Triton/torch versions the user names, else the ones
the release pins), from the index or from a wheelhouse directory (air-gapped fleets: ``pip install --no-index
--find-links DIR``), and records what pip installed (``pip freeze``) in :data:`MANIFEST_NAME`. That manifest makes the
venv ours: the same request again changes nothing; any other request, or a venv without it, is refused before
anything changes. Switching the server to the release is pointing its ``sglang_python`` at the venv's python.

Private to the llmops.sglang collection. Pure stdlib; commands run through the module's
``command_runner.CommandRunner`` (``run(argv, changes=..., check=...)``).
"""
from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import zipfile
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandError

MANIFEST_NAME = "llmops-release.json"
MANAGED_BY = "llmops.sglang.sglang_release"
# The distributions a request pins: the release, and the two whose versions decide its kernels and config lookup.
PINNED = ("sglang", "triton", "torch")
_VERSION = re.compile(r"^\d+(?:\.\d+)+(?:(?:a|b|rc|\.post|\.dev)\d+)?(?:\+[\w.]+)?$")
# Wheel and sdist file names (PEP 427 / PEP 625): name and version are the first two dash-separated parts.
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")
_SDIST = re.compile(r"^(?P<name>.+)-(?P<version>[^-]+)\.(?:tar\.gz|zip)$")
# `Requires-Dist: triton==3.9.0` (a plain pin, no environment marker) in a wheel's METADATA.
_PIN = re.compile(r"^Requires-Dist:\s*(?P<name>[A-Za-z0-9_.-]+)\s*(?:\[[^\]]*\])?\s*\(?==\s*(?P<version>[^\s,;)]+)\)?\s*$")
# pip: "Could not find a version that satisfies the requirement sglang==0.5.99 (from versions: 0.5.10, 0.5.11)".
_PIP_NOT_FOUND = re.compile(r"satisfies the requirement (?P<name>[A-Za-z0-9_.-]+)==(?P<version>\S+) "
                            r"\(from versions: (?P<versions>[^)]*)\)")


class ReleaseError(ValueError):
    """Bad input or a refused venv: the message names the option to fix and how."""


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def request_of(params: dict) -> dict[str, Any]:
    """What is asked for: the versions to pin (None: the release's own pin) and where the packages come from."""
    errors = [f"{field}: {params[field]!r} is not a version (e.g. {example})"
              for field, example in (("version", "0.5.23"), ("triton", "3.6.0"), ("torch", "2.9.1"))
              if params.get(field) is not None and not _VERSION.match(str(params[field]))]
    if errors:
        raise ReleaseError("; ".join(errors))
    source = ({"wheelhouse": params["wheelhouse"]} if params.get("wheelhouse")
              else {"index_url": params.get("index_url")})
    return {"versions": {"sglang": params["version"], "triton": params.get("triton"), "torch": params.get("torch")},
            "source": source}


def venv_path(params: dict) -> str:
    return params.get("venv") or os.path.join(params["venvs_dir"], params["version"])


def read_manifest(venv: str) -> dict | None:
    try:
        with open(os.path.join(venv, MANIFEST_NAME), encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("managed_by") == MANAGED_BY else None


def _describe(versions: dict) -> str:
    pins = [f"{name} {versions[name]}" for name in PINNED if versions.get(name)]
    return " with ".join([pins[0], ", ".join(pins[1:])]) if len(pins) > 1 else pins[0]


def existing_venv(venv: str, request: dict) -> dict | None:
    """The manifest of the venv when it already holds this request (nothing to do), None when there is no venv or
    an unfinished install of ours to redo. Raises ReleaseError for a venv that is not ours or holds another request."""
    if not os.path.lexists(venv):
        return None
    manifest = read_manifest(venv)
    if manifest is None:
        raise ReleaseError(f"venv: {venv} exists and was not made by {MANAGED_BY} (it has no {MANIFEST_NAME}); "
                           "set venv (or venvs_dir) to another path, or move that directory away")
    if manifest.get("state") != "installed":
        return None  # an install of ours that did not finish: redone from scratch
    if manifest["request"]["versions"] != request["versions"]:
        have = manifest["request"]["versions"]
        raise ReleaseError(
            f"venv: {venv} holds {_describe(have)} (its {MANIFEST_NAME}), not the requested "
            f"{_describe(request['versions'])}; an installed release is never changed in place (it may be serving or "
            "be the rollback), so set venv to another path")
    return manifest


# --- the wheelhouse ---------------------------------------------------------------------------------------------


def wheelhouse_files(directory: str) -> dict[str, dict[str, list[str]]]:
    """``{distribution: {version: [file names]}}`` of the wheels and sdists in ``directory``."""
    found: dict[str, dict[str, list[str]]] = {}
    for name in sorted(os.listdir(directory)):
        match = _WHEEL.match(name) or _SDIST.match(name)
        if match:
            found.setdefault(normalize(match.group("name")), {}).setdefault(match.group("version"), []).append(name)
    return found


def release_pins(wheel: str) -> dict[str, str]:
    """``{distribution: version}`` a wheel pins exactly (``Requires-Dist: name==version`` without a marker)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
        text = archive.read(metadata).decode("utf-8", "replace") if metadata else ""
    return {normalize(m.group("name")): m.group("version") for m in map(_PIN.match, text.splitlines()) if m}


def _versions_text(versions: dict[str, list[str]]) -> str:
    return ", ".join(sorted(versions, key=_version_key)) or "none"


def _version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else 0 for part in re.split(r"[.+-]", version))


def plan_from_wheelhouse(directory: str, request: dict) -> dict[str, Any]:
    """What the wheelhouse installs for the request: ``{sglang, triton, torch}`` (a version and where it comes from:
    ``requested``, ``pinned by sglang X``, or None when neither says). Raises ReleaseError naming the field."""
    if not os.path.isdir(directory):
        raise ReleaseError(f"wheelhouse: {directory} is not a directory on the host; set it to the directory holding "
                           "the release's wheels (pip's --find-links), or leave it unset to install from the index")
    files = wheelhouse_files(directory)
    wanted = request["versions"]
    sglang = files.get("sglang", {})
    if wanted["sglang"] not in sglang:
        raise ReleaseError(f"version: the wheelhouse {directory} has no sglang {wanted['sglang']} (it has sglang "
                           f"{_versions_text(sglang)}); add that release's wheel to the wheelhouse or set version to one "
                           "it has")
    wheels = [name for name in sglang[wanted["sglang"]] if name.endswith(".whl")]
    pins = release_pins(os.path.join(directory, wheels[0])) if wheels else {}
    plan: dict[str, Any] = {"sglang": {"version": wanted["sglang"], "from": "requested"}}
    for name in PINNED[1:]:
        pinned, requested = pins.get(name), wanted[name]
        if requested and pinned and requested != pinned:
            raise ReleaseError(f"{name}: sglang {wanted['sglang']} pins {name}=={pinned}, so {name} {requested} cannot "
                               f"be installed with it; leave {name} unset to take the release's pin")
        version = requested or pinned
        if version and version not in files.get(name, {}):
            field = name if requested else "wheelhouse"
            raise ReleaseError(f"{field}: the wheelhouse {directory} has no {name} {version} "
                               f"({'requested' if requested else 'pinned by sglang ' + wanted['sglang']}; it has "
                               f"{name} {_versions_text(files.get(name, {}))}); add its wheel to the wheelhouse")
        plan[name] = ({"version": version, "from": "requested" if requested else f"pinned by sglang {wanted['sglang']}"}
                      if version else None)
    return plan


def plan_from_index(request: dict) -> dict[str, Any]:
    """What the index installs: the requested pins; the release's own pins are known once pip resolves them."""
    versions = request["versions"]
    return {name: ({"version": versions[name], "from": "requested"} if versions[name] else None) for name in PINNED}


# --- the install ------------------------------------------------------------------------------------------------


def pip_install_argv(python: str, request: dict) -> list[str]:
    source = request["source"]
    if "wheelhouse" in source:
        where = ["--no-index", "--find-links", source["wheelhouse"]]
    else:
        where = ["--index-url", source["index_url"]] if source["index_url"] else []
    pins = [f"{name}=={version}" for name, version in request["versions"].items() if version]
    return [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *where, *pins]


def pip_failure(error: CommandError, request: dict) -> ReleaseError:
    """pip's failure in the user's words: an unknown version names its option and what the source has."""
    match = _PIP_NOT_FOUND.search(error.err or "") or _PIP_NOT_FOUND.search(error.out or "")
    source = request["source"]
    where = (f"the wheelhouse {source['wheelhouse']}" if "wheelhouse" in source
             else f"the index {source['index_url'] or '(pip default, PyPI)'}")
    if match:
        name = normalize(match.group("name"))
        field = "version" if name == "sglang" else name
        return ReleaseError(f"{field}: {where} has no {name} {match.group('version')} (it has "
                            f"{match.group('versions').strip() or 'none'}); set {field} to a version it has. "
                            "The venv that was being created has been removed")
    return ReleaseError(f"installing {_describe(request['versions'])} from {where} failed, the venv that was being "
                        f"created has been removed: {error}")


def freeze(run, python: str) -> list[str]:
    _rc, out, _err = run([python, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"], check=True)
    return [line.strip() for line in out.splitlines() if line.strip()]


def frozen_versions(lines: list[str]) -> dict[str, str | None]:
    """Versions of the pinned distributions in ``pip freeze`` lines (None when not installed)."""
    found = {}
    for line in lines:
        name, sep, version = line.partition("==")
        if sep:
            found[normalize(name)] = version
    return {name: found.get(name) for name in PINNED}


def venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def _write_manifest(venv: str, manifest: dict) -> None:
    write_atomically(os.path.join(venv, MANIFEST_NAME), (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())


def install(run, venv: str, base_python: str, request: dict) -> dict:
    """Create the venv, install the request, record it; on failure remove the venv (it is ours: nothing else was
    there) and raise ReleaseError. Returns the manifest."""
    python = venv_python(venv)
    manifest = {"managed_by": MANAGED_BY, "state": "installing", "request": request, "python": python}
    if os.path.lexists(venv):
        shutil.rmtree(venv)  # an unfinished install of ours (existing_venv)
    try:
        run([base_python, "-m", "venv", venv], changes=True, check=True)
        _write_manifest(venv, manifest)  # ours from the first moment: a crash leaves a venv we may redo
        try:
            run(pip_install_argv(python, request), changes=True, check=True)
        except CommandError as exc:
            raise pip_failure(exc, request) from None
        lines = freeze(run, python)
        versions = frozen_versions(lines)
        wrong = [f"{name} {versions[name]} instead of {wanted}" for name, wanted in request["versions"].items()
                 if wanted and versions[name] != wanted]
        if wrong:
            raise ReleaseError(f"pip installed {', '.join(wrong)}; the venv has been removed")
    except (ReleaseError, CommandError):
        shutil.rmtree(venv, ignore_errors=True)
        raise
    manifest.update(state="installed", freeze=lines, versions=versions,
                    installed_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    _write_manifest(venv, manifest)
    return manifest


def ensure_release(run, params: dict, check_mode: bool) -> dict[str, Any]:
    """The module's work: ``{changed, venv, python, versions, manifest, plan, diff}``. Every input is checked before
    anything changes (ReleaseError naming the field)."""
    request = request_of(params)
    venv = venv_path(params)
    existing = existing_venv(venv, request)
    base = {"venv": venv, "python": venv_python(venv), "request": request}
    if existing is not None:
        return {**base, "changed": False, "versions": existing["versions"], "manifest": existing,
                "plan": None, "diff": {"before": _diff_text(existing), "after": _diff_text(existing)}}
    source = request["source"]
    plan = plan_from_wheelhouse(source["wheelhouse"], request) if "wheelhouse" in source else plan_from_index(request)
    if not os.path.isfile(params["base_python"]):
        raise ReleaseError(f"base_python: {params['base_python']} does not exist on the host; set it to the Python "
                           "the venv is created from (with its venv module)")
    diff_after = {"managed_by": MANAGED_BY, "request": request, "plan": plan}
    if check_mode:
        return {**base, "changed": True, "versions": {name: (plan[name] or {}).get("version") for name in PINNED},
                "manifest": None, "plan": plan, "diff": {"before": "", "after": _diff_text(diff_after)}}
    manifest = install(run, venv, params["base_python"], request)
    return {**base, "changed": True, "versions": manifest["versions"], "manifest": manifest, "plan": plan,
            "diff": {"before": "", "after": _diff_text(manifest)}}


def _diff_text(document: dict) -> str:
    shown = {key: document[key] for key in ("request", "plan", "versions", "freeze") if key in document}
    return json.dumps(shown, indent=2, sort_keys=True) + "\n"
