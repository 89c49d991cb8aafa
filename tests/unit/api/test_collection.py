"""Finding the llmops.sglang collection as ansible-playbook does: development checkout, installed artifact, config."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from llmops_sglang import collection
from llmops_sglang.collection import CollectionNotFound, default_runs_dir, find_collection

CHECKOUT = Path(__file__).resolve().parents[3]


def installed_collection(collections_dir: Path, version: str, runs_root: str = "runs") -> Path:
    """What `ansible-galaxy collection install -p <collections_dir>` leaves: the content and its MANIFEST.json."""
    path = collections_dir / "ansible_collections" / "llmops" / "sglang"
    (path / "roles" / "tuning_run" / "defaults").mkdir(parents=True)
    (path / "roles" / "tuning_run" / "defaults" / "main.yml").write_text(f"tuning_run_root: {runs_root}\n")
    (path / "MANIFEST.json").write_text(json.dumps({"collection_info": {"namespace": "llmops", "name": "sglang",
                                                                        "version": version}}))
    return path


@pytest.fixture
def pip_installed(monkeypatch, tmp_path):
    """This package as a wheel installs it: no checkout around it; ansible's own config search from tmp_path."""
    monkeypatch.setattr(collection, "development_config", lambda: None)
    # tests/conftest.py puts the checkout's collections link on sys.path, which ansible scans too
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(CHECKOUT / "collections")])
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANSIBLE_HOME", str(tmp_path / "ansible-home"))  # the default path: $ANSIBLE_HOME/collections
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_development_install_uses_the_checkout_through_its_config():
    found = find_collection()
    assert found.path == CHECKOUT / "collections" / "ansible_collections" / "llmops" / "sglang"
    assert found.path.resolve() == CHECKOUT and found.config == CHECKOUT / "ansible.cfg"
    assert found.version == str(yaml.safe_load((CHECKOUT / "galaxy.yml").read_text())["version"])


def test_an_installed_collection_is_found_on_the_collections_path_env(pip_installed, monkeypatch):
    path = installed_collection(pip_installed / "colls", "2.3.4")
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(pip_installed / "colls"))
    found = find_collection()
    assert (found.path, found.version, found.config) == (path, "2.3.4", None)
    assert found.collections_dir == pip_installed / "colls"


def test_ansible_cfg_of_the_current_directory_counts_with_paths_relative_to_it(pip_installed, monkeypatch):
    path = installed_collection(pip_installed / "project" / "collections", "1.0.0")
    (pip_installed / "project" / "ansible.cfg").write_text("[defaults]\ncollections_path = ./collections\n")
    monkeypatch.chdir(pip_installed / "project")
    assert find_collection().path == path


def test_ansible_home_default_path_is_searched(pip_installed):
    path = installed_collection(pip_installed / "ansible-home" / "collections", "1.0.0")
    assert find_collection().path == path


def test_the_first_collections_path_that_holds_it_wins(pip_installed, monkeypatch):
    first = installed_collection(pip_installed / "a", "1.0.0")
    installed_collection(pip_installed / "b", "0.9.0")
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", f"{pip_installed / 'missing'}:{pip_installed / 'a'}:"
                                                   f"{pip_installed / 'b'}")
    assert find_collection().path == first


def test_not_installed_says_where_it_looked_and_how_to_install(pip_installed, monkeypatch):
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(pip_installed / "empty"))
    with pytest.raises(CollectionNotFound, match=r"on none of Ansible's collections paths \(.*/empty and sys\.path\); "
                                                 r"install it with `ansible-galaxy collection install"):
        find_collection()


def test_the_default_runs_dir_is_the_roles_default_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_runs_dir() == tmp_path / "runs"


def test_the_default_runs_dir_is_read_from_the_collection_found(pip_installed, monkeypatch):
    installed_collection(pip_installed / "colls", "1.0.0", runs_root="~/llmops/runs")
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(pip_installed / "colls"))
    monkeypatch.setenv("HOME", str(pip_installed / "home"))
    assert default_runs_dir() == pip_installed / "home" / "llmops" / "runs"  # ~ expanded, as the role does


def test_a_development_install_without_its_link_says_to_run_setup(monkeypatch):
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", "/nonexistent")  # wins over the checkout's ansible.cfg
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(CHECKOUT / "collections")])
    with pytest.raises(CollectionNotFound, match=r"\(/nonexistent and sys\.path\); `make setup` in the checkout"):
        find_collection()
