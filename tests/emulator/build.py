# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Build the emulated GPU-node payload that sandbox hosts mount (wheelhouse, venvs, checkouts, nvidia-smi, models,
profiles).

The emulator is a package of several releases: `dest/wheelhouse/` holds a wheel of the emulator's `sglang`
distribution per release (:func:`wheel_releases`: every release a shipped profile plays, the package's own 0.5.11
first, plus the future :data:`WHEEL_ONLY_RELEASES`), each built as that version (its metadata and
`sglang.__version__` say so, as a real install of the release would) and pinning its Triton
(:data:`TRITON_PINS`, as a real release pins it through torch), the `triton` wheels of those versions, and
wheels of what the emulator requires (aiohttp, pyyaml, scipy), so a host without an index installs any release
from it (`pip install --no-index --find-links`, as llmops.sglang.sglang_release does on an air-gapped fleet).
Per release a profile plays, `dest/releases/<version>/venv` has that wheel installed plus real ray/aiohttp/
pyyaml/scipy, and `dest/releases/<version>/src` is the stand-in source checkout `sglang_src/` as a git clone
tagged `v<version>`. The first venv is built with pip; every other one is a copy of it in which pip reinstalls
only `sglang` from the wheelhouse, so a second release costs seconds. Script shebangs point where hosts mount the
venv (/opt/sglang/venv). `bin/nvidia-smi` (shebang set to that venv's python), `models/` and `profiles/` are
shared. A stamp holding a hash of the emulator sources and the build parameters makes repeated calls no-ops.

CLI: python -m tests.emulator.build DEST [--python /usr/bin/python3] [--venv-target /opt/sglang/venv]
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from tests.emulator.profiles import EMULATOR_DIR, package_version, profile_releases


def _load_moe_layout() -> types.ModuleType:
    """The emulator's record of the config module's two locations (pure stdlib), read from its file: importing
    `sglang` here would put the emulator's package in this process."""
    spec = importlib.util.spec_from_file_location("emulator_moe_layout",
                                                  EMULATOR_DIR / "sglang" / "sglang" / "_emulator" / "moe_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


moe_layout = _load_moe_layout()

# What a real SGLang venv brings that the collection's host-side code uses: ray (the MoE tuner), aiohttp (the bench
# client), pyyaml, and scipy (the stopping rule's Student t; every sglang release has Requires-Dist: scipy). Same pins
# as the project's pyproject.toml.
REQUIREMENTS = ("ray==2.52.1", "aiohttp==3.13.2", "pyyaml==6.0.3", "scipy==1.16.3")
# What the emulator's `sglang` requires (its pyproject's dependencies, pinned as above: scipy as every real release
# requires it, the bench's sequential verdict runs in the server's venv): the wheelhouse carries them so an offline
# install of a release succeeds and measures.
RUNTIME_REQUIREMENTS = ("aiohttp==3.13.2", "pyyaml==6.0.3", "scipy==1.16.3")
# Releases the wheelhouse carries though no profile plays them: 0.5.10 (its CLI table from the real wheel; Triton 3.5.1,
# as the real one's torch==2.9.1 brings; its config module where the real one has it, sglang._emulator.moe_layout), the
# release the real case upgraded from; 0.5.17 (its CLI table from the real wheel; Triton 3.6.0, as the real one's torch
# 2.11.0 brings) emulates a throughput regression (perf.RELEASE_DECODE_FACTORS); 0.5.24 is a future release whose
# Triton (3.9.0) has no config directory anywhere, the upgrade that loses every tuned MoE config.
WHEEL_ONLY_RELEASES = ("0.5.10", "0.5.17", "0.5.24")
# The Triton a release pins where it is not the emulator triton package's own version (3.6.0, the real case's).
TRITON_PINS = {"0.5.10": "3.5.1", "0.5.24": "3.9.0"}
STAMP_NAME = ".emulator-build.json"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
RELEASES_DIR = "releases"
WHEELHOUSE_DIR = "wheelhouse"


def build(
    dest: Path,
    python: str = "/usr/bin/python3",
    venv_target: str = "/opt/sglang/venv",
    requirements: tuple[str, ...] = REQUIREMENTS,
) -> dict[str, Path]:
    """Build (or reuse) the payload under `dest`; returns the paths of nvidia_smi, models, profiles, the releases
    dir and, as venv/src, the package release's venv and checkout (release_paths gives any release's)."""
    dest = Path(dest).resolve()
    releases = profile_releases()
    paths = {"nvidia_smi": dest / "bin" / "nvidia-smi", "models": dest / "models", "profiles": dest / "profiles",
             "releases": dest / RELEASES_DIR, "wheelhouse": dest / WHEELHOUSE_DIR, **release_paths(dest, releases[0])}
    stamp = {"sources": sources_digest(), "python": python, "venv_target": venv_target,
             "requirements": list(requirements), "releases": releases, "wheels": wheel_releases(),
             "runtime_requirements": list(RUNTIME_REQUIREMENTS), "triton_pins": TRITON_PINS}
    stamp_path = dest / STAMP_NAME
    built = [path for release in releases for path in release_paths(dest, release).values()]
    if _read_stamp(stamp_path) == stamp and all(p.exists() for p in [*paths.values(), *built]):
        return paths
    stamp_path.unlink(missing_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    _build_venvs(dest, releases, python, venv_target, requirements)
    _copy_tree(EMULATOR_DIR / "models", paths["models"])
    _copy_tree(EMULATOR_DIR / "profiles", paths["profiles"])
    if (EMULATOR_DIR / "sglang_src").is_dir():
        for release in releases:
            src = release_paths(dest, release)["src"]
            _copy_tree(EMULATOR_DIR / "sglang_src", src)
            _tag_checkout(src, release)
    _install_nvidia_smi(paths["nvidia_smi"], venv_target)
    stamp_path.write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return paths


def release_paths(dest: Path, release: str) -> dict[str, Path]:
    """venv (and src, when the emulator has a stand-in checkout) of one release in a payload."""
    root = Path(dest) / RELEASES_DIR / release
    paths = {"venv": root / "venv"}
    if (EMULATOR_DIR / "sglang_src").is_dir():
        paths["src"] = root / "src"
    return paths


def wheel_releases() -> list[str]:
    """Every release the wheelhouse carries: the profiles' (the package's first), then the wheel-only ones."""
    played = profile_releases()
    return [*played, *(release for release in WHEEL_ONLY_RELEASES if release not in played)]


def triton_pin(release: str) -> str:
    """The Triton version an emulated release pins."""
    return TRITON_PINS.get(release) or _source_version(EMULATOR_DIR / "triton" / "triton" / "__init__.py")


def _source_version(path: Path) -> str:
    return re.search(r'^__version__ = "([^"]+)"', path.read_text(encoding="utf-8"), re.MULTILINE).group(1)


def wheel_path(wheelhouse: Path, distribution: str, version: str) -> Path:
    """The wheel of an emulator distribution in a wheelhouse (pure Python: py3-none-any)."""
    return Path(wheelhouse) / f"{distribution}-{version}-py3-none-any.whl"


def emulated_version() -> str:
    """The release the emulator's `sglang` distribution says it is (its source; a built venv says its own)."""
    return package_version()


def _tag_checkout(src: Path, version: str) -> None:
    """Make the stand-in checkout a git clone at the release tag, as users have it (real checkouts tell their
    version by their tag: python/sglang/version.py only imports setuptools-scm's _version.py)."""
    git = ["git", "-C", str(src), "-c", "user.name=llmops emulator", "-c", "user.email=emulator@llmops.invalid"]
    _run([*git, "init", "--quiet"])
    _run([*git, "add", "--all"])
    _run([*git, "commit", "--quiet", "--no-gpg-sign", "-m", f"SGLang emulator source checkout {version}"])
    _run([*git, "tag", f"v{version}"])


def sources_digest() -> str:
    """Hash of every emulator source file (paths and contents) that ends up in a build."""
    digest = hashlib.sha256()
    for path in sorted(EMULATOR_DIR.rglob("*")):
        relative = path.relative_to(EMULATOR_DIR)
        if not path.is_file() or "__pycache__" in relative.parts or path.suffix == ".pyc" or any(
                part.endswith(".egg-info") or part == "build" for part in relative.parts):
            continue
        digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _read_stamp(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _build_venvs(dest: Path, releases: list[str], python: str, venv_target: str,
                 requirements: tuple[str, ...]) -> None:
    """The wheelhouse; the first release's venv from scratch (its wheels from the wheelhouse); each other one a copy
    of it with its own `sglang` wheel reinstalled."""
    wheelhouse = dest / WHEELHOUSE_DIR
    first = release_paths(dest, releases[0])["venv"]
    shutil.rmtree(first, ignore_errors=True)
    first.parent.mkdir(parents=True, exist_ok=True)
    _run([python, "-m", "venv", str(first)])
    _build_wheelhouse(str(first / "bin" / "python"), wheelhouse)
    # The emulator's wheels only from the wheelhouse (PyPI has real releases of the same names and versions).
    _pip(first, "--no-index", "--find-links", str(wheelhouse), f"sglang=={releases[0]}")
    if requirements:
        _pip(first, *requirements)
    _retarget_shebangs(first, venv_target)
    for release in releases[1:]:
        venv = release_paths(dest, release)["venv"]
        shutil.rmtree(venv, ignore_errors=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        _run(["cp", "-a", str(first), str(venv)])  # coreutils: several times faster than shutil.copytree here
        _pip(venv, "--no-deps", "--force-reinstall", str(wheel_path(wheelhouse, "sglang", release)))
        _retarget_shebangs(venv, venv_target)


def build_wheelhouse(wheelhouse: Path, base_python: str = "/usr/bin/python3") -> Path:
    """The wheelhouse alone (no venvs, for tests that install releases themselves), rebuilt only when the emulator's
    sources or the wheel list changed; built by the pip of a throwaway venv of ``base_python``, the Python the tests'
    release venvs are made from, so the dependencies' binary wheels are its own whatever Python runs the tests."""
    wheelhouse = Path(wheelhouse).resolve()
    stamp = {"sources": sources_digest(), "python": base_python, "wheels": wheel_releases(),
             "runtime_requirements": list(RUNTIME_REQUIREMENTS), "triton_pins": TRITON_PINS}
    stamp_path = wheelhouse.parent / f".{wheelhouse.name}.json"
    wheelhouse.parent.mkdir(parents=True, exist_ok=True)
    # One builder at a time (`make unit` and `make unit-py313` at once, say); a second one finds it built.
    with open(wheelhouse.parent / f".{wheelhouse.name}.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _read_stamp(stamp_path) != stamp or not wheelhouse.is_dir():
            stamp_path.unlink(missing_ok=True)
            with tempfile.TemporaryDirectory(prefix="wheelhouse-venv-") as venv:
                _run([base_python, "-m", "venv", venv])
                _build_wheelhouse(str(Path(venv, "bin", "python")), wheelhouse)
            stamp_path.write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return wheelhouse


def _build_wheelhouse(python: str, wheelhouse: Path) -> None:
    """Wheels of every release (:func:`wheel_releases`), of the Tritons they pin and of their runtime dependencies,
    built with ``python``'s pip (its Python decides the dependencies' binary wheels: the hosts' own)."""
    shutil.rmtree(wheelhouse, ignore_errors=True)
    wheelhouse.mkdir(parents=True)
    staging = wheelhouse.parent / ".emulator-staging"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        releases = wheel_releases()
        sources = [_staged_sglang(staging, release) for release in releases]
        sources += [_staged_triton(staging, version) for version in sorted({triton_pin(r) for r in releases})]
        for source in sources:  # one at a time: several versions of one distribution in one call conflict
            _pip_wheel(python, wheelhouse, "--no-deps", source)
        _pip_wheel(python, wheelhouse, *RUNTIME_REQUIREMENTS)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _pip(venv: Path, *arguments: str) -> None:
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *arguments])


def _pip_wheel(python: str, wheelhouse: Path, *arguments: str) -> None:
    _run([python, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
          "--wheel-dir", str(wheelhouse), *arguments])


def _staged_sglang(staging: Path, release: str) -> str:
    """The emulator's `sglang` distribution as `release`: its metadata version and sglang.__version__, and its
    Triton pin among its dependencies (a copy: no build litter lands in the source tree)."""
    target = staging / f"sglang-{release}"
    _copy_tree(EMULATOR_DIR / "sglang", target)
    _set_line(target / "pyproject.toml", r'^version = "[^"]+"', f'version = "{release}"')
    _set_line(target / "pyproject.toml", r'^dependencies = \[', f'dependencies = ["triton=={triton_pin(release)}", ')
    _set_line(target / "sglang" / "version.py", r'^__version__ = "[^"]+"', f'__version__ = "{release}"')
    if tuple(int(part) for part in release.split(".")) < moe_layout.MOVED_IN:
        _move_config_module(target)
    return str(target)


def _move_config_module(package: Path) -> None:
    """The config module and its `configs/` where releases before 0.5.11 have them (sglang._emulator.moe_layout)."""
    new_package, old_package = (name.rpartition(".")[0] for name in (moe_layout.CONFIG_MODULE,
                                                                     moe_layout.OLD_CONFIG_MODULE))
    new, old = (package.joinpath(*name.split(".")) for name in (new_package, old_package))
    old.mkdir(parents=True)
    for name in ("__init__.py", "fused_moe_triton_config.py", "configs"):
        (new / name).rename(old / name)
    new.rmdir()
    _set_line(package / "pyproject.toml", f'^"{re.escape(new_package)}" = ', f'"{old_package}" = ')  # its configs' JSON


def _staged_triton(staging: Path, version: str) -> str:
    """The emulator's `triton` distribution as Triton ``version``."""
    target = staging / f"triton-{version}"
    _copy_tree(EMULATOR_DIR / "triton", target)
    _set_line(target / "pyproject.toml", r'^version = "[^"]+"', f'version = "{version}"')
    _set_line(target / "triton" / "__init__.py", r'^__version__ = "[^"]+"', f'__version__ = "{version}"')
    return str(target)


def _set_line(path: Path, pattern: str, replacement: str) -> None:
    text, count = re.subn(pattern, replacement, path.read_text(encoding="utf-8"), count=1, flags=re.MULTILINE)
    if count != 1:
        raise RuntimeError(f"emulator build: {path} has no line matching {pattern} to set")
    path.write_text(text, encoding="utf-8")


def _retarget_shebangs(venv: Path, venv_target: str) -> None:
    """Scripts must run where hosts mount the venv, not where it was built."""
    built_prefix = f"#!{venv}/"
    for script in (venv / "bin").iterdir():
        if not script.is_file() or script.is_symlink():
            continue
        content = script.read_bytes()
        if content.startswith(built_prefix.encode()):
            first, _, rest = content.partition(b"\n")
            retargeted = first.replace(str(venv).encode(), venv_target.encode(), 1)
            script.write_bytes(retargeted + b"\n" + rest)


def _install_nvidia_smi(target: Path, venv_target: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    _, _, body = (EMULATOR_DIR / "bin" / "nvidia-smi").read_text(encoding="utf-8").partition("\n")
    target.write_text(f"#!{venv_target}/bin/python\n{body}", encoding="utf-8")
    target.chmod(0o755)


def _copy_tree(source: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=IGNORED)


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"emulator build step failed ({' '.join(command)}):\n{result.stdout}{result.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.emulator.build", description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="output directory")
    parser.add_argument("--python", default="/usr/bin/python3", help="interpreter the venv is created from")
    parser.add_argument("--venv-target", default="/opt/sglang/venv", help="where hosts mount the venv")
    args = parser.parse_args(argv)
    for name, path in build(args.dest, args.python, args.venv_target).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
