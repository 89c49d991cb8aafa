#!/usr/bin/env python3
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Regenerate tests/fixtures/sglang_tuner_cli/tuner_cli.json: the argparse options of SGLang's MoE tuners
(benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py and tune_down_moe.py) per release tag.

The tuners are not in the PyPI wheels, so the options are read from the sgl-project/sglang repository:

    python scripts/tuner_cli_fixtures.py --repo ~/src/sglang            # every release of the support matrix
    python scripts/tuner_cli_fixtures.py --repo ~/src/sglang --release 0.5.26

For each release it runs ``git -C REPO show v<release>:<path>`` and ``git rev-parse v<release>^{commit}`` and
reads the scripts' ``add_argument`` calls statically (``ast``; nothing of the tuner is imported or run, it needs
torch, triton and ray). The result records the upstream path and commit of every option set, and
``verified: true``. Entries this script did not produce keep their ``verified`` flag and their ``source`` note.
"""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "sglang_tuner_cli" / "tuner_cli.json"
SCRIPTS = {"tuning_fused_moe_triton.py": "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py",
           "tune_down_moe.py": "benchmark/kernels/fused_moe_triton/tune_down_moe.py"}
RELEASES = ("0.5.10", "0.5.11", "0.5.14", "0.5.17", "0.5.20", "0.5.23")
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


def from_repo(repo: str, release: str) -> dict:
    tag = f"v{release}"
    commit = subprocess.run(["git", "-C", repo, "rev-parse", f"{tag}^{{commit}}"], capture_output=True, text=True,
                            check=True).stdout.strip()
    scripts = {}
    for script, path in SCRIPTS.items():
        shown = subprocess.run(["git", "-C", repo, "show", f"{tag}:{path}"], capture_output=True, text=True, check=False)
        scripts[script] = ({"path": path, "commit": commit, "options": options_from_source(shown.stdout)}
                           if shown.returncode == 0 else None)
    return {"tag": tag, "commit": commit, "verified": True, "scripts": scripts}


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--repo", required=True, help="a clone of sgl-project/sglang with its release tags")
    cli.add_argument("--release", action="append", help="release(s) to (re)read; default the support matrix's")
    args = cli.parse_args(argv)
    document = json.loads(FIXTURE.read_text(encoding="utf-8")) if FIXTURE.exists() else {"releases": {}}
    for release in args.release or RELEASES:
        document["releases"][release] = from_repo(args.repo, release)
        print(f"{release}: {document['releases'][release]['commit']}", file=sys.stderr)
    FIXTURE.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
