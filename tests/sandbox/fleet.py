"""Sandbox GPU hosts: Linux namespaces running real systemd (PID 1), journald and sshd.

Each host is `unshare`d from this machine with private mount/PID/UTS/IPC/net/cgroup namespaces,
private writable layers over every directory that could leak (see boot-host.sh), and a veth
on a bridge, so Ansible reaches it over plain SSH exactly like a GPU server. State lives in
``<repo>/.sandbox`` so that ``down`` works from any process.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOT_SCRIPT = Path(__file__).with_name("boot-host.sh")
HOST_VISIBLE_CGROUPS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))
CGROUP_PREFIX = "llmops-sandbox-"
VETH_PREFIX = "llmops-v"
# Directories every host writes into its own layer of (boot-host.sh); probed by Fleet.isolation_breaches.
ISOLATED_DIRS = ("/tmp", "/var/tmp", "/etc/systemd/system", "/root", "/home", "/opt", "/srv", "/usr/local", "/run")


class SandboxError(RuntimeError):
    """The sandbox fleet cannot be brought up or torn down; the message says why."""


@dataclass
class SandboxHost:
    name: str
    index: int
    address: str
    launcher_pid: int
    pid: int  # systemd (PID 1 inside), as seen from this machine
    emulator: str = ""  # what it was booted with, to boot it again (reboot)
    profile: str = ""


@dataclass
class FleetConfig:
    # Overridable so a second fleet (another test session) can run beside the default one.
    state_dir: Path = Path(os.environ.get("LLMOPS_SANDBOX_STATE_DIR", REPO_ROOT / ".sandbox"))
    fleet_id: str = os.environ.get("LLMOPS_SANDBOX_FLEET", "")  # prefixes cgroup and veth names
    bridge: str = os.environ.get("LLMOPS_SANDBOX_BRIDGE", "llmops-br0")
    subnet_prefix: str = os.environ.get("LLMOPS_SANDBOX_SUBNET", "10.213.0")
    name_prefix: str = "gpu"  # hosts are <prefix>1..N; cgroups and veths carry the name
    repo: Path = REPO_ROOT  # the checkout every host sees read-only at its own path
    boot_timeout_s: float = 90.0

    @property
    def gateway(self) -> str:
        return f"{self.subnet_prefix}.1"

    def address(self, index: int) -> str:
        return f"{self.subnet_prefix}.{10 + index}"


# Set to a reason, it makes unsupported_reason() give that reason on any machine: how the tests of the integration
# gate (tests/unit/layout/test_integration_gate.py) see a machine that lacks root or namespaces.
FAKE_UNSUPPORTED_ENV = "LLMOPS_SANDBOX_UNSUPPORTED"


def unsupported_reason() -> str | None:
    """Why sandbox hosts cannot run here, or None when they can."""
    if os.environ.get(FAKE_UNSUPPORTED_ENV):
        return os.environ[FAKE_UNSUPPORTED_ENV]
    if os.geteuid() != 0:
        return "sandbox hosts need root (namespaces, mounts, veths)"
    for tool in ("unshare", "nsenter", "ip", "sshd", "ssh"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"sandbox hosts need `{tool}` (run scripts/setup.sh to install it)"
    if not Path("/lib/systemd/systemd").exists():
        return "sandbox hosts need systemd installed at /lib/systemd/systemd"
    if not all((root / "cgroup.procs").exists() for root in HOST_VISIBLE_CGROUPS):
        return "sandbox hosts need the cgroup v1 name=systemd + v2 unified (hybrid) layout"
    probe = subprocess.run(["unshare", "--mount", "--net", "--pid", "--fork", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare is not permitted here: {probe.stderr.strip()}"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise SandboxError(f"{' '.join(argv)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _in_host(pid: int, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run("nsenter", "-t", str(pid), "-a", *argv, check=check)


def _child_pid(parent: int, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except FileNotFoundError:
            raise SandboxError(f"launcher {parent} exited before systemd started") from None
        if children:
            return int(children[0])
        if not _alive(parent):
            raise SandboxError(f"the boot script of launcher {parent} exited before systemd started")
        time.sleep(0.05)
    raise SandboxError(f"launcher {parent} did not fork within {timeout_s}s")


class Fleet:
    """Brings a fleet of sandbox hosts up and down; state is kept in ``config.state_dir``."""

    def __init__(self, config: FleetConfig | None = None) -> None:
        self.config = config or FleetConfig()
        self.state_file = self.config.state_dir / "state.json"
        self.key_file = self.config.state_dir / "id_ed25519"
        self.inventory_file = self.config.state_dir / "inventory.yml"

    # ---- state ------------------------------------------------------------------------------
    def hosts(self) -> list[SandboxHost]:
        if not self.state_file.exists():
            return []
        return [SandboxHost(**h) for h in json.loads(self.state_file.read_text())["hosts"]]

    def _save(self, hosts: list[SandboxHost]) -> None:
        self.state_file.write_text(json.dumps({"hosts": [asdict(h) for h in hosts]}, indent=2))

    # ---- up ---------------------------------------------------------------------------------
    def up(self, count: int, emulator: Path | None = None,
           profiles: dict[str, Path] | None = None) -> list[SandboxHost]:
        """Boot ``count`` hosts named ``<prefix>1..N``; ``profiles`` maps a host name to its emulator profile."""
        reason = unsupported_reason()
        if reason:
            raise SandboxError(reason)
        if self.hosts():
            raise SandboxError(f"a sandbox fleet is already up (state in {self.state_file}); run `down` first")
        for what, path in (("state dir (LLMOPS_SANDBOX_STATE_DIR)", self.config.state_dir),
                           ("checkout", self.config.repo), ("emulator build (LLMOPS_EMULATOR_BUILD_DIR)", emulator)):
            if path is not None and Path(path).resolve().is_relative_to("/run"):
                raise SandboxError(f"the {what} {path} is under /run, which every host replaces with its own; "
                                   "put it anywhere else")
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        self._ensure_key()
        self._ensure_bridge()
        hosts: list[SandboxHost] = []
        try:
            for index in range(1, count + 1):
                name = f"{self.config.name_prefix}{index}"
                profile = (profiles or {}).get(name) or (emulator / "profiles" / "demo.yaml" if emulator else None)
                hosts.append(self._launch(name, index, emulator, profile))
                self._save(hosts)
            for host in hosts:
                self._wire_network(host)
            for host in hosts:
                self._wait_booted(host)
        except SandboxError as exc:
            consoles = "\n".join(f"--- {h.name} console ---\n{_tail(self._console(h))}" for h in hosts)
            self.down()
            raise SandboxError(f"{exc}\n{consoles}") from None
        except BaseException:
            self.down()
            raise
        self._write_inventory(hosts)
        return hosts

    def _ensure_key(self) -> None:
        if not self.key_file.exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "llmops-sandbox", "-f", str(self.key_file))

    def _ensure_bridge(self) -> None:
        bridge = self.config.bridge
        if _run("ip", "link", "show", bridge, check=False).returncode != 0:
            _run("ip", "link", "add", bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.config.gateway}/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")

    def _launch(self, name: str, index: int, emulator: Path | None, profile: Path | None) -> SandboxHost:
        host_dir = self.config.state_dir / name
        (host_dir / "layers").mkdir(parents=True, exist_ok=True)
        cgroup = f"{CGROUP_PREFIX}{self.config.fleet_id}{name}"
        for root in cgroup_hierarchies():
            _make_cgroup(root / cgroup)
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "SBX_NAME": name,
            "SBX_CGROUP": cgroup,
            "SBX_REPO": str(self.config.repo),
            "SBX_LAYERS": str(host_dir / "layers"),
            "SBX_PUBKEY": str(self.key_file) + ".pub",
            "SBX_MACHINE_ID": uuid.uuid4().hex,
            "SBX_EMULATOR": str(emulator or ""),
            **self._emulator_inputs(host_dir, emulator, profile),
        }

        def enter_host_cgroups() -> None:
            # In every hierarchy, so the host's cgroup namespace is rooted at its own subtree:
            # the systemd inside mounts the v1 controllers itself and must not create
            # init.scope/system.slice at the machine's roots.
            for root in cgroup_hierarchies():
                (root / cgroup / "cgroup.procs").write_text("0")

        console = open(host_dir / "console.log", "wb")
        with console:
            launcher = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--mount", "--uts", "--ipc", "--net", "--cgroup",
                 "--propagation", "private", "bash", str(BOOT_SCRIPT)],
                env=env, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                preexec_fn=enter_host_cgroups, start_new_session=True)
        try:
            pid = _child_pid(launcher.pid)
        except SandboxError as exc:
            _signal(launcher.pid, signal.SIGKILL)
            _reap(launcher.pid)
            raise SandboxError(f"{name}: {exc}; its boot script said:\n{_tail(host_dir / 'console.log')}") from None
        return SandboxHost(name=name, index=index, address=self.config.address(index), launcher_pid=launcher.pid,
                           pid=pid, emulator=str(emulator or ""), profile=str(profile or ""))

    @staticmethod
    def _emulator_inputs(host_dir: Path, emulator: Path | None, profile: Path | None) -> dict[str, str]:
        """What boot-host.sh installs of the emulator: the profile as one file (its ``base`` chain merged in, for
        /etc/sglang-emulator/profile.yaml has no neighbours) and the payload release it plays, whose venv and
        checkout the host mounts at /opt/sglang/venv and /opt/sglang/src (``SBX_RELEASE``, under ``releases/``)."""
        if emulator is None or profile is None:
            return {"SBX_PROFILE": "", "SBX_RELEASE": ""}
        from tests.emulator.build import release_paths
        from tests.emulator.profiles import profile_document, profile_release

        release = profile_release(profile)
        if not release_paths(emulator, release)["venv"].is_dir():
            raise SandboxError(f"the emulator build {emulator} has no SGLang {release} (profile {profile}); "
                               "build it with the profile under tests/emulator/profiles")
        flat = host_dir / "profile.yaml"
        flat.write_text(yaml.safe_dump(profile_document(profile), sort_keys=False), encoding="utf-8")
        return {"SBX_PROFILE": str(flat), "SBX_RELEASE": release}

    def reboot(self, host: SandboxHost, profile: Path | None = None) -> SandboxHost:
        """Power ``host`` off and boot it again on the same writable layers: what it wrote to /etc, /var, /opt...
        is there again, /run and /tmp are new, and systemd starts what is enabled, as after a real reboot.
        With ``profile`` the host comes back as that emulator profile's GPU node, with its SGLang release
        installed (an upgrade or downgrade: each release's venv and checkout keep their own writable layer).
        ``host`` is updated in place (callers keep their handle)."""
        if profile is not None:
            host.profile = str(profile)
        self._power_off([host])
        _run("ip", "link", "del", self._veth(host), check=False)
        booted = self._launch(host.name, host.index, Path(host.emulator) if host.emulator else None,
                              Path(host.profile) if host.profile else None)
        host.pid, host.launcher_pid = booted.pid, booted.launcher_pid
        self._save([host if h.name == host.name else h for h in self.hosts()])
        self._wire_network(host)
        self._wait_booted(host)
        return host

    def set_profile(self, host: SandboxHost, profile: Path) -> SandboxHost:
        """``host`` as another emulator profile's GPU node. A profile of the release the host has replaces its
        /etc/sglang-emulator/profile.yaml (the emulator and nvidia-smi read it at each start); one of another release
        is an upgrade or downgrade, a reboot onto it (``reboot``). ``host`` is updated in place."""
        from tests.emulator.profiles import profile_document, profile_release
        if not host.profile or profile_release(Path(host.profile)) != profile_release(profile):
            return self.reboot(host, profile=profile)
        document = yaml.safe_dump(profile_document(profile), sort_keys=False)
        self.run(host, "sh", "-c", 'printf "%s" "$1" > /etc/sglang-emulator/profile.yaml', "sh", document)
        host.profile = str(profile)
        self._save([host if h.name == host.name else h for h in self.hosts()])
        return host

    def _power_off(self, hosts: list[SandboxHost]) -> None:
        for host in hosts:
            _signal(host.pid, signal.SIGRTMIN + 4)  # systemd: orderly poweroff
        deadline = time.monotonic() + 15
        while any(_alive(h.launcher_pid) for h in hosts) and time.monotonic() < deadline:
            time.sleep(0.1)
        for host in hosts:
            # PID 1 of a PID namespace takes every process of the namespace with it.
            _signal(host.pid, signal.SIGKILL)
            _signal(host.launcher_pid, signal.SIGKILL)
            _reap(host.launcher_pid)

    def _wire_network(self, host: SandboxHost) -> None:
        veth = self._veth(host)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(host.pid))
        _run("ip", "link", "set", veth, "master", self.config.bridge, "up")
        _run("nsenter", "-t", str(host.pid), "-n", "ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
        _run("nsenter", "-t", str(host.pid), "-n", "ip", "link", "set", "eth0", "up")
        _run("nsenter", "-t", str(host.pid), "-n", "ip", "link", "set", "lo", "up")

    def _wait_booted(self, host: SandboxHost) -> None:
        deadline = time.monotonic() + self.config.boot_timeout_s
        state = ""
        while time.monotonic() < deadline:
            if not Path(f"/proc/{host.pid}").exists():
                raise SandboxError(f"{host.name}: systemd exited during boot; see {self._console(host)}")
            state = _in_host(host.pid, "systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded") and self._ssh_port_open(host):
                if state == "degraded":
                    failed = _in_host(host.pid, "systemctl", "--failed", "--no-legend", check=False).stdout
                    raise SandboxError(f"{host.name} booted degraded; failed units:\n{failed}")
                return
            time.sleep(0.2)
        raise SandboxError(f"{host.name} did not boot within {self.config.boot_timeout_s}s "
                           f"(systemd state: {state or 'unknown'}); see {self._console(host)}")

    def _console(self, host: SandboxHost) -> Path:
        return self.config.state_dir / host.name / "console.log"

    @staticmethod
    def _ssh_port_open(host: SandboxHost) -> bool:
        try:
            with socket.create_connection((host.address, 22), timeout=0.5) as conn:
                return conn.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def _write_inventory(self, hosts: list[SandboxHost]) -> None:
        inventory = {"all": {
            "hosts": {h.name: {"ansible_host": h.address} for h in hosts},
            "vars": self.connection_vars(),
        }}
        self.inventory_file.write_text(yaml.safe_dump(inventory, sort_keys=False))

    def connection_vars(self) -> dict[str, str]:
        return {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key_file),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                                       "-o ControlMaster=no -o LogLevel=ERROR",
            "ansible_python_interpreter": "/usr/bin/python3",
        }

    # ---- use ----------------------------------------------------------------------------------
    def run(self, host: SandboxHost, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run a command inside ``host`` (all its namespaces), for test assertions."""
        return _in_host(host.pid, *argv, check=check)

    @contextlib.contextmanager
    def partitioned(self, host: SandboxHost) -> Iterator[None]:
        """``host`` cut off from this machine (the controller) in silence, as a failed switch or a firewall that drops
        its packets cuts a server off: its port on the bridge disabled, so no packet gets through either way and
        neither side is told (both ends of the veth keep their carrier: no RST, no ICMP, no local error). The port
        forwards again afterwards, whatever happened inside."""
        self._set_port_state(host, 0)
        try:
            yield
        finally:
            self._set_port_state(host, 3)

    def port_state(self, host: SandboxHost) -> str:
        """The state of ``host``'s port on the bridge (``forwarding`` when packets get through)."""
        link = json.loads(_run("ip", "-j", "-d", "link", "show", "dev", self._veth(host)).stdout)[0]
        return link["linkinfo"]["info_slave_data"]["state"]

    def _set_port_state(self, host: SandboxHost, state: int) -> None:
        # `bridge link set` (iproute2): `ip link set ... type bridge_slave state` is accepted and changes nothing.
        _run("bridge", "link", "set", "dev", self._veth(host), "state", str(state))

    def isolation_breaches(self) -> list[str]:
        """Write a probe file inside every host in each directory a host has a private layer over, and
        name every probe that shows up on this machine (an empty list: the hosts are isolated)."""
        breaches = []
        for host in self.hosts():
            probe = f".llmops-isolation-probe-{uuid.uuid4().hex}"
            paths = [Path(d) / probe for d in ISOLATED_DIRS]
            self.run(host, "sh", "-c", " && ".join(f"touch {p}" for p in paths))
            breaches += [f"{host.name} wrote {p} on this machine" for p in paths if p.exists()]
            self.run(host, "rm", "-f", *map(str, paths))
        return breaches

    # ---- down ---------------------------------------------------------------------------------
    def down(self) -> None:
        """Power every host off (SIGKILL after a grace period), then remove links, cgroups and state."""
        hosts = self.hosts()
        self._power_off(hosts)
        for host in hosts:
            _run("ip", "link", "del", self._veth(host), check=False)
        _run("ip", "link", "del", self.config.bridge, check=False)
        for root in cgroup_hierarchies():
            for cgroup in root.glob(self._cgroup_glob):
                _remove_cgroup_tree(cgroup)
        for host in hosts:
            shutil.rmtree(self.config.state_dir / host.name, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        self.inventory_file.unlink(missing_ok=True)

    def leftovers(self) -> list[str]:
        """Everything a fleet could leave on this machine that is still there."""
        found = []
        links = _run("ip", "-o", "link", "show", check=False).stdout
        for line in links.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name == self.config.bridge or name.startswith(f"{VETH_PREFIX}{self._owned_prefix}"):
                found.append(f"link {name}")
        for root in cgroup_hierarchies():
            found += [f"cgroup {p}" for p in root.glob(self._cgroup_glob)]
        state_dir = str(self.config.state_dir)
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            # root and mount point, each within this fleet's state dir (not another fleet's beside it: .sandbox-lifecycle)
            if any(path == state_dir or path.startswith(f"{state_dir}/") for path in line.split()[3:5]):
                found.append(f"mount {line.split()[4]}")
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cgroups = (proc / "cgroup").read_text()
            except OSError:
                continue
            if f":/{CGROUP_PREFIX}{self._owned_prefix}" in cgroups:
                found.append(f"process {proc.name}")
        return found

    @property
    def _owned_prefix(self) -> str:
        return f"{self.config.fleet_id}{self.config.name_prefix}"

    @property
    def _cgroup_glob(self) -> str:
        return f"{CGROUP_PREFIX}{self._owned_prefix}*"

    def _veth(self, host: SandboxHost) -> str:
        return f"{VETH_PREFIX}{self.config.fleet_id}{host.name}"


def cgroup_hierarchies() -> list[Path]:
    """Mount points of every cgroup hierarchy of this machine (v1 controllers, name=systemd, v2)."""
    roots = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2") and fields[3] == "/":
            roots.append(Path(fields[4]))
    return roots


def _make_cgroup(path: Path) -> None:
    path.mkdir(exist_ok=True)
    # A new v1 cpuset starts with no CPUs or memory nodes; tasks cannot join it until it inherits them.
    for knob in ("cpuset.cpus", "cpuset.mems"):
        if (path / knob).exists() and not (path / knob).read_text().strip():
            (path / knob).write_text((path.parent / knob).read_text())


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no console output)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie launcher is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def _remove_cgroup_tree(path: Path) -> None:
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        _rmdir_when_empty(child)
    _rmdir_when_empty(path)


def _rmdir_when_empty(path: Path) -> None:
    deadline = time.monotonic() + 5
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SandboxError(f"cgroup {path} still busy after teardown") from None
            time.sleep(0.05)


@dataclass
class MachineSnapshot:
    """What of the real machine a sandbox must never change.

    Other programs come and go in /tmp, so its entries are not compared: what a host writes there is
    checked by `Fleet.isolation_breaches` (probes written inside every host must not show here), and a
    host that cleaned the machine's /tmp is caught by a canary file this snapshot owns.
    """

    systemd_units: frozenset[str]
    cgroup_dirs: frozenset[str]
    tmp_canary: Path

    def changes_since(self, before: "MachineSnapshot") -> list[str]:
        return ([f"new unit /etc/systemd/system/{u}" for u in sorted(self.systemd_units - before.systemd_units)]
                + [f"removed unit /etc/systemd/system/{u}" for u in sorted(before.systemd_units - self.systemd_units)]
                + ([] if before.tmp_canary.exists() else [f"/tmp was cleaned: {before.tmp_canary} vanished"])
                + [f"new cgroup {c}" for c in sorted(self.cgroup_dirs - before.cgroup_dirs)])

    def release(self) -> None:
        self.tmp_canary.unlink(missing_ok=True)


_CANARY_PREFIX = ".llmops-sandbox-canary-"


def machine_snapshot() -> MachineSnapshot:
    units = Path("/etc/systemd/system")
    canary = Path("/tmp") / f"{_CANARY_PREFIX}{uuid.uuid4().hex}"
    canary.touch()
    return MachineSnapshot(
        systemd_units=frozenset(str(p.relative_to(units)) for p in units.rglob("*")) if units.exists() else frozenset(),
        # Fleets' own cgroups are checked by Fleet.leftovers(); a fleet of another session may come and go.
        cgroup_dirs=frozenset(str(d) for root in cgroup_hierarchies() for d in root.iterdir()
                              if d.is_dir() and not d.name.startswith(CGROUP_PREFIX)),
        tmp_canary=canary,
    )
