"""Every collective, priced one way: by the task graphs the splitters build and by the plan models.

A group of ``k`` ranks, ``g`` on each of ``N = k / g`` nodes, moves ``n``
bytes (the whole tensor; for an all-to-all, what one rank sends in all). A
:class:`Network` says what a rank sees: inside a node its port of the switch
that joins the group (``B_in`` per direction, times the switch's
``collective_efficiency``: NCCL's own link model, src/graph/topo.h) and the
switch's latency ``a_in``; across nodes its share of the node's NICs
(``B_out = node bandwidth / GPUs per node``: every rank communicates at once in
a training step) and the fabric's latency ``a_out``. :func:`network` reads a
platform's (the plan models'); :func:`group` the network among some devices of
a platform, cluster nodes flattened or not (the task graphs'). Both price with
:func:`collective`, so a plan and the graph built from it agree.

The algorithms are Thakur, Rabenseifner and Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), 2005, section 4, and
Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms", JPDC 69(2),
2009, the cheapest chosen, as NCCL chooses by size. ``f`` is 2 for an
all-reduce and 1 for an all-gather or a reduce-scatter (half its steps and
bytes); ``L = ceil(log2 k)``:

* **ring** over all ``k`` ranks at bus bandwidth ``min(B_in, g B_out)`` (the
  ring crosses each node's boundary through its ``g`` ranks' NIC shares):
  ``f (k-1)/k n / busbw + f (k-1) a`` (``a``: ``a_out`` once the ring leaves
  the node); a broadcast pipelines ``n`` down the ring, ``(k-1) a + n / busbw``;
* **low-latency ring** inside a node whose switch gives ``step_latency_us``
  (``h``): NCCL's LL protocol, :func:`low_latency`, a fixed start of
  :data:`LL_BASE_US` and ``h`` a step, at a quarter of the bandwidth for an
  all-reduce and a third for the others (8-byte lines of which 4 are flags):
  the constants of NCCL's tuning model (NVIDIA/nccl v2.12 src/graph/tuning.cc,
  ``baseLat`` and ``hwLat`` of Ring/LL, the LL ``busBw`` factors). It wins for
  the few kilobytes of tensor-parallel decoding;
* across nodes, **hierarchical** (2-D): the reduce-scatter inside the node, the
  ``n / g`` shard across nodes by recursive halving and doubling
  (Rabenseifner: ``f (N-1)/N n/g / B_out + f ceil(log2 N) a_out``), the
  all-gather inside the node;
* **tree** (recursive doubling, each step a whole exchange: all-reduce and
  broadcast ``L (a + n / B)``, all-gather and reduce-scatter ``L a + (k-1)/k n
  / B``), across nodes through the rank's NIC share, where it wins for small
  messages over many nodes. Inside a node only where the switch gives no
  low-latency step (the library's protocols unknown: MPI libraries take it for
  small messages); where it gives one, NCCL's, whose trees inside a node are
  chains no shorter than its ring ("Massively Scale Your Deep Learning
  Training with NCCL 2.4", NVIDIA, 2019), the rings alone are priced.

**All-to-all** (a mixture of experts' dispatch and combine) by pairwise exchange
(Thakur et al. 2005, section 4): ``k - 1`` steps, each sending ``n/k`` to
one other rank, ``g - 1`` of them inside the node and ``k - g`` across,
``(g-1) (a_in + n/k / B_in) + (k-g) (a_out + n/k / B_out)``; across nodes also
**hierarchically** (DeepSpeed-MoE, Rajbhandari et al., ICML 2022;
Tutel, Hwang et al., MLSys 2023): an all-to-all inside the node gathers each
destination node's data on one rank per lane, ``(g-1) (a_in + n/g / B_in)``,
then the ranks of a lane exchange across nodes, ``(N-1) (a_out + n/N / B_out)``:
as many bytes cross the fabric, in ``N - 1`` steps instead of ``k - g``.
:func:`alltoallv` prices unequal blocks (an embedding plan's pooled rows) by
the slowest rank's volumes in the same two algorithms; equal blocks are this
all-to-all.

A **send** (point-to-point: a pipeline stage's activations) moves ``n`` at
``a + n / B`` inside a node or across. Every collective is a kernel and pays
its launch (the slowest device's ``launch_us``). Bus bandwidth is nccl-tests'
definition (its doc/PERFORMANCE.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mapper.platform.devices import Platform, Switch

GB = 1e9
#: The collectives :func:`collective` prices.
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
#: Fixed start of a low-latency ring collective (NCCL v2.12 src/graph/tuning.cc, ``baseLat`` Ring/LL).
LL_BASE_US = 3.6
#: Share of the link's bandwidth the low-latency protocol moves data at (same file: ``busBw * 1/4``
#: for all-reduce, ``1/3`` for the others on one node).
LL_BANDWIDTH = {"allreduce": 0.25, "allgather": 1.0 / 3.0, "reducescatter": 1.0 / 3.0}


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


def low_latency(kind: str, nbytes: float, ranks: int, step: float, sec_per_byte: float) -> float | None:
    """Seconds of collective ``kind`` of ``nbytes`` over a ring of ``ranks`` by the low-latency
    protocol with ``step`` seconds per step and ``sec_per_byte`` on each link (module docstring);
    None for a collective it does not run (broadcast, all-to-all)."""
    share = LL_BANDWIDTH.get(kind)
    if share is None or ranks <= 1:
        return None
    f = 2.0 if kind == "allreduce" else 1.0
    return LL_BASE_US * 1e-6 + f * (ranks - 1) * step + f * (ranks - 1) / ranks * nbytes * sec_per_byte / share


def step_latency(platform: Platform, names: Sequence[str]) -> float | None:
    """Seconds per low-latency step among devices ``names``: the ``step_latency_us`` of the fastest
    switch that joins them all (None: none does, or it gives none)."""
    joining = [(sw.bandwidth_gbs, sw.step_latency_us) for sw in platform.switches
               if sw.step_latency_us is not None and set(names) <= set(sw.ports)]
    return max(joining)[1] * 1e-6 if joining else None


def launch_time(platform: Platform, names: Sequence[str]) -> float:
    """Seconds to launch a collective's kernel on devices ``names`` (the slowest launch)."""
    return max((platform.devices[platform.device_index(n)].launch_us for n in names), default=0.0) * 1e-6


