"""The collection's version is written once, in galaxy.yml (issue #39 item 1): the README's install line named the
1.0.0 tarball while the build made 2.0.0. What cannot derive it (static YAML read by ansible-builder,
pyproject.toml read by pip, prose) must say the same version: this test fails where one disagrees."""
from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import yaml

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
