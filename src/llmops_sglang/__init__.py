"""Python package of the llmops.sglang project (installed by `pip install -e .`).

The collection itself lives at the repository root; this package holds the Python-side tooling
that is not part of the Galaxy artifact.
"""
from __future__ import annotations

__version__ = "0.1.0"
