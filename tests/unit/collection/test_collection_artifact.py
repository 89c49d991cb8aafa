# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The Galaxy artifact (issue #20): `ansible-galaxy collection build` of a checkout holding the usual local clutter
ships only collection content; installed like a user installs it, its playbooks parse by FQCN on an inventory
without our groups and its docs show no internal options; galaxy.yml says what a Galaxy reviewer looks for."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import semantic_version
import yaml
from galaxy_importer.schema import REQUIRED_TAG_LIST

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
# What a collection artifact may hold at its top level (MANIFEST.json and FILES.json are the build's own).
CONTENT = {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "CHANGELOG.rst", "changelogs", "docs", "examples",
           "extensions", "meta", "playbooks", "plugins", "roles", "tests"}
# Left behind by local runs of the tests, the demo, pip, ansible-builder and the lint gate.
CLUTTER = [".hypothesis/constants/x", ".ansible/collections/x", ".cache/x", ".pytest_cache/x", ".benchmarks/x",
           ".sandbox-pk/x", "build/lib/x", "dist/x.tar.gz", "context/Containerfile", "runs/latest/run.json",
           "collections/ansible_collections/x", "src/llmops_sglang.egg-info/PKG-INFO", "tests/output/x",
           "plugins/filter/__pycache__/x.pyc", "changelogs/.plugin-cache.yaml"]


def _run(*argv: str, cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(home), **env})


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The tarball built from a copy of the checkout's files plus clutter, and that tarball installed."""
    tmp = tmp_path_factory.mktemp("artifact")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    checkout = tmp / "checkout"
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, checkout / name)
    for name in CLUTTER:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text("clutter\n")
    built = _run("ansible-galaxy", "collection", "build", "--output-path", str(tmp / "dist"), cwd=checkout, home=tmp)
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = tmp / "dist" / f"llmops-sglang-{GALAXY['version']}.tar.gz"
    installed = tmp / "installed"
    install = _run("ansible-galaxy", "collection", "install", "--offline", "-p", str(installed), str(tarball), cwd=tmp,
                   home=tmp, ANSIBLE_COLLECTIONS_PATH=str(installed))
    assert install.returncode == 0, install.stdout + install.stderr
    with tarfile.open(tarball) as archive:
        names = [member.name for member in archive.getmembers()]
    return {"names": names, "installed": installed, "tmp": tmp}


def test_the_tarball_holds_only_collection_content(artifact):
    names = artifact["names"]
    assert {name.split("/")[0] for name in names} <= CONTENT
    assert sorted(name for name in names if name.startswith("tests/")) == [
        "tests/sanity", "tests/sanity/ignore-2.19.txt", "tests/sanity/ignore-2.20.txt", "tests/sanity/ignore-2.21.txt"]
    assert not [name for name in names if any(name.startswith(c.split("/")[0] + "/") for c in CLUTTER
                                                if c.split("/")[0] not in CONTENT)]
    assert not [name for name in names if "__pycache__" in name or name.endswith(".plugin-cache.yaml")]
    assert {"roles/sglang_server/README.md", "roles/tuning_run/README.md", "roles/ray_cluster/README.md",
            "roles/sglang_preflight/README.md", "roles/sglang_preflight/files/flag_rules.yml", "CHANGELOG.rst",
            "changelogs/changelog.yaml", "extensions/awx/job_templates.yml"} <= set(names)


def test_the_readme_opens_with_what_a_galaxy_user_can_run(artifact):
    """Galaxy shows README.md; its first commands were `make demo`, and neither the Makefile nor tests/ is in the
    artifact (issue #39 item 12). The first block runs from the installed collection; make comes under a heading
    that says it needs a clone."""
    readme = (REPO / "README.md").read_text()
    first_block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split()[0] for line in first_block.splitlines() if line.strip()]
    assert commands and set(commands) <= {"ansible-galaxy", "pip", "cp", "ansible-playbook", "llmops-sglang"}
    shipped = artifact["installed"] / "ansible_collections" / "llmops" / "sglang"
    named = re.findall(r"ansible_collections/llmops/sglang/(\S+)", first_block)
    assert named and all((shipped / path).exists() for path in named), named
    assert "llmops.sglang.tune" in first_block
    heading_of_make = [line for line in readme[:readme.index("make demo")].splitlines() if line.startswith("## ")][-1]
    assert "clone" in heading_of_make