def _joining(platform: Platform, names: Sequence[str]) -> Switch | None:
    """The fastest switch with a port for each of ``names`` (None: none)."""
    best = None
    for sw in platform.switches:
        if set(names) <= set(sw.ports) and (best is None or sw.bandwidth_gbs > best.bandwidth_gbs):
            best = sw
    return best


def _ring(platform: Platform, names: Sequence[str]) -> tuple[float, float]:
    """GB/s and seconds per step of a ring over ``names`` in their order that no one switch joins:
    the slowest neighbours' route (store-and-forward: its links' times add, each link at its
    switch's ``collective_efficiency``); no route: 0 GB/s."""
    eff = {sw.name: sw.collective_efficiency for sw in platform.switches}
    gbs, lat = math.inf, 0.0
    for i, a in enumerate(names):
        route = platform.route(platform.device_index(a), platform.device_index(names[(i + 1) % len(names)]))
        if route is None:
            return 0.0, math.inf
        links = [platform.links[x] for x in route]
        spb = sum(1.0 / (link.bandwidth_gbs * eff.get(link.switch, 1.0)) for link in links)
        gbs, lat = min(gbs, 1.0 / spb if spb > 0 else math.inf), max(lat, sum(x.latency_us for x in links) * 1e-6)
    return gbs, lat


def _inside(platform: Platform, names: Sequence[str]) -> tuple[float, float]:
    """GB/s per rank and direction, and seconds per step, of collectives among ``names`` on one node."""
    sw = _joining(platform, names)
    if sw is not None:
        return sw.bandwidth_gbs * sw.collective_efficiency, sw.latency_us * 1e-6
    return _ring(platform, names)


