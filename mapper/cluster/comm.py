"""Collectives over a cluster's hierarchy: NVSwitch inside a node, the fabric between nodes.

A group of ``k`` ranks with ``g`` on each of ``k / g`` nodes moves ``n`` bytes.
Inside a node every rank has its switch port (``B_in`` per direction, times the
switch's ``collective_efficiency``); across nodes a node's NICs
(:attr:`mapper.platform.devices.Cluster.node_bandwidth_gbs`) are shared by its GPUs, all
of which communicate at once in a training step (every data-parallel group at
the same time), so a rank's share is ``B_out = node bandwidth / GPUs per node``.
Three algorithms, the cheapest chosen as NCCL chooses by size (Thakur,
Rabenseifner and Gropp, IJHPCA 2005, section 4; Patarasuk and Yuan, JPDC 2009):

* **ring** over all ``k`` ranks: bus bandwidth ``min(B_in, g B_out)`` (the ring
  crosses each node's boundary through the ``g`` ranks' NIC shares), all-reduce
  ``2 (k-1)/k n / busbw + 2 (k-1) alpha``;
* **hierarchical** (2-D): reduce-scatter inside the node, all-reduce of the
  ``n / g`` shard across nodes by recursive halving and doubling
  (Rabenseifner: ``2 (N-1)/N n/g / B_out + 2 ceil(log2 N) alpha``), all-gather
  inside the node;
* **tree** (recursive doubling, each step a full exchange through the rank's
  NIC share: ``L (alpha + n / B_out)``, ``L = ceil(log2 k)``; all-gather and
  reduce-scatter ``L alpha + (k-1)/k n / B_out``), which wins for small
  messages over many nodes.

All-gather and reduce-scatter take half an all-reduce's steps and bytes. A send
between two ranks moves ``n`` at ``B_in`` inside a node and ``B_out`` across.
``alpha`` is the switch's latency inside a node and the fabric's across.
Inside a node the ring is the bandwidth protocol's; where the node's switch
gives ``step_latency_us`` the library's low-latency ring is the other choice
(:func:`mapper.parallel.collectives.low_latency`, NCCL's LL protocol). Across
nodes it is not modelled (NCCL's own model puts its LL tree over two A100
nodes at 27 us, no less than the tree above). Every collective pays its
kernel's launch (the GPU's ``launch_us``).
Bus bandwidth is nccl-tests' definition (``algbw x 2 (k-1)/k`` for all-reduce,
``algbw x (k-1)/k`` for all-gather and reduce-scatter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.parallel.collectives import Collective, cheapest, launch_time, step_latency
from mapper.platform.devices import Platform

GB = 1e9


@dataclass(frozen=True, slots=True)
class Network:
    """The bandwidths and latencies collectives see on a (cluster) platform."""

    gpus_per_node: int
    intra_gbs: float  # per rank and direction inside a node, efficiency applied
    intra_latency: float  # seconds per step inside a node
    node_gbs: float  # what a node's NICs carry per direction, efficiency applied
    inter_latency: float  # seconds per step across nodes
    nodes: int
    intra_step: float | None = None  # seconds per low-latency step inside a node (None: not modelled)
    launch: float = 0.0  # seconds to launch a collective's kernel

    @property
    def rank_gbs(self) -> float:
        """A rank's share of its node's NICs when every rank communicates."""
        return self.node_gbs / self.gpus_per_node


def network(platform: Platform, kind: str = "gpu") -> Network:
    """The :class:`Network` of ``platform``'s devices of ``kind``: the fastest switch that joins them
    (a node without one: its slowest direct link), and the cluster's fabric (none: one node)."""
    gpus = [d.name for d in platform.devices if d.kind == kind]
    best = None
    for sw in platform.switches:
        if set(gpus) <= set(sw.ports) and (best is None or sw.bandwidth_gbs > best.bandwidth_gbs):
            best = sw
    if best is not None:
        intra, lat = best.bandwidth_gbs * best.collective_efficiency, best.latency_us * 1e-6
    else:
        bws = [(link.bandwidth_gbs, link.latency_us) for link in platform.links
               if link.src in gpus and link.dst in gpus]
        intra, lat = (min(bws)[0], max(b[1] for b in bws) * 1e-6) if bws else _relayed(platform, gpus)
    step, launch = step_latency(platform, gpus), launch_time(platform, gpus)
    c = platform.cluster
    if c is None:
        return Network(max(1, len(gpus)), intra, lat, intra * len(gpus), lat, 1, step, launch)
    return Network(max(1, len(gpus)), intra, lat, c.node_bandwidth_gbs, c.latency_us * 1e-6, c.nodes, step, launch)


