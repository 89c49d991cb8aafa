"""The collection's version is written once, in galaxy.yml (issue #39 item 1): the README's install line named the
1.0.0 tarball while the build made 2.0.0. What cannot derive it (static YAML read by ansible-builder,
pyproject.toml read by pip, prose) must say the same version: this test fails where one disagrees."""
from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[3]
VERSION = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
SEMVER = r"(\d+\.\d+\.\d+)"
# Where a file names a version of this collection: the built tarball, the EE image, `llmops-sglang --version` output.
MENTIONS = re.compile(rf"llmops-sglang-{SEMVER}\.tar\.gz|llmops-sglang-ee:{SEMVER}|llmops[-.]sglang {SEMVER}")
# The release history names every earlier version by design.
HISTORY = ("changelogs/", "CHANGELOG.rst")


def mentions() -> dict[str, set[str]]:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode()
    found: dict[str, set[str]] = {}
    for name in filter(None, tracked.split("\0")):
        path = REPO / name
        if name.startswith(HISTORY) or not path.is_file() or path.suffix in (".png", ".gz", ".whl"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        versions = {next(filter(None, match.groups())) for match in MENTIONS.finditer(text)}
        if versions:
            found[name] = versions
    return found


def test_every_mention_of_the_collections_version_is_galaxy_yml_s():
    found = mentions()
    assert {"README.md", "execution-environment.yml", "extensions/awx/ee-requirements.yml",
            "docs/api-cli.md"} <= set(found)
    assert {name: versions for name, versions in found.items() if versions != {VERSION}} == {}


def test_the_python_package_has_the_collections_version():
    """pip reads pyproject.toml statically; `llmops-sglang --version` shows both, so they must agree."""
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] == VERSION


def test_the_execution_environment_builds_and_tags_the_tarball_of_that_version():
    definition = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    assert [f["src"] for f in definition["additional_build_files"]] == [f"dist/llmops-sglang-{VERSION}.tar.gz"]
    assert definition["options"]["tags"] == [f"llmops-sglang-ee:{VERSION}"]
    requirements = yaml.safe_load((REPO / "extensions/awx/ee-requirements.yml").read_text())
    assert {"name": f"collections/llmops-sglang-{VERSION}.tar.gz", "type": "file"} in requirements["collections"]


# The supported ansible-core lines and controller Pythons (issue #39 items 3 and 4): ranges in the package's metadata,
# exact versions in constraints/ for the lowest and the highest line, one sanity ignore file per line.
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
CONSTRAINTS = REPO / "constraints"


def pins(path: Path) -> dict[str, str]:
    """name -> exact version of a constraints file, with the files it includes (-c)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-c "):
            found |= pins(path.parent / line[3:].strip())
        elif line:
            name, version = line.split("==")
            found[canonicalize_name(name)] = version
    return found


def supported_lines() -> list[str]:
    core = next(Requirement(r) for r in PROJECT["dependencies"] if Requirement(r).name == "ansible-core")
    return [line for line in (f"2.{minor}" for minor in range(15, 30)) if f"{line}.0" in core.specifier]


def test_the_package_declares_ranges_so_it_installs_into_an_existing_ansible_environment():
    """`ansible-core==2.19.14` and `ansible==12.3.0` downgraded or conflicted with the user's Ansible."""
    runtime = [Requirement(r) for r in PROJECT["dependencies"]]
    assert [str(r) for r in runtime if any(s.operator == "==" for s in r.specifier)] == []
    assert "ansible" not in {r.name for r in runtime}  # awx.awx is optional; the bundle is the test extra's
    assert supported_lines() == ["2.19", "2.20", "2.21"]
    python = SpecifierSet(PROJECT["requires-python"])
    assert [v for v in ("3.10", "3.11", "3.12", "3.13", "3.14", "3.15") if f"{v}.0" in python] == [
        "3.11", "3.12", "3.13", "3.14"]
    versions = "Programming Language :: Python :: 3."
    assert {c.rsplit(" ", 1)[1] for c in PROJECT["classifiers"] if c.startswith(versions)} == {
        "3.11", "3.12", "3.13", "3.14"}


@pytest.mark.parametrize("line", ["2.19", "2.21"])
def test_the_lowest_and_the_highest_line_have_exact_versions_inside_the_ranges(line):
    pinned = pins(CONSTRAINTS / f"ansible-core-{line}.txt")
    assert pinned["ansible-core"].rsplit(".", 1)[0] == line
    for requirement in map(Requirement, [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["test"]]):
        version = pinned.get(canonicalize_name(requirement.name)) or next(
            s.version for s in requirement.specifier if s.operator == "==")
        assert version in requirement.specifier, (requirement, version)


def test_setup_and_ci_install_the_constraints_of_the_lowest_and_the_highest_line():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert 'constraints=${CONSTRAINTS:-$root/constraints/ansible-core-2.19.txt}' in setup
    assert 'pip install -q -e ".[test]" -c "$constraints"' in setup
    assert "CONSTRAINTS=$PWD/constraints/ansible-core-2.21.txt" in (REPO / "scripts" / "unit-py313.sh").read_text()


def test_every_supported_line_has_its_sanity_ignore_file():
    """ansible-test reads tests/sanity/ignore-<its line>.txt; without one, sanity on 2.21 failed 15 times."""
    ignores = {path.name: path.read_text() for path in (REPO / "tests" / "sanity").glob("ignore-*.txt")}
    assert sorted(ignores) == [f"ignore-{line}.txt" for line in supported_lines()]
    assert len(set(ignores.values())) == 1  # the same Apache-2.0 modules on every line
