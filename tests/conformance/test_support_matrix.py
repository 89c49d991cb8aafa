# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The support matrix in README.md and docs/support-matrix.md is what the conformance checks say.

The table is rendered from tests/conformance/release_checks.py (the same checks the conformance tests
assert); this test fails when either file differs. ``UPDATE_SUPPORT_MATRIX=1`` rewrites both.
"""
from __future__ import annotations

import os

import pytest

from tests.conformance.conftest import RELEASES
from tests.conformance.release_checks import CHECKS, ROOT, not_checked, run_check

MATRICES = (ROOT / "README.md", ROOT / "docs" / "support-matrix.md")
BEGIN, END = "<!-- support-matrix:begin (tests/conformance/test_support_matrix.py) -->", "<!-- support-matrix:end -->"


def render() -> str:
    header = "| SGLang | " + " | ".join(CHECKS) + " |"
    rows = [header, "|" + "---|" * (len(CHECKS) + 1)]
    for version in RELEASES:
        cells = []
        for capability in CHECKS:
            reason = not_checked(capability, version)
            if reason:
                cells.append(f"not checked: {reason}")
                continue
            problems = run_check(capability, version)
            cells.append("yes" if not problems else "no: " + "; ".join(problems)[:200].replace("|", "/"))
        rows.append(f"| {version} | " + " | ".join(cells) + " |")
    return "\n".join([BEGIN, *rows, END])


@pytest.mark.parametrize("path", MATRICES, ids=lambda path: path.name)
def test_support_matrix_is_what_the_checks_say(path):
    text = path.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    table = render()
    if os.environ.get("UPDATE_SUPPORT_MATRIX") == "1":
        path.write_text(text[:start] + table + text[end:], encoding="utf-8")
        text = path.read_text(encoding="utf-8")
        start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == table, f"{path.name}: the support matrix differs from the checks; rerun with UPDATE_SUPPORT_MATRIX=1"
