"""Where the llmops.sglang collection is, which ansible.cfg runs use, and the collection's controller-side code.

The package and the collection are installed separately: `pip install llmops-sglang` and `ansible-galaxy collection
install llmops-sglang-<version>.tar.gz` (or from Galaxy). The collection is looked up the way ansible-playbook looks
up ``llmops.sglang.tune``: the configured collections paths (ANSIBLE_COLLECTIONS_PATH, `collections_path` of the
ansible.cfg in effect, the default ~/.ansible/collections:/usr/share/ansible/collections), then ``sys.path`` when
`collections_scan_sys_path` is on, first match wins. ansible-core v2.19.14 lib/ansible/plugins/loader.py
(_configure_collection_loader) builds its finder from those two settings; the same finder class normalizes the paths
here, so the order and the rules are ansible-core's own.

A development install (`pip install -e .` from a checkout, what scripts/setup.sh does) uses the checkout's ansible.cfg,
whose collections path holds the gitignored link ``collections/ansible_collections/llmops/sglang`` to the checkout.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import yaml
from ansible.config.manager import ConfigManager
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

NAMESPACE, NAME = "llmops", "sglang"
FQCN = f"{NAMESPACE}.{NAME}"
# The role whose defaults declare where runs live (tuning_run_root); the CLI and the API read it from there.
RUN_ROLE_DEFAULTS = Path("roles", "tuning_run", "defaults", "main.yml")


class CollectionNotFound(RuntimeError):
    """llmops.sglang is on none of the collections paths ansible-playbook would search."""


@dataclass(frozen=True)
class Collection:
    """The llmops.sglang collection ansible-playbook will run, as found on the collections path."""

    path: Path                 # <collections path>/ansible_collections/llmops/sglang
    version: str | None        # MANIFEST.json of an installed artifact, galaxy.yml of a source tree
    config: Path | None        # the ansible.cfg runs are given (ANSIBLE_CONFIG); None: ansible's own search
    search_paths: tuple[Path, ...]

    @property
    def collections_dir(self) -> Path:
        """The directory holding ``ansible_collections/`` (what goes on sys.path to import the collection)."""
        return self.path.parents[2]


def development_config() -> Path | None:
    """The checkout's ansible.cfg when this package is the editable install of a checkout (src/llmops_sglang)."""
    checkout = Path(__file__).resolve().parents[2]
    config = checkout / "ansible.cfg"
    return config if (checkout / "galaxy.yml").is_file() and config.is_file() else None


def configured_collections_paths(config: Path | None) -> tuple[list[str], bool]:
    """collections_path and collections_scan_sys_path with ``config`` as ansible.cfg (None: ANSIBLE_CONFIG,
    ./ansible.cfg, ~/.ansible.cfg, /etc/ansible/ansible.cfg, as ansible-core finds it); environment variables win."""
    manager = ConfigManager(None if config is None else str(config))
    # The default collections path is a template over ANSIBLE_HOME; lib/ansible/constants.py renders every
    # setting with the settings before it, which is what these variables stand for.
    home = manager.get_config_value("ANSIBLE_HOME")
    paths = manager.get_config_value("COLLECTIONS_PATHS", variables={"ANSIBLE_HOME": home})
    return paths, manager.get_config_value("COLLECTIONS_SCAN_SYS_PATH")


def collections_search_paths(config: Path | None) -> list[Path]:
    """The existing directories ansible-playbook searches for collections, in its order."""
    paths, scan_sys_path = configured_collections_paths(config)
    finder = _AnsibleCollectionFinder(paths, scan_sys_paths=scan_sys_path)
    return [Path(p) for p in finder._n_collection_paths]  # pylint: disable=protected-access


def collection_version(path: Path) -> str | None:
    """``collection_info.version`` of MANIFEST.json (an installed artifact) or ``version`` of galaxy.yml (a source
    tree), as ansible-galaxy reads them."""
    manifest, galaxy = path / "MANIFEST.json", path / "galaxy.yml"
    if manifest.is_file():
        return json.loads(manifest.read_text(encoding="utf-8"))["collection_info"]["version"]
    if galaxy.is_file():
        return str(yaml.safe_load(galaxy.read_text(encoding="utf-8"))["version"])
    return None


def find_collection() -> Collection:
    """llmops.sglang as ansible-playbook started from the current directory would find it."""
    config = development_config()
    search_paths = tuple(collections_search_paths(config))
    for directory in search_paths:
        path = directory / "ansible_collections" / NAMESPACE / NAME
        if path.is_dir():
            return Collection(path=path, version=collection_version(path), config=config, search_paths=search_paths)
    configured, scan_sys_path = configured_collections_paths(config)
    searched = ":".join(configured) + (" and sys.path" if scan_sys_path else "")
    how = ("`make setup` in the checkout links it there" if config is not None else
           "install it with `ansible-galaxy collection install llmops-sglang-<version>.tar.gz` (or from Galaxy), or "
           "point ANSIBLE_COLLECTIONS_PATH or collections_path in ansible.cfg at the directory that holds it")
    raise CollectionNotFound(f"the {FQCN} collection is on none of Ansible's collections paths ({searched}); {how}")


def default_runs_dir(collection: Collection | None = None) -> Path:
    """Where the pipeline keeps runs when tuning_run_root is not set: the role's default, resolved against the current
    directory as the role resolves it (``tuning_run_root | expanduser | realpath`` on the controller)."""
    defaults = (collection or find_collection()).path / RUN_ROLE_DEFAULTS
    root = yaml.safe_load(defaults.read_text(encoding="utf-8"))["tuning_run_root"]
    return Path(os.path.realpath(os.path.expanduser(root)))


def collection_module(name: str, collection: Collection | None = None) -> ModuleType:
    """plugins/<name>.py of the collection (``name`` dotted: ``plugin_utils.run_report``), imported by its collection
    path as Ansible's plugins import it."""
    module = f"ansible_collections.{NAMESPACE}.{NAME}.plugins.{name}"
    if module not in sys.modules:
        collections_dir = str((collection or find_collection()).collections_dir)
        if collections_dir not in sys.path:
            sys.path.append(collections_dir)
    return importlib.import_module(module)


def run_report_module() -> ModuleType:
    """plugins/plugin_utils/run_report.py, as the report action imports it."""
    return collection_module("plugin_utils.run_report")


def run_dir_module() -> ModuleType:
    """plugins/plugin_utils/run_dir.py (atomic writes into a run directory)."""
    return collection_module("plugin_utils.run_dir")


def stage_registry(collection: Collection | None = None) -> ModuleType:
    """plugins/module_utils/stages.py: the stages, declared once in the collection the runs use."""
    return collection_module("module_utils.stages", collection)


def stages(collection: Collection | None = None) -> tuple[str, ...]:
    """The routine's stages in run order (playbooks/tune.yml's): what `-e stages`, the API and the CLI name."""
    return stage_registry(collection).ROUTINE
