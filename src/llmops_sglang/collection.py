"""Where the llmops.sglang collection is, and its controller-side report code.

This package is installed from a checkout (`pip install -e .`) whose root is the collection, so the
package location is the collection location; scripts/setup.sh links the checkout into
``collections/ansible_collections/llmops/sglang``, which is how Ansible (and this module) import it by FQCN.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

CHECKOUT = Path(__file__).resolve().parents[2]
COLLECTIONS_DIR = CHECKOUT / "collections"
STAGES = ("preflight", "baseline", "flags", "moe_tune", "verify", "report")


class CollectionNotFound(RuntimeError):
    """The package is not installed from a checkout of the collection, or its collections link is missing."""


def collection_root() -> Path:
    """The checkout that is the collection (has galaxy.yml and playbooks/)."""
    if not (CHECKOUT / "galaxy.yml").is_file() or not (CHECKOUT / "playbooks").is_dir():
        raise CollectionNotFound(f"{CHECKOUT} is not the llmops.sglang collection; install this package with "
                                 "`pip install -e .` from a checkout of the collection")
    return CHECKOUT


def stage_playbook(stage: str) -> Path:
    """playbooks/<stage>.yml of the collection."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    return collection_root() / "playbooks" / f"{stage}.yml"


def default_runs_dir() -> Path:
    """Where the pipeline keeps runs when tuning_run_root is not set (the role's `playbook_dir/../runs`)."""
    return collection_root() / "runs"


def ansible_config() -> Path | None:
    """The checkout's ansible.cfg (collections path, roles path), when there is one."""
    config = collection_root() / "ansible.cfg"
    return config if config.is_file() else None


def run_report_module() -> ModuleType:
    """plugins/plugin_utils/run_report.py, imported by its collection path as the report action does."""
    if not (COLLECTIONS_DIR / "ansible_collections" / "llmops" / "sglang").exists():
        raise CollectionNotFound(f"{COLLECTIONS_DIR}/ansible_collections/llmops/sglang is missing; "
                                 "run scripts/setup.sh (or make setup) once")
    if str(COLLECTIONS_DIR) not in sys.path:
        sys.path.append(str(COLLECTIONS_DIR))
    return importlib.import_module("ansible_collections.llmops.sglang.plugins.plugin_utils.run_report")


def run_dir_module() -> ModuleType:
    """plugins/plugin_utils/run_dir.py (atomic writes into a run directory)."""
    run_report_module()  # puts the collection on the import path
    return importlib.import_module("ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir")
