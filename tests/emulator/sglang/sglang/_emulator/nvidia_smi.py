# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""nvidia-smi stand-in for emulated GPU hosts: the query forms the collection uses.

Supported: `--query-gpu=<fields> --format=csv[,noheader][,nounits]` (optionally `-i/--id`),
`-L`/`--list-gpus`, `topo -m`, and the plain status table. GPUs come from the emulator profile;
memory in use comes from running emulated servers (sglang._emulator.gpu_state).
"""
from __future__ import annotations

import datetime
import sys
from collections.abc import Callable
from dataclasses import dataclass

from sglang._emulator import gpu_state
from sglang._emulator.profile import GpuSpec, Profile, ProfileError, load_profile

USAGE_ERROR = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
IDLE_TEMPERATURE_C, BUSY_TEMPERATURE_C = 32, 58


@dataclass(frozen=True)
class GpuView:
    index: int
    gpu: GpuSpec
    used_mib: int

    @property
    def uuid(self) -> str:
        return f"{self.gpu.uuid_prefix}{self.index:04x}"

    @property
    def bus_id(self) -> str:
        return f"00000000:{(0x01 + 0x20 * self.index) % 0x100:02X}:00.0"

    @property
    def free_mib(self) -> int:
        return self.gpu.memory_mib - self.gpu.reserved_memory_mib - self.used_mib

    @property
    def busy(self) -> bool:
        return self.used_mib > 0

    @property
    def power_draw_w(self) -> float:
        return self.gpu.idle_power_w + (0.15 * self.gpu.power_limit_w if self.busy else 0.0)


@dataclass(frozen=True)
class Field:
    header: str
    unit: str | None
    value: Callable[[GpuView], object]


FIELDS: dict[str, Field] = {
    "index": Field("index", None, lambda v: v.index),
    "name": Field("name", None, lambda v: v.gpu.name),
    "uuid": Field("uuid", None, lambda v: v.uuid),
    "count": Field("count", None, lambda v: v.gpu.count),
    "memory.total": Field("memory.total", "MiB", lambda v: v.gpu.memory_mib),
    "memory.reserved": Field("memory.reserved", "MiB", lambda v: v.gpu.reserved_memory_mib),
    "memory.used": Field("memory.used", "MiB", lambda v: v.used_mib),
    "memory.free": Field("memory.free", "MiB", lambda v: v.free_mib),
    "compute_cap": Field("compute_cap", None, lambda v: v.gpu.compute_capability),
    "driver_version": Field("driver_version", None, lambda v: v.gpu.driver),
    "power.limit": Field("power.limit", "W", lambda v: f"{v.gpu.power_limit_w:.2f}"),
    "power.draw": Field("power.draw", "W", lambda v: f"{v.power_draw_w:.2f}"),
    "pci.bus_id": Field("pci.bus_id", None, lambda v: v.bus_id),
    "utilization.gpu": Field("utilization.gpu", "%", lambda v: 0),
    "utilization.memory": Field("utilization.memory", "%", lambda v: 0),
    "temperature.gpu": Field("temperature.gpu", None, lambda v: BUSY_TEMPERATURE_C if v.busy else IDLE_TEMPERATURE_C),
    "pstate": Field("pstate", None, lambda v: "P0" if v.busy else "P8"),
    "persistence_mode": Field("persistence_mode", None, lambda v: "Enabled"),
}
ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "compute_capability": "compute_cap",
           "persistence-mode": "persistence_mode", "driver": "driver_version"}


def main(argv: list[str]) -> int:
    try:
        profile = load_profile()
    except ProfileError as exc:
        print(f"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. ({exc})")
        return 9
    views = _gpu_views(profile)
    if argv[:1] == ["topo"]:
        return _topology(views, argv[1:])
    if argv in (["-L"], ["--list-gpus"]):
        for view in views:
            print(f"GPU {view.index}: {view.gpu.name} (UUID: {view.uuid})")
        return 0
    if not argv:
        print(_status_table(views, profile))
        return 0
    return _query(views, argv)


def _gpu_views(profile: Profile) -> list[GpuView]:
    processes = gpu_state.read_processes(gpu_state.state_dir(profile.state_dir))
    used = {index: sum(p.memory_mib for p in processes if p.gpu_index == index) for index in range(profile.gpu.count)}
    return [GpuView(index, profile.gpu, used[index]) for index in range(profile.gpu.count)]


def _options(argv: list[str]) -> dict[str, str] | None:
    """--name=value / --name value / -i value pairs; None on anything nvidia-smi would reject."""
    canonical = {"--query-gpu": "--query-gpu", "--format": "--format", "-i": "i", "--id": "i"}
    options: dict[str, str] = {}
    items = iter(argv)
    for item in items:
        name, equals, value = item.partition("=")
        if name not in canonical:
            return None
        options[canonical[name]] = value if equals else next(items, "")
    return options


def _query(views: list[GpuView], argv: list[str]) -> int:
    options = _options(argv)
    if options is None or "--query-gpu" not in options or not options.get("--format", "").startswith("csv"):
        print(USAGE_ERROR)
        return 2
    names = [ALIASES.get(n.strip(), n.strip()) for n in options["--query-gpu"].split(",") if n.strip()]
    for name in names:
        if name not in FIELDS:
            print(f'Field "{name}" is not a valid field to query.\n')
            return 2
    format_flags = set(options["--format"].split(",")[1:])
    selected = _select(views, options.get("i"))
    if selected is None:
        print("No devices were found")
        return 6
    fields = [FIELDS[name] for name in names]
    if "noheader" not in format_flags:
        print(", ".join(f.header + (f" [{f.unit}]" if f.unit else "") for f in fields))
    keep_units = "nounits" not in format_flags
    for view in selected:
        print(", ".join(_cell(f, view, keep_units) for f in fields))
    return 0


def _select(views: list[GpuView], ids: str | None) -> list[GpuView] | None:
    if ids is None:
        return views
    wanted = [token.strip() for token in ids.split(",")]
    chosen = [v for v in views if str(v.index) in wanted or v.uuid in wanted or v.bus_id in wanted]
    return chosen if len(chosen) == len(wanted) else None


def _cell(field: Field, view: GpuView, keep_units: bool) -> str:
    value = str(field.value(view))
    return f"{value} {field.unit}" if keep_units and field.unit else value


def _topology(views: list[GpuView], argv: list[str]) -> int:
    if argv != ["-m"] and argv != ["--matrix"]:
        print(USAGE_ERROR)
        return 2
    count = len(views)
    numa_nodes = max(1, min(views[0].gpu.numa_nodes, count))
    cpus_per_node = views[0].gpu.cpus // numa_nodes

    def node(index: int) -> int:
        return index * numa_nodes // count

    print("\t" + "\t".join(f"GPU{v.index}" for v in views) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID")
    for row in views:
        links = [" X " if row.index == col.index else ("NODE" if node(row.index) == node(col.index) else "SYS")
                 for col in views]
        first_cpu = node(row.index) * cpus_per_node
        affinity = f"{first_cpu}-{first_cpu + cpus_per_node - 1}\t{node(row.index)}\t\tN/A"
        print(f"GPU{row.index}\t" + "\t".join(links) + f"\t{affinity}")
    print(TOPOLOGY_LEGEND)
    return 0


TOPOLOGY_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""

WIDTHS = (41, 24, 22)


def _row(*cells: tuple[str, str]) -> str:
    """A table row: each cell is (left text, right text) padded to its column width."""
    parts = [left + right.rjust(width - len(left)) for (left, right), width in zip(cells, WIDTHS)]
    return "|" + "|".join(parts) + "|"


def _status_table(views: list[GpuView], profile: Profile) -> str:
    gpu = profile.gpu
    rule, split = "+" + "-" * 89 + "+", "+" + "+".join("-" * w for w in WIDTHS) + "+"
    versions = f" NVIDIA-SMI {gpu.driver}              Driver Version: {gpu.driver}      CUDA Version: {gpu.cuda_version}"
    lines = [datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y") + "       ", rule,
             "|" + versions.ljust(89) + "|", split,
             _row((" GPU  Name", "Persistence-M "), (" Bus-Id", "Disp.A "), (" Volatile Uncorr. ECC", " ")),
             _row((" Fan  Temp   Perf", "Pwr:Usage/Cap "), ("", "Memory-Usage "), (" GPU-Util", "Compute M. ")),
             _row(("", ""), ("", ""), ("", "MIG M. ")),
             "|" + "+".join("=" * w for w in WIDTHS) + "|"]
    for view in views:
        name = gpu.name if len(gpu.name) <= 24 else gpu.name[:21] + "..."
        temperature = FIELDS["temperature.gpu"].value(view)
        pstate = FIELDS["pstate"].value(view)
        lines += [
            _row((f" {view.index:>3}  {name}", "On  "), ("", f"{view.bus_id} Off "), ("", "Off ")),
            _row((f" N/A   {temperature}C    {pstate}", f"{view.power_draw_w:.0f}W / {gpu.power_limit_w:.0f}W "),
                 ("", f"{view.used_mib}MiB / {gpu.memory_mib}MiB "), ("      0%", "Default ")),
            _row(("", ""), ("", ""), ("", "N/A ")),
            split,
        ]
    lines += ["", rule, "|" + " Processes:".ljust(89) + "|",
              "|" + "  GPU   GI   CI              PID   Type   Process name                        GPU Memory ".ljust(89) + "|",
              "|" + "        ID   ID                                                               Usage      ".ljust(89) + "|",
              "|" + "=" * 89 + "|"]
    processes = gpu_state.read_processes(gpu_state.state_dir(profile.state_dir))
    if not processes:
        lines.append("|" + "  No running processes found".ljust(89) + "|")
    for process in processes:
        name = process.process_name if len(process.process_name) <= 35 else "..." + process.process_name[-32:]
        memory = f"{process.memory_mib}MiB"
        lines.append("|" + f"  {process.gpu_index:>3}   N/A  N/A  {process.pid:>15}      C   {name:<35} {memory:>10} ".ljust(89) + "|")
    lines.append(rule)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