def _relayed(platform: Platform, gpus: list[str]) -> tuple[float, float]:
    """GB/s and seconds of the slowest route between two of ``gpus`` that no link joins (store and
    forward through the host's memory: its links' times per byte add up); no route: ``(inf, 0)``."""
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


def network(platform: Platform, kind: str = "gpu") -> Network:
    """The :class:`Network` of ``platform``'s devices of ``kind``: the fastest switch that joins them
    (none: the slowest link between two of them and the longest latency; no link: the slowest
    route between two, :func:`_relayed`), and the cluster's fabric (none: one node)."""
    gpus = [d.name for d in platform.devices if d.kind == kind]
    links = [(x.bandwidth_gbs, x.latency_us * 1e-6) for x in platform.links if x.src in gpus and x.dst in gpus]
    if len(gpus) < 2:
        intra, lat = math.inf, 0.0
    elif _joining(platform, gpus) is not None:
        intra, lat = _inside(platform, gpus)
    elif links:
        intra, lat = min(links)[0], max(x[1] for x in links)
    else:
        intra, lat = _relayed(platform, gpus)
    step, launch = step_latency(platform, gpus), launch_time(platform, gpus)
    c = platform.cluster
    if c is None:
        return Network(max(1, len(gpus)), intra, lat, intra * len(gpus), lat, 1, step, launch)
    return Network(max(1, len(gpus)), intra, lat, c.node_bandwidth_gbs, c.latency_us * 1e-6, c.nodes, step, launch)


def _node_of(platform: Platform, name: str, names: Sequence[str]) -> frozenset[str]:
    """The devices of ``names`` behind ``name``'s fastest switch (its node's NVSwitch, say, not the
    fabric a flattened cluster joins its nodes by; of two as fast, the one with more ports: an
    NVLink domain over several trays); just ``name`` where it has no switch."""
    best = max((sw for sw in platform.switches if name in sw.ports),
               key=lambda sw: (sw.bandwidth_gbs, len(sw.ports)), default=None)  # the widest of the fastest
    return frozenset(names) & frozenset(best.ports) if best is not None else frozenset((name,))


def group(platform: Platform, names: Sequence[str]) -> tuple[Network, int]:
    """The :class:`Network` collectives among devices ``names`` (in ring order) see, and how many of
    them share a node. A device's node is its fastest switch; where the nodes split ``names`` evenly
    and one (slower) switch joins them all, that switch is the fabric between the nodes (a
    cluster's nodes flattened, :func:`mapper.platform.cluster.flat_platform`); otherwise the group
    is one node."""
    k = len(names)
    launch = launch_time(platform, names)
    nodes = {_node_of(platform, n, names) for n in names}
    g = len(next(iter(nodes)))
    fabric = _joining(platform, names) if len(nodes) > 1 else None
    if fabric is not None and all(len(x) == g for x in nodes) and g * len(nodes) == k:
        one = sorted(next(iter(nodes)), key=list(names).index)
        intra, lat = _inside(platform, one) if g > 1 else (math.inf, 0.0)
        share = fabric.bandwidth_gbs * fabric.collective_efficiency
        return Network(g, intra, lat, share * g, fabric.latency_us * 1e-6, k // g,
                       step_latency(platform, one) if g > 1 else None, launch), g
    intra, lat = _inside(platform, names) if k > 1 else (math.inf, 0.0)
    return Network(max(1, k), intra, lat, intra * k, lat, 1, step_latency(platform, names), launch), k


def _over(nbytes: float, rate: float) -> float:
    """Seconds to move ``nbytes`` at ``rate`` bytes a second (none: never)."""
    return nbytes / rate if rate > 0 else math.inf


def ring(kind: str, nbytes: float, ranks: int, rate: float, latency: float) -> float:
    """Seconds of a ring all-reduce (``f`` 2), all-gather or reduce-scatter (``f`` 1) of ``nbytes``
    over ``ranks`` at ``rate`` bytes a second a rank and direction and ``latency`` a step
    (Patarasuk and Yuan, 2009): ``f (k-1)/k n / B + f (k-1) a``."""
    f = 2.0 if kind == "allreduce" else 1.0
    return (f * (ranks - 1) / ranks * nbytes / rate if rate > 0 else math.inf) + f * (ranks - 1) * latency


