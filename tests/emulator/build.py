# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Build the emulated GPU-node payload that sandbox hosts mount (venv, nvidia-smi, models, profiles).

`build(dest)` creates `dest/venv` (python -m venv) with the emulator's `sglang` and `triton`
distributions installed non-editable plus real ray/aiohttp/pyyaml, rewrites the venv's script
shebangs to where hosts mount it (/opt/sglang/venv), and copies `bin/nvidia-smi` (shebang set to
that venv's python), `models/`, `profiles/` and, when present, the stand-in source checkout
`sglang_src/` (as `dest/src`). A stamp holding a hash of the emulator sources and the build
parameters makes repeated calls no-ops.

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

EMULATOR_DIR = Path(__file__).resolve().parent
REQUIREMENTS = ("ray==2.52.1", "aiohttp==3.13.2", "pyyaml==6.0.3")
STAMP_NAME = ".emulator-build.json"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


def build(
    dest: Path,
    python: str = "/usr/bin/python3",
    venv_target: str = "/opt/sglang/venv",
    requirements: tuple[str, ...] = REQUIREMENTS,
) -> dict[str, Path]:
    """Build (or reuse) the payload under `dest`; returns paths of venv, nvidia_smi, models, profiles, src."""
    dest = Path(dest).resolve()
    paths = {
        "venv": dest / "venv",
        "nvidia_smi": dest / "bin" / "nvidia-smi",
        "models": dest / "models",
        "profiles": dest / "profiles",
    }
    if (EMULATOR_DIR / "sglang_src").is_dir():
        paths["src"] = dest / "src"
    stamp = {"sources": sources_digest(), "python": python, "venv_target": venv_target,
             "requirements": list(requirements)}
    stamp_path = dest / STAMP_NAME
    if _read_stamp(stamp_path) == stamp and all(p.exists() for p in paths.values()):
        return paths
    stamp_path.unlink(missing_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    _build_venv(paths["venv"], python, venv_target, requirements)
    _copy_tree(EMULATOR_DIR / "models", paths["models"])
    _copy_tree(EMULATOR_DIR / "profiles", paths["profiles"])
    if "src" in paths:
        _copy_tree(EMULATOR_DIR / "sglang_src", paths["src"])
        _tag_checkout(paths["src"], emulated_version())
    _install_nvidia_smi(paths["nvidia_smi"], venv_target)
    stamp_path.write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return paths


def emulated_version() -> str:
    """The release the emulator's `sglang` distribution says it is."""
    text = (EMULATOR_DIR / "sglang" / "sglang" / "version.py").read_text(encoding="utf-8")
    return re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE).group(1)


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


def _build_venv(venv: Path, python: str, venv_target: str, requirements: tuple[str, ...]) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    _run([python, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # Non-editable installs from copies, so the package dir holds configs/ and no build litter
    # lands in the source tree.
    staging = venv.parent / ".emulator-staging"
    shutil.rmtree(staging, ignore_errors=True)
    for name in ("sglang", "triton"):
        _copy_tree(EMULATOR_DIR / name, staging / name)
    try:
        _run([*pip, str(staging / "sglang"), str(staging / "triton"), *requirements])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _retarget_shebangs(venv, venv_target)


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
