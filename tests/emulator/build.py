# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Build the emulated GPU-node payload that sandbox hosts mount (venvs, checkouts, nvidia-smi, models, profiles).

Per SGLang release the shipped profiles play (tests/emulator/profiles, their ``sglang_version``; the package's
own 0.5.11 first) `build(dest)` creates `dest/releases/<version>/venv`, a venv with the emulator's `sglang`
distribution installed as that version (its metadata and `sglang.__version__` say so, as a real install of the
release would) plus `triton` and real ray/aiohttp/pyyaml/scipy, and `dest/releases/<version>/src`, the stand-in
source checkout `sglang_src/` as a git clone tagged `v<version>`. The first venv is built with pip; every other
one is a copy of it in which pip reinstalls only `sglang` (the wheel cache holds the rest), so a second release
costs seconds. Script shebangs point where hosts mount the venv (/opt/sglang/venv). `bin/nvidia-smi` (shebang
set to that venv's python), `models/` and `profiles/` are shared. A stamp holding a hash of the emulator
sources and the build parameters makes repeated calls no-ops.

CLI: python -m tests.emulator.build DEST [--python /usr/bin/python3] [--venv-target /opt/sglang/venv]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.emulator.profiles import EMULATOR_DIR, package_version, profile_releases

# What a real SGLang venv brings that the collection's host-side code uses: ray (the MoE tuner), aiohttp (the bench
# client), pyyaml, and scipy (the stopping rule's Student t; every sglang release has Requires-Dist: scipy). Same pins
# as the project's pyproject.toml.
REQUIREMENTS = ("ray==2.52.1", "aiohttp==3.13.2", "pyyaml==6.0.3", "scipy==1.16.3")
STAMP_NAME = ".emulator-build.json"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
RELEASES_DIR = "releases"


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
             "releases": dest / RELEASES_DIR, **release_paths(dest, releases[0])}
    stamp = {"sources": sources_digest(), "python": python, "venv_target": venv_target,
             "requirements": list(requirements), "releases": releases}
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
    """The first release's venv from scratch; each other one a copy of it with its own `sglang` reinstalled."""
    staging = dest / ".emulator-staging"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        first = release_paths(dest, releases[0])["venv"]
        _build_venv(first, python, [_staged_sglang(staging, releases[0]), _staged(staging, "triton"), *requirements])
        _retarget_shebangs(first, venv_target)
        for release in releases[1:]:
            venv = release_paths(dest, release)["venv"]
            shutil.rmtree(venv, ignore_errors=True)
            venv.parent.mkdir(parents=True, exist_ok=True)
            _run(["cp", "-a", str(first), str(venv)])  # coreutils: several times faster than shutil.copytree here
            _pip(venv, "--no-deps", "--force-reinstall", _staged_sglang(staging, release))
            _retarget_shebangs(venv, venv_target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _build_venv(venv: Path, python: str, packages: list[str]) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    _run([python, "-m", "venv", str(venv)])
    _pip(venv, *packages)


def _pip(venv: Path, *arguments: str) -> None:
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *arguments])


def _staged(staging: Path, name: str) -> str:
    """A copy of an emulator distribution to install non-editable (the package dir keeps configs/, no build
    litter lands in the source tree)."""
    target = staging / name
    if not target.exists():
        _copy_tree(EMULATOR_DIR / name, target)
    return str(target)


def _staged_sglang(staging: Path, release: str) -> str:
    """The emulator's `sglang` distribution as `release`: its metadata version and sglang.__version__."""
    target = staging / f"sglang-{release}"
    _copy_tree(EMULATOR_DIR / "sglang", target)
    for relative, key in (("pyproject.toml", "version"), ("sglang/version.py", "__version__")):
        path = target / relative
        text, count = re.subn(rf'^{key} = "[^"]+"', f'{key} = "{release}"', path.read_text(encoding="utf-8"),
                              count=1, flags=re.MULTILINE)
        if count != 1:
            raise RuntimeError(f"emulator build: {path} has no version line to set to {release}")
        path.write_text(text, encoding="utf-8")
    return str(target)


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
