"""Test-wide setup: make the collection importable as ``ansible_collections.llmops.sglang``.

`scripts/setup.sh` creates the gitignored self-link ``collections/ansible_collections/llmops/sglang``;
putting ``collections/`` on ``sys.path`` lets tests import plugins by their real FQCN path, the
same way Ansible loads them.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS_DIR = REPO_ROOT / "collections"

if not (COLLECTIONS_DIR / "ansible_collections" / "llmops" / "sglang").exists():
    raise RuntimeError("collection self-link missing: run `make test` (or scripts/setup.sh) first")
if str(COLLECTIONS_DIR) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS_DIR))
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
