# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""docs/support-matrix.md is what the conformance checks say, release by release.

The table is rendered from tests/conformance/release_checks.py (the same checks the conformance tests
assert); this test fails when the file differs. ``UPDATE_SUPPORT_MATRIX=1`` rewrites it.
"""
from __future__ import annotations

import os

from tests.conformance.conftest import RELEASES
from tests.conformance.release_checks import CHECKS, ROOT, run_check

MATRIX = ROOT / "docs" / "support-matrix.md"
BEGIN, END = "<!-- support-matrix:begin (tests/conformance/test_support_matrix.py) -->", "<!-- support-matrix:end -->"


def render() -> str:
    header = "| SGLang | " + " | ".join(CHECKS) + " |"
    rows = [header, "|" + "---|" * (len(CHECKS) + 1)]
    for version in RELEASES:
        cells = []
        for capability in CHECKS:
            problems = run_check(capability, version)
            cells.append("yes" if not problems else "no: " + "; ".join(problems)[:200].replace("|", "/"))
        rows.append(f"| {version} | " + " | ".join(cells) + " |")
    return "\n".join([BEGIN, *rows, END])


def test_support_matrix_is_what_the_checks_say():
    text = MATRIX.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    table = render()
    if os.environ.get("UPDATE_SUPPORT_MATRIX") == "1":
        MATRIX.write_text(text[:start] + table + text[end:], encoding="utf-8")
        text = MATRIX.read_text(encoding="utf-8")
        start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == table, "docs/support-matrix.md differs from the checks; rerun with UPDATE_SUPPORT_MATRIX=1"
