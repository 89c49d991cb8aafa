"""Foundation proof: real systemd + journald + sshd on sandbox hosts, driven by Ansible over SSH."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.integration.ansible import task_results
from tests.sandbox.fleet import Fleet, FleetConfig, machine_snapshot

pytestmark = pytest.mark.sandbox
PLAYBOOK = Path(__file__).parent / "playbooks" / "proof_systemd.yml"
TWO_HOSTS = "gpu1,gpu2"


def test_deploy_read_journal_restart_idempotent(fleet, runner):
    first = runner.run(PLAYBOOK, limit=TWO_HOSTS)
    assert first.status == "successful", first.stdout
    assert all(first.hosts[h].changed > 0 for h in ("gpu1", "gpu2"))
    invocations = {h: r["status"]["InvocationID"]
                   for h, r in task_results(first, "Read the invocation id").items()}
    journals = task_results(first, "Read this invocation's journal")
    assert set(journals) == {"gpu1", "gpu2"}
    for res in journals.values():
        assert res["stdout_lines"] == [line for line in res["stdout_lines"] if "proof started" in line]
        assert len(res["stdout_lines"]) == 1

    second = runner.run(PLAYBOOK, limit=TWO_HOSTS)
    assert second.status == "successful", second.stdout
    assert all(stats.changed == 0 for stats in second.hosts.values()), "a second run with the same inputs must change nothing"

    restarted = runner.run(PLAYBOOK, {"proof_restart": True}, limit=TWO_HOSTS)
    assert restarted.status == "successful", restarted.stdout
    new_invocations = {h: r["status"]["InvocationID"]
                       for h, r in task_results(restarted, "Read the invocation id").items()}
    for host in ("gpu1", "gpu2"):
        assert new_invocations[host] != invocations[host]
        # The journal now holds two starts; selecting by invocation id returns only the latest.
        journal = task_results(restarted, "Read this invocation's journal")[host]["stdout_lines"]
        assert len(journal) == 1
        all_starts = fleet.run(next(h for h in fleet.hosts() if h.name == host),
                               "journalctl", "--no-pager", "-o", "cat", "-u", "llmops-proof.service").stdout
        assert all_starts.count("proof started") == 2


def test_hosts_are_isolated_from_the_machine(fleet):
    host = fleet.hosts()[0]
    assert fleet.isolation_breaches() == []
    fleet.run(host, "sh", "-c", "touch /etc/llmops-isolation-probe")
    assert not Path("/etc/llmops-isolation-probe").exists()
    assert fleet.run(host, "cat", "/proc/1/comm").stdout.strip() == "systemd"
    assert fleet.run(host, "hostname").stdout.strip() == host.name
    write_sysctl = fleet.run(host, "sh", "-c", "echo 1 > /proc/sys/vm/drop_caches", check=False)
    assert write_sysctl.returncode != 0, "global sysctls must be read-only inside a sandbox host"


def test_a_second_fleet_tears_down_without_traces():
    config = FleetConfig(state_dir=Path(__file__).resolve().parents[2] / ".sandbox-lifecycle",
                         bridge="llmops-br9", subnet_prefix="10.213.9", name_prefix="life")
    lifecycle = Fleet(config)
    before = machine_snapshot()
    hosts = lifecycle.up(1)
    # What other programs on the machine do meanwhile is not the sandbox's doing (issue #15 item 12).
    others = tempfile.NamedTemporaryFile(prefix="another-users-file-", dir="/tmp")
    try:
        assert lifecycle.run(hosts[0], "systemctl", "is-system-running").stdout.strip() == "running"
        assert lifecycle.leftovers(), "a running fleet must be visible to the leftover check"
        assert lifecycle.isolation_breaches() == []
    finally:
        lifecycle.down()
    after = machine_snapshot()
    changes = after.changes_since(before)
    before.release()
    after.release()
    others.close()
    assert lifecycle.leftovers() == []
    assert changes == []
    shutil.rmtree(config.state_dir)


def test_hosts_boot_wherever_the_checkout_and_state_are(tmp_path):
    """A clone in $HOME (beneath the hosts' overlay of /home or /root) with its state in /tmp (beneath
    their tmpfs) boots, and the host sees that checkout read-only at its own path (issue #15 item 1)."""
    home_checkout = Path(tempfile.mkdtemp(prefix="llmops-clone-", dir=Path.home()))
    (home_checkout / "marker").write_text("checkout")
    config = FleetConfig(state_dir=tmp_path / "state", repo=home_checkout, bridge="llmops-br8",
                         subnet_prefix="10.213.8", name_prefix="wh")
    where = Fleet(config)
    try:
        hosts = where.up(1)
        assert where.run(hosts[0], "cat", str(home_checkout / "marker")).stdout == "checkout"
        writable = where.run(hosts[0], "touch", str(home_checkout / "new"), check=False)
        assert writable.returncode != 0 and not (home_checkout / "new").exists()
        assert where.isolation_breaches() == []
    finally:
        where.down()
        shutil.rmtree(home_checkout)
    assert where.leftovers() == []