def test_every_playbook_parses_by_fqcn_on_an_inventory_without_our_groups(artifact):
    """rollout.yml's serial is templated before any host matches; a missing sglang_hosts group must not break it."""
    playbooks = sorted(path.stem for path in (REPO / "playbooks").glob("*.yml"))
    assert "rollout" in playbooks
    checked = _run("ansible-playbook", "--syntax-check", "-i", "localhost,",
                   *(f"llmops.sglang.{name}" for name in playbooks), cwd=artifact["tmp"], home=artifact["tmp"],
                   ANSIBLE_COLLECTIONS_PATH=str(artifact["installed"]))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_module_docs_show_no_internal_options(artifact):
    modules = sorted(path.stem for path in (REPO / "plugins" / "modules").glob("*.py"))
    listed = _run("ansible-doc", "--json", *(f"llmops.sglang.{name}" for name in modules), cwd=artifact["tmp"],
                  home=artifact["tmp"], ANSIBLE_COLLECTIONS_PATH=str(artifact["installed"]))
    assert listed.returncode == 0, listed.stderr
    docs = json.loads(listed.stdout)
    assert len(docs) == len(modules) and "llmops.sglang.moe_tune" in docs
    internal = {name: [option for option in doc["doc"]["options"] if option.startswith("_")]
                for name, doc in docs.items()}
    assert internal == {name: [] for name in docs}


# What the stage playbooks call and a playbook of the user's should not (issue #39 item 10): the controller actions
# of the run directory, and the tuning_run role's steps of a stage.
INTERNAL_MODULES = {"adoption", "canary_goodput", "flag_plan", "moe_plan", "moe_records", "run_cost", "run_inputs", "run_lock", "run_record", "run_report", "search_step"}
INTERNAL_ENTRY_POINTS = {"stage", "measure", "flag_trial", "decide", "finish"}


def test_ansible_doc_lists_internal_actions_and_entry_points_as_internal(artifact):
    def listed(*argv: str) -> dict:
        result = _run("ansible-doc", *argv, "--json", "llmops.sglang", cwd=artifact["tmp"], home=artifact["tmp"],
                      ANSIBLE_COLLECTIONS_PATH=str(artifact["installed"]))
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    modules = {name.removeprefix("llmops.sglang."): text for name, text in listed("-l").items()}
    assert {name for name, text in modules.items() if text.startswith("Internal - ")} == INTERNAL_MODULES
    assert {"server", "bench", "moe_tune", "moe_configs", "server_facts"} <= set(modules) - INTERNAL_MODULES
    entry_points = {(role.removeprefix("llmops.sglang."), entry): text
                    for role, doc in listed("-t", "role", "-l").items() for entry, text in doc["entry_points"].items()}
    assert {key for key, text in entry_points.items() if text.startswith("Internal - ")} == {
        ("tuning_run", entry) for entry in INTERNAL_ENTRY_POINTS} | {("upgrade", "goodput"), ("upgrade", "retune"),
                                                                    ("moe_kernels", "tune"), ("moe_kernels", "revert")}
    docs = json.loads(_run("ansible-doc", "--json", *(f"llmops.sglang.{name}" for name in sorted(INTERNAL_MODULES)),
                           cwd=artifact["tmp"], home=artifact["tmp"],
                           ANSIBLE_COLLECTIONS_PATH=str(artifact["installed"])).stdout)
    assert all(doc["doc"]["description"][0].startswith("Internal to the collection's stage playbooks")
               for doc in docs.values())


def test_galaxy_metadata_is_what_galaxy_and_automation_hub_require():
    assert semantic_version.Version(GALAXY["version"]) >= semantic_version.Version("1.0.0")
    changelog = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())
    assert GALAXY["version"] in changelog["releases"]
    assert set(GALAXY["tags"]) & set(REQUIRED_TAG_LIST)
    for key in ("repository", "documentation", "homepage", "issues"):
        assert GALAXY[key].startswith(GALAXY["repository"]), key
    assert "example" not in GALAXY["repository"]
    license_text = (REPO / "LICENSE").read_text()
    assert GALAXY["license"] == ["Apache-2.0"] and "END OF TERMS AND CONDITIONS" in license_text


