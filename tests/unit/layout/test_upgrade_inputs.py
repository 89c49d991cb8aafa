"""playbooks/upgrade.yml's inputs are role defaults (roles/upgrade), so an operator's inventory overrides them (issue
#37): a value in the inventory's group_vars or host_vars reaches every play of the playbook, an input left out takes
the role's default, and a wrong one fails before anything changes, naming the input.

The variables are what Ansible itself gives each play for each host (its VariableManager over the real playbook and
inventory, in a subprocess as ansible-playbook loads the collection); the refusals come from a real ansible-playbook run
of upgrade.yml on localhost, which stops at the role's checks, before it enters a run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
UPGRADE = REPO / "playbooks" / "upgrade.yml"
ROLE = REPO / "roles" / "upgrade"
INPUT_PLAYS = ("Upgrade - install", "Upgrade - canary A/B")
# Each play's variables for each host, as ansible-playbook would template them (argv: playbook, inventory,
# collections dir, comma-separated names, and optionally a task's name: the variables that task sees, its blocks' and
# imported role's included).
PLAY_VARS = """
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[3]])
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.playbook import Playbook
from ansible.playbook.block import Block
from ansible.template import Templar
from ansible.vars.manager import VariableManager
loader = DataLoader()
inventory = InventoryManager(loader=loader, sources=[sys.argv[2]])
variables = VariableManager(loader=loader, inventory=inventory)
def tasks(blocks):
    for item in blocks:
        if isinstance(item, Block):
            yield from tasks(item.block + item.rescue + item.always)
        else:
            yield item
found = {}
for play in Playbook.load(sys.argv[1], variable_manager=variables, loader=loader).get_plays():
    named = sys.argv[5] if len(sys.argv) > 5 else None
    task = next((t for t in tasks(play.compile()) if t.name == named), None) if named else None
    if named and task is None:
        continue
    for host in inventory.get_hosts(play.hosts):
        known = variables.get_vars(play=play, host=host, task=task)
        templar = Templar(loader=loader, variables=known)
        found.setdefault(play.get_name(), {})[host.name] = {
            name: templar.template(known[name]) for name in sys.argv[4].split(",") if name in known}
