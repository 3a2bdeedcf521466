"""Bus bandwidth of the cluster collective model against published nccl-tests figures.

    python benchmarks/collectives.py

The model (mapper.parallel.collectives) takes its efficiencies from NCCL's own topology
constants (src/graph/topo.h: an A100 NVLink 3 link at 20 of 25 GB/s, a 100 Gb/s
NIC at 12 of 12.5 GB/s), not from these measurements. Published figures, all
for all-reduce of large messages (bus bandwidth as nccl-tests defines it in its
doc/PERFORMANCE.md):

* 8x A100 SXM4 in one DGX A100 over NVSwitch: about 230 GB/s (nccl-tests
  all_reduce_perf results NVIDIA publishes for DGX A100);
* DGX A100 nodes over 8x 200 Gb/s HDR InfiniBand: about 190 GB/s (the same
  for several nodes of a DGX SuperPOD, rail-optimised fat tree).

Model predictions do not depend on the machine's load.
"""

from __future__ import annotations

from mapper.parallel.collectives import bus_bandwidth, collective, network
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

ROWS = [  # (label, nodes, ranks, ranks per node, published bus GB/s)
    ("8x A100, one DGX A100 (NVSwitch)", 1, 8, 8, 230.0),
    ("2 DGX A100 nodes, 8 HDR NICs each", 2, 16, 8, 190.0),
    ("16 DGX A100 nodes", 16, 128, 8, 190.0),
]


def main() -> None:
    size = 2.0**30  # 1 GiB: the bandwidth-bound end of nccl-tests' sweep
    print(f"{'case':38s} {'model GB/s':>10s} {'published':>10s} {'ratio':>6s}  algorithm")
    for label, nodes, ranks, per_node, published in ROWS:
        net = network(with_nodes(load_platform("selene"), nodes))
        seconds, alg = collective(net, "allreduce", size, ranks, per_node)
        bw = bus_bandwidth("allreduce", size, seconds, ranks)
        print(f"{label:38s} {bw:10.1f} {published:10.1f} {bw / published:6.2f}  {alg}")
    print("\nH100 (no published row checked here): one DGX H100 node and 4 nodes")
    for nodes, ranks in ((1, 8), (4, 32)):
        net = network(with_nodes(load_platform("dgx-h100-superpod"), nodes))
        seconds, alg = collective(net, "allreduce", size, ranks, 8)
        print(f"  {ranks:4d} H100: {bus_bandwidth('allreduce', size, seconds, ranks):7.1f} GB/s ({alg})")


if __name__ == "__main__":
    main()
