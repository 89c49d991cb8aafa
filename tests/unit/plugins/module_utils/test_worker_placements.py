"""parse_worker_placements: which Ray node and GPU tuned each batch size (the emulated tuner's placement lines)."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils.moe_configs import parse_worker_placements

CLUSTER_OUTPUT = """\
Start tuning over 976 configurations to create E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json...
\x1b[36m(BenchmarkWorker pid=379, ip=10.213.5.12)\x1b[0m Mon Nov 30 20:21:58 2026] Completed tuning for batch_size=4
[worker node=10.213.5.11 host=gpu1 node_id=54606d577808d0e63dfe24ba3c99e65782042bf1324472d713b8df3b gpu=0] batch_size=1 kernel_time=37.14us
[worker node=10.213.5.12 host=gpu2 node_id=6abd5ee843058adf3e50878745766b6d3b34a77b94edfee9b2e4936e gpu=3] batch_size=4 kernel_time=108.91us
[worker node=10.213.5.13 host=gpu3 node_id=0be1c1c7a6b2f3d4e5f60718293a4b5c6d7e8f9012345678901234ab gpu=2] batch_size=512 kernel_time=2449.10us
Tuning took 5.10 seconds
"""


def test_every_placement_line_is_read_in_order():
    assert parse_worker_placements(CLUSTER_OUTPUT) == [
        {"batch_size": 1, "node": "10.213.5.11", "host": "gpu1", "gpu": 0},
        {"batch_size": 4, "node": "10.213.5.12", "host": "gpu2", "gpu": 3},
        {"batch_size": 512, "node": "10.213.5.13", "host": "gpu3", "gpu": 2},
    ]


def test_upstream_output_without_placement_lines_gives_none():
    assert parse_worker_placements(CLUSTER_OUTPUT.replace("[worker node=", "[elsewhere=")) == []