def _tree(kind: str, n: float, k: int, rate: float, latency: float) -> float:
    """Recursive doubling over ``k`` ranks, each step a whole exchange at ``rate`` bytes a second:
    all-reduce and broadcast ``L (a + n/B)``, all-gather and reduce-scatter ``L a + (k-1)/k n/B``."""
    steps = math.ceil(math.log2(k))
    if kind in ("allreduce", "broadcast"):
        return steps * (latency + _over(n, rate))
    return steps * latency + ((k - 1) / k * n / rate if rate > 0 else math.inf)


def _alltoall(net: Network, k: int, g: int, pairwise: float, stage1: float, stage2: float) -> tuple[float, str]:
    """Seconds and algorithm of an all-to-all among ``k`` ranks, ``g`` a node, given the slowest
    rank's pairwise byte-seconds and the slowest rank's bytes in each hierarchical stage."""
    nodes = max(1, k // g)
    flat = (g - 1) * net.intra_latency + (k - g) * net.inter_latency + pairwise
    if nodes == 1 or g == 1:
        return flat, "pairwise"
    two_d = (g - 1) * net.intra_latency + _over(stage1, net.intra_gbs * GB) \
        + (nodes - 1) * net.inter_latency + _over(stage2, net.rank_gbs * GB)
    return min((flat, "pairwise"), (two_d, "hierarchical"))


def alltoallv(net: Network, blocks: Sequence[Sequence[float]], per_node: int) -> tuple[float, str]:
    """Seconds and algorithm of an all-to-all with unequal blocks, rank ``i`` sending
    ``blocks[i][j]`` bytes to rank ``j`` (ranks node by node, ``per_node`` a node, rank ``i`` on
    lane ``i % per_node``), its kernel's launch included. Ports are per direction, so a rank's
    sends and receives overlap and the rank that moves the most bytes finishes last (Thakur et
    al. 2005, 4, with unequal blocks): pairwise, the slowest rank's ``max(sent, received)``
    inside the node over ``B_in`` plus across over ``B_out``; hierarchically, stage one (rank to
    the rank of its node on the destination's lane) and stage two (lane to lane across nodes)
    each at their slowest rank's ``max(sent, received)``. Equal blocks ``n/k`` give
    :func:`collective`'s all-to-all of ``n``."""
    k = len(blocks)
    if any(len(row) != k for row in blocks):
        raise ValueError("an all-to-all's blocks must be a square matrix, one row per rank")
    if k <= 1 or not any(blocks[i][j] > 0 for i in range(k) for j in range(k) if i != j):
        return 0.0, "local"
    g = max(1, min(per_node, k))
    node, lane = [i // g for i in range(k)], [i % g for i in range(k)]
    b_in, b_out = net.intra_gbs * GB, net.rank_gbs * GB
    s_in, s_out, r_in, r_out = [0.0] * k, [0.0] * k, [0.0] * k, [0.0] * k
    s1, r1, s2, r2 = [0.0] * k, [0.0] * k, [0.0] * k, [0.0] * k
    for i in range(k):
        for j in range(k):
            x = float(blocks[i][j])
            if i == j or x <= 0:
                continue
            if node[i] == node[j]:
                s_in[i] += x
                r_in[j] += x
            else:
                s_out[i] += x
                r_out[j] += x
            relay = node[i] * g + lane[j]  # stage one: to the rank of i's node on j's lane
            if relay != i:
                s1[i] += x
                r1[relay] += x
            if relay != j:  # stage two: lane to lane across nodes
                s2[relay] += x
                r2[j] += x
    pairwise = max(_over(max(s_in[r], r_in[r]), b_in) + _over(max(s_out[r], r_out[r]), b_out)
                   if s_in[r] + r_in[r] + s_out[r] + r_out[r] > 0 else 0.0 for r in range(k))
    seconds, algorithm = _alltoall(net, k, g, pairwise, max(max(s1), max(r1)), max(max(s2), max(r2)))
    return net.launch + seconds, algorithm


def collective(net: Network, kind: str, nbytes: float, ranks: int, per_node: int,
               rings: bool = False) -> tuple[float, str]:
    """Seconds and algorithm of collective ``kind`` (:data:`COLLECTIVES`) of ``nbytes`` among
    ``ranks`` ranks, ``per_node`` of them on each node, its kernel's launch included; ``rings``:
    the ring alone across nodes, as NCCL runs an all-gather or a reduce-scatter (its tuning
    model, src/graph/tuning.cc, gives those two no tree; the hierarchical and tree algorithms
    here are MPI's)."""
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r}")
    if ranks <= 1 or nbytes <= 0:
        return 0.0, "local"
    k, g = ranks, max(1, min(per_node, ranks))
    nodes = max(1, k // g)
    n = float(nbytes)
    f = 2.0 if kind == "allreduce" else 1.0
    b_in, b_out = net.intra_gbs * GB, net.rank_gbs * GB
    if kind == "alltoall":  # alltoallv's volumes for equal blocks n/k
        pairwise = (g - 1) * _over(n / k, b_in) + (k - g) * _over(n / k, b_out)
        seconds, algorithm = _alltoall(net, k, g, pairwise, (g - 1) * n / g, (nodes - 1) * n / nodes)
        return net.launch + seconds, algorithm
    if nodes == 1:
        if kind == "broadcast":
            simple = (k - 1) * net.intra_latency + _over(n, b_in)
        else:
            simple = ring(kind, n, k, b_in, net.intra_latency)
        if net.intra_step is not None:  # NCCL: its rings, the low-latency one too
            ll = low_latency(kind, n, k, net.intra_step, _over(1.0, b_in))
            seconds, algorithm = (ll, "ring-ll") if ll is not None and ll < simple else (simple, "ring")
            return net.launch + seconds, algorithm
        tree = _tree(kind, n, k, b_in, net.intra_latency)
        return net.launch + min(simple, tree), "ring" if simple <= tree else "tree"
    busbw = min(b_in, g * b_out)
    if kind == "broadcast":
        chain = (k - 1) * net.inter_latency + _over(n, busbw)
        tree = _tree(kind, n, k, b_out, net.inter_latency)
        return net.launch + min(chain, tree), "ring" if chain <= tree else "tree"
    flat = ring(kind, n, k, busbw, net.inter_latency)
    inside = ring(kind, n, g, b_in, net.intra_latency) if g > 1 else 0.0
    across = (f * (nodes - 1) / nodes * (n / g) / b_out if b_out > 0 else math.inf) \
        + f * math.ceil(math.log2(nodes)) * net.inter_latency
    tree = _tree(kind, n, k, b_out, net.inter_latency)
    if rings:
        return net.launch + flat, "ring"
    seconds, algorithm = min((flat, "ring"), (inside + across, "hierarchical"), (tree, "tree"))
    return net.launch + seconds, algorithm


def send(net: Network, nbytes: float, across_nodes: bool) -> float:
    """Seconds to send ``nbytes`` from one rank to another (a pipeline stage's activations)."""
    if nbytes <= 0:
        return 0.0
    if across_nodes:
        return net.inter_latency + _over(nbytes, net.rank_gbs * GB)
    return net.intra_latency + _over(nbytes, net.intra_gbs * GB)


def bus_bandwidth(kind: str, nbytes: float, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth (GB/s) of a collective that took ``seconds`` (doc/PERFORMANCE.md:
    all-reduce ``algbw 2 (k-1)/k``; all-gather, reduce-scatter and all-to-all ``algbw (k-1)/k``;
    broadcast ``algbw``)."""
    algbw = nbytes / seconds / GB
    if kind == "broadcast":
        return algbw
    return algbw * (2 * (ranks - 1) / ranks if kind == "allreduce" else (ranks - 1) / ranks)