print(json.dumps(found))
"""


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "HOME": str(tmp_path),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp"), "ANSIBLE_NOCOLOR": "1"}


def _inventory(tmp_path: Path, hosts: dict, group_vars: dict, host_vars: dict) -> Path:
    """An inventory directory as an operator keeps one: hosts.yml, group_vars/sglang_hosts.yml, host_vars/<host>.yml."""
    directory = tmp_path / "inventory"
    (directory / "group_vars").mkdir(parents=True)
    (directory / "host_vars").mkdir()
    (directory / "hosts.yml").write_text(yaml.safe_dump({"sglang_hosts": {"hosts": hosts}}))
    (directory / "group_vars" / "sglang_hosts.yml").write_text(yaml.safe_dump(group_vars))
    for host, values in host_vars.items():
        (directory / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(values))
    return directory


def _play_vars(tmp_path: Path, inventory: Path, names: list[str], task: str | None = None) -> dict:
    """play name prefix -> host -> {name: value} for the plays that take the upgrade's inputs (with ``task``, the
    variables that task sees, in the plays that have it)."""
    result = subprocess.run([sys.executable, "-c", PLAY_VARS, str(UPGRADE), str(inventory), str(REPO / "collections"),
                             ",".join(names), *([task] if task else [])], cwd=REPO, env=_env(tmp_path),
                            capture_output=True, text=True, timeout=120, check=True)
    plays = json.loads(result.stdout)
    return {prefix: hosts for prefix in INPUT_PLAYS for name, hosts in plays.items() if name.startswith(prefix)}


def _defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def test_the_inventorys_group_and_host_vars_override_the_upgrade_defaults(tmp_path):
    inventory = _inventory(tmp_path, {"gpu1": None, "gpu2": None},
                           {"upgrade_canary": "gpu2", "upgrade_canary_policy": {"max_capacity_loss_pct": 5},
                            "upgrade_retune_moe": {"batch_sizes": "auto"}},
                           {"gpu1": {"upgrade_retune": False, "upgrade_venvs_dir": "/srv/venvs"}})
    names = ["upgrade_canary", "upgrade_canary_policy", "upgrade_retune_moe", "upgrade_retune", "upgrade_venvs_dir",
             "upgrade_carry"]
    for play, hosts in _play_vars(tmp_path, inventory, names).items():
        for host in ("gpu1", "gpu2"):
            assert hosts[host]["upgrade_canary"] == "gpu2", (play, host)
            assert hosts[host]["upgrade_canary_policy"] == {"max_capacity_loss_pct": 5}, (play, host)
            assert hosts[host]["upgrade_retune_moe"] == {"batch_sizes": "auto"}, (play, host)
            assert hosts[host]["upgrade_carry"] is True, (play, host)  # left out: the role's default
        assert (hosts["gpu1"]["upgrade_retune"], hosts["gpu1"]["upgrade_venvs_dir"]) == (False, "/srv/venvs"), play
        assert (hosts["gpu2"]["upgrade_retune"], hosts["gpu2"]["upgrade_venvs_dir"]) == (True, "/opt/sglang/venvs"), play


def test_the_defaults_follow_the_inventorys_deployment_variables(tmp_path):
    inventory = _inventory(tmp_path, {"gpu1": None},
                           {"sglang_baseline_args": {"tp_size": 4},
                            "sglang_environment": {"SGLANG_MOE_CONFIG_DIR": "/var/lib/moe"}}, {})
    for play, hosts in _play_vars(tmp_path, inventory, ["upgrade_server_args", "upgrade_moe_config_dir"]).items():
        assert hosts["gpu1"] == {"upgrade_server_args": {"tp_size": 4}, "upgrade_moe_config_dir": "/var/lib/moe"}, play


def test_every_default_is_a_checked_input_of_both_entry_points():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    assert specs["main"]["options"] == specs["canary"]["options"]
    options = specs["main"]["options"]
    defaults = _defaults()
    assert set(defaults) <= set(options), sorted(set(defaults) - set(options))
    for name, spec in options.items():
        assert spec.get("default", defaults.get(name)) == defaults.get(name), name  # a documented default is the role's
    assert options["upgrade_version"]["required"] is True and "upgrade_version" not in defaults


def _refused(tmp_path: Path, group_vars: dict, extravars: dict) -> str:
    """upgrade.yml on localhost: its output, asserting that it failed before it entered a run."""
    inventory = _inventory(tmp_path, {"localhost": {"ansible_connection": "local",
                                                    "ansible_python_interpreter": sys.executable}}, group_vars, {})
    runs = tmp_path / "runs"
    result = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(UPGRADE), "-i", str(inventory),
                             "-e", json.dumps({"tuning_run_root": str(runs), **extravars})],
                            cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode != 0, result.stdout[-3000:]
    assert not runs.exists(), "refused before the run was entered"
    return result.stdout


def test_a_wrong_policy_in_the_inventory_is_refused_naming_it(tmp_path):
    output = _refused(tmp_path, {"upgrade_canary_policy": {"max_capacity_loss_pct": -1}}, {"upgrade_version": "0.5.24"})
    assert "upgrade_canary_policy.max_capacity_loss_pct: a number >= 0" in output, output[-3000:]


def test_a_wrong_type_is_refused_naming_the_input(tmp_path):
    output = _refused(tmp_path, {"upgrade_carry": "perhaps"}, {"upgrade_version": "0.5.24"})
    assert "upgrade_carry" in output and "bool" in output, output[-3000:]
    assert "missing required arguments: upgrade_version" in _refused(tmp_path / "unnamed", {}, {})