def _relayed(platform: Platform, gpus: list[str]) -> tuple[float, float]:
    """GB/s and seconds of the slowest route between two of ``gpus`` that no link joins (store and
    forward through the host's memory: its links' times per byte add up); a single GPU sends
    nothing inside its node, and gets the rate of nothing, ``(inf, 0)``."""
    index = [platform.device_index(g) for g in gpus]
    per_byte, latency = 0.0, 0.0
    for a in index:
        for b in index:
            route = platform.route(a, b) if a != b else None
            if route:
                links = [platform.links[i] for i in route]
                per_byte = max(per_byte, sum(1.0 / link.bandwidth_gbs for link in links))
                latency = max(latency, sum(link.latency_us for link in links) * 1e-6)
    return (1.0 / per_byte if per_byte > 0 else math.inf), latency


def collective(net: Network, kind: str, nbytes: float, ranks: int, per_node: int) -> tuple[float, str]:
    """Seconds and algorithm of collective ``kind`` (``allreduce``, ``allgather``,
    ``reducescatter``) of ``nbytes`` among ``ranks`` ranks, ``per_node`` of them on each node."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0, "local"
    half = kind != "allreduce"  # all-gather and reduce-scatter: one pass of the ring
    f = 1.0 if half else 2.0
    k, g = ranks, max(1, min(per_node, ranks))
    nodes = max(1, k // g)
    n = float(nbytes)
    b_in, b_out = net.intra_gbs * GB, net.rank_gbs * GB
    if nodes == 1:
        inside_ring = Collective(f * (k - 1) / k * n / b_in + f * (k - 1) * net.intra_latency, "ring")
        best = cheapest(kind, n, k, net.intra_step, 1.0 / b_in, inside_ring)
        return net.launch + best.seconds, best.algorithm
    busbw = min(b_in, g * b_out)
    ring = f * (k - 1) / k * n / busbw + f * (k - 1) * net.inter_latency
    inside = f * (g - 1) / g * n / b_in + f * (g - 1) * net.intra_latency if g > 1 else 0.0
    across = f * (nodes - 1) / nodes * (n / g) / b_out + f * math.ceil(math.log2(nodes)) * net.inter_latency
    steps = math.ceil(math.log2(k))
    tree = steps * (net.inter_latency + n / b_out) if not half else steps * net.inter_latency + (k - 1) / k * n / b_out
    seconds, algorithm = min((ring, "ring"), (inside + across, "hierarchical"), (tree, "tree"))
    return net.launch + seconds, algorithm


def send(net: Network, nbytes: float, across_nodes: bool) -> float:
    """Seconds to send ``nbytes`` from one rank to another (a pipeline stage's activations)."""
    if nbytes <= 0:
        return 0.0
    if across_nodes:
        return net.inter_latency + nbytes / (net.rank_gbs * GB)
    return net.intra_latency + nbytes / (net.intra_gbs * GB)


def bus_bandwidth(kind: str, nbytes: float, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth (GB/s) of a collective that took ``seconds``."""
    algbw = nbytes / seconds / GB
    return algbw * (2 * (ranks - 1) / ranks if kind == "allreduce" else (ranks - 1) / ranks)
