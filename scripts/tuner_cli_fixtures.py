#!/usr/bin/env python3
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Regenerate tests/fixtures/sglang_tuner_cli/v<release>.json: the argparse options of SGLang's MoE tuners
(benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py and tune_down_moe.py) at each release tag.

The tuners are not in the PyPI wheels, so the options are read from git clones of sgl-project/sglang (or of
forks that carry its release tags). Name each clone after the repository it is a copy of; every tag is resolved
in each clone that has it, and the commit most of them agree on is the one read:

    python scripts/tuner_cli_fixtures.py --repo Muqi1029/sglang=/path/to/clone --repo other/fork=/path/to/other
    python scripts/tuner_cli_fixtures.py --repo sgl-project/sglang=~/src/sglang --tag v0.5.26

Without ``--tag`` it reads every tag v0.5.10 .. v0.5.23 (post-releases included) found in the clones. For each
tag it runs ``git rev-parse <tag>^{commit}`` and ``git show <commit>:<path>`` and reads the scripts'
``add_argument`` calls statically (``ast``; nothing of the tuner is imported or run: it needs torch, triton and
ray). Each fixture records the commit, what every clone resolved the tag to, and per script its path, the last
commit that changed it (readable upstream by path and commit) and its options, or ``null`` where the tag has no
such script. With ``--wheels DIR`` (``pip download --no-deps sglang==<release> -d DIR``) it also records how
many of the release's wheel's Python files are identical to ``python/sglang/`` at the commit (``wheel_check``).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "sglang_tuner_cli"
SCRIPTS = {"tuning_fused_moe_triton.py": "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py",
           "tune_down_moe.py": "benchmark/kernels/fused_moe_triton/tune_down_moe.py"}
RELEASE_TAG = re.compile(r"^v0\.5\.(1\d|2[0-3])(\.post\d+)?$")
_TYPES = {"int": int, "str": str, "float": float}


def options_from_source(text: str) -> list[dict]:
    """Every ``<parser>.add_argument(...)`` call of a script, with its literal keywords (``type`` by name;
    defaults computed by a call, e.g. ``get_default_batch_sizes()``, are left out)."""
    options = []
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        names = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        if not names or not names[0].startswith("-"):
            continue
        option = {"option_strings": names}
        for keyword in node.keywords:
            if keyword.arg == "type" and isinstance(keyword.value, ast.Name):
                option["type"] = keyword.value.id
            elif keyword.arg in ("action", "nargs", "choices", "required", "default", "help"):
                try:
                    option[keyword.arg] = ast.literal_eval(keyword.value)
                except ValueError:
                    continue
        options.append(option)
    return sorted(options, key=lambda option: _position(text, option["option_strings"][0]))


def _position(text: str, flag: str) -> int:
    return text.find(f'"{flag}"')


def parser_from_options(prog: str, options: list[dict]) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with exactly these options, as the script builds it (for its ``--help`` and parsing)."""
    parser = argparse.ArgumentParser(prog=prog)
    for option in options:
        keywords = {key: value for key, value in option.items() if key not in ("option_strings", "type")}
        if "type" in option:
            keywords["type"] = _TYPES[option["type"]]
        parser.add_argument(*option["option_strings"], **keywords)
    return parser


def load_fixtures(directory: Path = FIXTURES) -> dict[str, dict]:
    """Every per-tag fixture, by release (``0.5.17``, ``0.5.10.post1``)."""
    fixtures = (json.loads(path.read_text(encoding="utf-8")) for path in sorted(directory.glob("v*.json")))
    return {fixture["release"]: fixture for fixture in fixtures}


def _git(clone: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", clone, *args], capture_output=True, text=True, check=False)


def release_tags(clones: dict[str, str]) -> list[str]:
    tags = {tag for clone in clones.values() for tag in _git(clone, "tag", "-l", "v0.5.*").stdout.split()}
    return sorted((tag for tag in tags if RELEASE_TAG.match(tag)),
                  key=lambda tag: [int(part) for part in re.findall(r"\d+", tag)])


def wheel_check(clone: str, commit: str, wheel: Path) -> dict:
    """How many of the PyPI wheel's ``sglang/**.py`` are byte-identical to ``python/sglang/`` at ``commit`` (git
    blob ids): the wheel is built from the tag, so a commit that is the tag's matches all but generated files."""
    listing = _git(clone, "ls-tree", "-r", commit, "python/sglang/").stdout.splitlines()
    blobs = {line.split("\t", 1)[1][len("python/"):]: line.split()[2] for line in listing}
    with zipfile.ZipFile(wheel) as archive:
        sources = {name: archive.read(name) for name in archive.namelist()
                   if name.startswith("sglang/") and name.endswith(".py")}
    identical = [name for name, data in sources.items()
                 if blobs.get(name) == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()]
    return {"wheel": wheel.name, "python_files": len(sources), "identical": len(identical),
            "not_identical": sorted(set(sources) - set(identical))}


def from_clones(clones: dict[str, str], tag: str, wheels: Path | None = None) -> dict:
    """The fixture of one tag: the commit most clones resolve it to (ties: the first clone's), read there."""
    witnesses = {}
    for name, clone in clones.items():
        resolved = _git(clone, "rev-parse", "--verify", "-q", f"{tag}^{{commit}}")
        if resolved.returncode == 0:
            witnesses[name] = resolved.stdout.strip()
    if not witnesses:
        raise ValueError(f"no clone has the tag {tag}")
    commit = Counter(witnesses.values()).most_common(1)[0][0]
    clone = clones[next(name for name, seen in witnesses.items() if seen == commit)]
    scripts = {}
    for script, path in SCRIPTS.items():
        shown = _git(clone, "show", f"{commit}:{path}")
        last_changed = _git(clone, "log", "-1", "--format=%H", commit, "--", path).stdout.strip()
        scripts[script] = ({"path": path, "last_changed_commit": last_changed,
                            "options": options_from_source(shown.stdout)} if shown.returncode == 0 else None)
    fixture = {"about": "argparse options of SGLang's MoE tuners at one release tag of sgl-project/sglang (Apache-2.0; "
                        "options only, no code). Written by scripts/tuner_cli_fixtures.py; see README.md beside it.",
               "repository": "sgl-project/sglang", "release": tag[1:], "tag": tag, "commit": commit,
               "tag_resolved_by": witnesses, "scripts": scripts}
    wheel = next(iter(sorted(wheels.glob(f"sglang-{tag[1:]}-*.whl"))), None) if wheels else None
    if wheel:
        fixture["wheel_check"] = wheel_check(clone, commit, wheel)
    return fixture


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--repo", action="append", required=True, metavar="OWNER/NAME=PATH",
                     help="a clone carrying sgl-project/sglang's release tags, named after the repository it copies")
    cli.add_argument("--tag", action="append", help="tag(s) to (re)read; default every v0.5.10 .. v0.5.23 tag found")
    cli.add_argument("--wheels", type=Path, help="a directory of sglang PyPI wheels to compare each tag's commit with")
    args = cli.parse_args(argv)
    clones = dict(spec.split("=", 1) for spec in args.repo)
    for tag in args.tag or release_tags(clones):
        fixture = from_clones(clones, tag, args.wheels)
        (FIXTURES / f"{tag}.json").write_text(json.dumps(fixture, indent=2) + "\n", encoding="utf-8")
        print(f"{tag}: {fixture['commit']} (clones: {fixture['tag_resolved_by']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
