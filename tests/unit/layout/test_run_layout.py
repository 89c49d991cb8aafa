# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The run directory has one owner (plugins/plugin_utils/run_dir.py, docs/run-directory.md "Layout"): no other product
file spells a run record's name or joins a run-directory path by hand. Python asks run_dir.path() and
run_dir.record_name(), YAML the filter llmops.sglang.run_path; the exceptions below say why they are."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import stages
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_dir

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("plugins", "roles", "playbooks", "src")
OWNER = "plugins/plugin_utils/run_dir.py"
# Module documentation (DOCUMENTATION, EXAMPLES, RETURN, docstrings, argument_specs) names records for the reader.
DOC_ASSIGNMENTS = {"DOCUMENTATION", "EXAMPLES", "RETURN"}
# In YAML, the records a run_record task writes are its `files:` keys (the call names what it writes), and task and
# play names are prose; a record's name anywhere else is a path or a name built by hand.
WRITTEN_KEY = re.compile(r"^\s*(?:- )?['\"]?[a-z_]+\.[a-z]+['\"]?:(\s|$)")
PROSE = re.compile(r"^\s*(?:- )?name:\s")
HAND_BUILT_YAML = re.compile(r"tuning_run_(?:stage_)?dir\s*(?:\}\}\s*/|~\s*'/)")
# Files that may name some records, and why.
ALLOWED = {
    # the report command's --help says which files it regenerates
    "src/llmops_sglang/cli.py": {"summary.json", "report.md", "report.html"},
}
RECORD_NAMES = {name for name in run_dir.RECORDS.values() if "." in name}  # files; folders' names are common words
FOLDERS = {stage.name for stage in stages.STAGES} | {run_dir.TRIALS, run_dir.VERIFIED}


def _mentions(text: str, names: set[str]) -> list[str]:
    return sorted(name for name in names if re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w])", text))


def _doc_strings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are documentation: docstrings and module documentation."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in DOC_ASSIGNMENTS
                                                  for t in node.targets):
            ids.add(id(node.value))
    return ids


def _python_findings(source: str, where: str) -> list[str]:
    """A record's name in code (not documentation), or a stage's or candidates' folder joined onto a path."""
    tree = ast.parse(source)
    docs = _doc_strings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found += [f"{where}:{node.lineno}: names {name}" for name in _mentions(node.value, RECORD_NAMES)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) \
                and node.right.value in FOLDERS:
            found.append(f"{where}:{node.lineno}: joins {node.right.value!r} by hand")
    return found


def _yaml_findings(source: str, where: str) -> list[str]:
    """A record's name outside a run_record's files and task names, or a path joined onto the run or stage dir."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        code = line.split(" # ")[0] if not line.lstrip().startswith("#") else ""
        line_at = f"{where}:{number}"
        if HAND_BUILT_YAML.search(code):
            found.append(f"{line_at}: joins a run-directory path by hand")
        if not WRITTEN_KEY.match(code) and not PROSE.match(code):
            found += [f"{line_at}: names {name}" for name in _mentions(code, RECORD_NAMES)]
    return found


def _product_files(suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*") if p.suffix in suffixes and p.is_file()
                  and "argument_specs" not in p.name and str(p.relative_to(ROOT)) != OWNER)


def _findings(suffixes: tuple[str, ...], scan) -> list[str]:
    return [finding for path in _product_files(suffixes)
            for finding in scan(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]


def test_no_product_file_spells_the_run_layout_outside_its_owner():
    found = _findings((".py",), _python_findings) + _findings((".yml", ".yaml"), _yaml_findings)
    found = [f for f in found if f.split(" names ")[-1] not in ALLOWED.get(f.split(":")[0], ())]
    assert not found, "the run directory's layout belongs to " + OWNER + ":\n" + "\n".join(found)


def test_the_scan_finds_a_hand_built_path_and_a_record_name_but_not_documentation():
    python = ('"""Reads sweep.json."""\n'
              'DOCUMENTATION = "writes adopted.json"\n'
              'a = run_dir / "baseline" / host\n'
              'b = read_json(directory / "sweep.json")\n')
    assert _python_findings(python, "x.py") == ["x.py:3: joins 'baseline' by hand", "x.py:4: names sweep.json"]
    yaml = ("- name: Record sweep.json\n"
            "  llmops.sglang.run_record:\n"
            "    dir: \"{{ tuning_run_stage_dir }}/trials/{{ name }}\"\n"
            "    files:\n"
            "      sweep.json: \"{{ sweep }}\"\n"
            "  when: (tuning_run_dir ~ '/run.json') is file  # a comment names stage.json\n")
    assert _yaml_findings(yaml, "x.yml") == ["x.yml:3: joins a run-directory path by hand",
                                             "x.yml:6: joins a run-directory path by hand", "x.yml:6: names run.json"]
