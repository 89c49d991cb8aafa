"""#15 item 3 on a sandbox host: a server deployed with an API key. The key is nowhere a local user, the journal,
server_facts or the playbook's -vvv output could show it; the server enforces it; taking it away removes the key
file and its backup."""
from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from tests.integration.ansible import task_results
from tests.integration.sglang_server import BASELINE, deploy, host_state, http_status

pytestmark = pytest.mark.sandbox
PLAYBOOKS = Path(__file__).parent / "playbooks"
KEY = f"sk-llmops-{secrets.token_hex(12)}"
ENV_FILE = "/etc/sglang/sglang.env"
BACKUP = ENV_FILE + ".llmops-backup"
UNPRIVILEGED_PS = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ps", "-ww", "-eo", "user,args")
# HTTP status of a URL with an optional bearer token, asked from the host itself.
_AUTH_PROBE = """
import sys, urllib.error, urllib.request
headers = {"Authorization": "Bearer " + sys.argv[2]} if len(sys.argv) > 2 else {}
try:
    print(urllib.request.urlopen(urllib.request.Request(sys.argv[1], headers=headers), timeout=5).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


def status_with(fleet, host, path: str, *token: str) -> int:
    return int(fleet.run(host, "python3", "-c", _AUTH_PROBE, f"http://127.0.0.1:30000{path}", *token).stdout)


def exists(fleet, host, path: str) -> bool:
    return fleet.run(host, "test", "-e", path, check=False).returncode == 0


@pytest.fixture(scope="module")
def keyed(fleet, runner, gpu1):
    """The baseline deployed with KEY at -vvv; afterwards the baseline without a key again."""
    result, res = deploy(runner, BASELINE, sglang_server_api_key=KEY, verbosity=3)
    assert result.status == "successful", result.stdout[-3000:]
    yield result, res
    deploy(runner, BASELINE)


def test_the_key_is_in_no_argv_unit_journal_environment_or_ansible_output(fleet, gpu1, keyed):
    result, res = keyed
    assert res["restarted"] is True
    ps = fleet.run(gpu1, *UNPRIVILEGED_PS).stdout
    assert "sglang.launch_server" in ps, "the unprivileged user does see the server's command line"
    assert KEY not in ps and "--api-key" not in ps

    unit, _, active = host_state(fleet, gpu1)
    assert active == "active" and KEY not in unit and "LoadCredential=sglang-api-key:/etc/sglang/sglang.env" in unit

    journal = fleet.run(gpu1, "journalctl", "--no-pager", "--all", "-o", "cat", "-u", "sglang.service").stdout
    assert KEY not in journal
    assert "api_key='***'" in res["startup_log"], "SGLang logged its server args, the key masked"

    main_pid = fleet.run(gpu1, "systemctl", "show", "-p", "MainPID", "--value", "sglang.service").stdout.strip()
    for proc_file in ("environ", "cmdline"):  # read as root
        assert KEY not in fleet.run(gpu1, "cat", f"/proc/{main_pid}/{proc_file}").stdout

    key_file = fleet.run(gpu1, "stat", "-c", "%U %a", ENV_FILE).stdout.split()
    assert key_file == ["root", "600"]
    assert not exists(fleet, gpu1, BACKUP), "the key file's backup does not outlive the deploy"

    assert "ESTABLISH SSH CONNECTION" in result.stdout, "the run really was -vvv"
    assert KEY not in result.stdout
    assert KEY not in json.dumps(result.events), "ansible-runner's job events"


def test_the_server_enforces_the_key(fleet, gpu1, keyed):
    assert status_with(fleet, gpu1, "/v1/models") == 401
    assert status_with(fleet, gpu1, "/v1/models", "wrong") == 401
    assert status_with(fleet, gpu1, "/v1/models", KEY) == 200


def test_server_facts_masks_the_key_it_read_from_the_key_file(fleet, runner, gpu1, keyed):
    result = runner.run(PLAYBOOKS / "server_facts.yml", limit="gpu1", verbosity=3)
    assert result.status == "successful", result.stdout[-3000:]
    res = task_results(result, "Read the server facts")["gpu1"]
    assert res["server_info"] is not None, "the key from the key file opened /server_info"
    assert res["server_info"]["api_key"] == "***"
    assert res["facts"]["server_args"]["api_key"] == "***"
    assert KEY not in json.dumps(res) and KEY not in result.stdout and KEY not in json.dumps(result.events)


def test_taking_the_key_away_removes_the_key_file_and_its_backup(fleet, runner, gpu1, keyed):
    result, res = deploy(runner, BASELINE)
    assert result.status == "successful", result.stdout[-3000:]
    assert res["changed"] and res["restarted"] and "remove API key file" in res["actions"]
    assert not exists(fleet, gpu1, ENV_FILE) and not exists(fleet, gpu1, BACKUP)
    assert "LoadCredential" not in host_state(fleet, gpu1)[0]
    assert http_status(fleet, gpu1, 30000, "/v1/models") == 200, "no key, no authentication"