def test_no_dependency_is_declared_and_awx_awx_is_used_only_behind_the_awx_playbooks_check():
    """Installing the tarball needs no Galaxy (issue #39 item 2): awx.awx, the one other collection used, is optional;
    only the tasks playbooks/awx_configure.yml includes after checking it is installed call it, and the `ansible`
    package pinned in pyproject ships a version they work with."""
    def task_keys(node) -> list[str]:
        if isinstance(node, dict):
            return [*node, *(key for value in node.values() for key in task_keys(value))]
        return [key for item in node for key in task_keys(item)] if isinstance(node, list) else []

    def used(paths) -> set[str]:
        keys = {key.removeprefix("group/")  # module_defaults of an action group name its collection too
                for path in paths for key in task_keys(yaml.safe_load(path.read_text()))}
        return {key.rsplit(".", 1)[0] for key in keys
                if key.count(".") == 2 and not key.startswith(("ansible.", "llmops.sglang."))}

    assert GALAXY["dependencies"] == {}
    assert used([*(REPO / "playbooks").glob("*.yml"), *(REPO / "roles").glob("*/tasks/*.yml")]) == set()
    assert used([REPO / "playbooks" / "tasks" / "awx_objects.yml"]) == {"awx.awx"}
    locations = [Path(p) for p in importlib.util.find_spec("ansible_collections").submodule_search_locations]
    bundled = [found for found in (path / "awx" / "awx" / "MANIFEST.json" for path in locations)
               if found.is_file() and "site-packages" in found.parts]
    if bundled:  # the `ansible` package bundles it up to 13.x (ansible-core 2.20)
        assert semantic_version.Version(json.loads(bundled[0].read_text())["collection_info"]["version"]) \
            in semantic_version.SimpleSpec(">=24.6.0,<25.0.0")


def test_the_tarball_installs_where_no_galaxy_server_can_be_reached(artifact):
    """No --offline, no --no-deps: as an air-gapped GPU site runs the README's install line."""
    target = artifact["tmp"] / "air-gapped"
    tarball = next((artifact["tmp"] / "dist").glob("llmops-sglang-*.tar.gz"))
    install = _run("ansible-galaxy", "collection", "install", "-p", str(target), str(tarball), cwd=artifact["tmp"],
                   home=artifact["tmp"], ANSIBLE_COLLECTIONS_PATH=str(target),
                   ANSIBLE_GALAXY_SERVER="http://127.0.0.1:9/", ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false")
    assert install.returncode == 0, install.stdout + install.stderr
    assert (target / "ansible_collections" / "llmops" / "sglang" / "MANIFEST.json").is_file()
    assert not (target / "ansible_collections" / "awx").exists()


def test_every_role_galaxy_importer_finds_has_a_readme():
    """galaxy_importer/finder.py: a directory under roles/ with tasks, vars, handlers or meta is a role."""
    roles = [path for path in (REPO / "roles").iterdir() if {"tasks", "vars", "handlers", "meta"} & {p.name for p in path.iterdir()}]
    assert len(roles) >= 4
    assert [role.name for role in roles if not (role / "README.md").is_file()] == []


def test_the_galaxy_import_check_fails_on_findings_but_the_permitted_ignore_file():
    spec = importlib.util.spec_from_file_location("galaxy_import", REPO / "scripts" / "galaxy_import.py")
    galaxy_import = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(galaxy_import)
    output = "\n".join([
        "Importing with galaxy-importer 0.4.44",
        "WARNING: Ignore files skip ansible-test sanity tests, found ignore-2.19.txt with 13 statement(s)",
        "WARNING: tests/sanity/ignore-2.19.txt:8: sanity[cannot-ignore]: Ignore file contains validate-modules:x",
        "ERROR: The import failed for the following reason: No role readme found.",
        "Importer processing completed successfully"])
    assert galaxy_import.findings(output) == output.splitlines()[2:4]
    assert galaxy_import.findings("\n".join(output.splitlines()[:2])) == []
