"""What a user who runs `pip install llmops-sglang` and `ansible-galaxy collection install` gets, against a GPU host:
the package's CLI (a wheel, not the checkout) runs a stage of the installed collection (its Galaxy artifact) over SSH
on a sandbox host, from a directory outside the checkout, into runs/ of that directory (issue #20's acceptance)."""
from __future__ import annotations

import json

import pytest

from tests.installed_package import install
from tests.integration.ansible import write_demo_inventory

pytestmark = pytest.mark.sandbox
HOST = "gpu1"
RUN_ID = "installed-package"


@pytest.fixture(scope="module")
def preflight(tmp_path_factory, fleet, gpu1):
    installed = install(tmp_path_factory.mktemp("installed"))
    write_demo_inventory(installed.work / "inventory", fleet.connection_vars(), {HOST: {"ansible_host": gpu1.address}})
    done = installed.cli("stage", "preflight", "-i", "inventory", "--run-id", RUN_ID, "-v", timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return installed, done


def test_the_installed_cli_runs_a_stage_of_the_installed_collection_on_a_host(preflight):
    installed, done = preflight
    # ansible-playbook's own -v lines: no checkout config in play, the playbook is the installed collection's
    assert "No config file found; using defaults" in done.stdout
    assert "running playbook inside collection llmops.sglang" in done.stdout
    stage_dir = installed.work / "runs" / RUN_ID / "preflight" / HOST
    gpus = json.loads((stage_dir / "gpus.json").read_text())
    assert len(gpus) == 4 and gpus[0]["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert json.loads((stage_dir / "stage.json").read_text())["status"] == "done"
