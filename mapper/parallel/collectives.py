"""Collectives priced on a platform: alpha-beta models of the ring and tree algorithms.

A collective among ``k`` devices moves ``n`` bytes (the whole tensor) in
steps; a step between two devices costs ``alpha + m beta`` for ``m`` bytes,
with ``alpha`` the route's latency and ``beta`` its seconds per byte
(:func:`mapper.costing.cost.route_tables`; a switch port's bandwidth is per
direction, so the ring's simultaneous sends do not share a port). The
formulas are those of Thakur, Rabenseifner and Gropp, "Optimization of
Collective Communication Operations in MPICH", IJHPCA 19(1), 2005, section 4,
with ``L = ceil(log2 k)``:

=============== ================================= ======================================
collective      ring (Patarasuk and Yuan, 2009)   tree (recursive doubling / halving,
                                                  binomial broadcast)
=============== ================================= ======================================
all-reduce      ``2 (k-1) (alpha + n/k beta)``    ``L (alpha + n beta)``
all-gather      ``(k-1) (alpha + n/k beta)``      ``L alpha + (k-1)/k n beta``
reduce-scatter  ``(k-1) (alpha + n/k beta)``      ``L alpha + (k-1)/k n beta``
broadcast       ``(L + k-1) alpha + 2 (k-1)/k n   ``L (alpha + n beta)``
                beta`` (scatter + all-gather)
=============== ================================= ======================================

A ring step runs between neighbours, so the ring's ``alpha`` and ``beta``
are the worst over consecutive devices in the given order; a tree pairs any
two devices, so its are the worst over all pairs. The cheaper algorithm is
chosen, as NCCL and MPI libraries choose by size.

Where the devices share a switch that gives ``step_latency_us`` (``h``), the
library's low-latency protocol is a third choice (NCCL's LL, :func:`low_latency`):
a ring whose steps cost ``h`` each after a fixed start of :data:`LL_BASE_US`, at
a quarter of the bandwidth for an all-reduce and a third for an all-gather or a
reduce-scatter (8-byte lines of which 4 are flags, and the ring's own overheads),
the constants of NCCL's tuning model (NVIDIA/nccl v2.12, src/graph/tuning.cc:
``baseLat`` and ``hwLat`` of Ring/LL, the LL ``busBw`` factors). It wins for
the small messages of tensor-parallel decoding. Every collective is a kernel
and pays its launch like any other (:func:`launch_time`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mapper.platform.devices import Platform

#: The collectives :func:`collective_time` prices.
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast")
#: Fixed start of a low-latency ring collective (NCCL v2.12 src/graph/tuning.cc, ``baseLat`` Ring/LL).
LL_BASE_US = 3.6
#: Share of the link's bandwidth the low-latency protocol moves data at (same file: ``busBw * 1/4``
#: for all-reduce, ``1/3`` for the others on one node).
LL_BANDWIDTH = {"allreduce": 0.25, "allgather": 1.0 / 3.0, "reducescatter": 1.0 / 3.0}


@dataclass(frozen=True, slots=True)
class Collective:
    """A priced collective: seconds and the algorithm that gives them."""

    seconds: float
    algorithm: str  # "ring" | "tree" | "local"


def _worst(pairs: Sequence[tuple[int, int]], latency: Sequence[Sequence[float]],
           sec_per_byte: Sequence[Sequence[float]]) -> tuple[float, float]:
    alpha = max(latency[a][b] for a, b in pairs)
    beta = max(sec_per_byte[a][b] for a, b in pairs)
    return alpha, beta


def low_latency(kind: str, nbytes: float, ranks: int, step: float, sec_per_byte: float) -> float | None:
    """Seconds of collective ``kind`` of ``nbytes`` over a ring of ``ranks`` by the low-latency
    protocol with ``step`` seconds per step and ``sec_per_byte`` on each link (module docstring);
    None for a collective it does not run (broadcast)."""
    share = LL_BANDWIDTH.get(kind)
    if share is None or ranks <= 1:
        return None
    f = 2.0 if kind == "allreduce" else 1.0
    return LL_BASE_US * 1e-6 + f * (ranks - 1) * step + f * (ranks - 1) / ranks * nbytes * sec_per_byte / share


def cheapest(kind: str, nbytes: float, ranks: int, step: float | None, sec_per_byte: float,
             best: Collective) -> Collective:
    """``best`` or, where a low-latency step is known (``step``) and its ring is cheaper, that ring."""
    ll = low_latency(kind, nbytes, ranks, step, sec_per_byte) if step is not None else None
    return Collective(ll, "ring-ll") if ll is not None and ll < best.seconds else best


def step_latency(platform: Platform, names: Sequence[str]) -> float | None:
    """Seconds per low-latency step among devices ``names``: the ``step_latency_us`` of the fastest
    switch that joins them all (None: none does, or it gives none)."""
    joining = [(sw.bandwidth_gbs, sw.step_latency_us) for sw in platform.switches
               if sw.step_latency_us is not None and set(names) <= set(sw.ports)]
    return max(joining)[1] * 1e-6 if joining else None


def launch_time(platform: Platform, names: Sequence[str]) -> float:
    """Seconds to launch a collective's kernel on devices ``names`` (the slowest launch)."""
    return max((platform.devices[platform.device_index(n)].launch_us for n in names), default=0.0) * 1e-6


def collective_time(kind: str, nbytes: float, devices: Sequence[int], latency: Sequence[Sequence[float]],
                    sec_per_byte: Sequence[Sequence[float]], step: float | None = None) -> Collective:
    """Time of collective ``kind`` over ``devices`` (indices, in ring order) on ``nbytes``.

    ``latency[a][b]`` and ``sec_per_byte[a][b]`` are the route tables of
    :func:`mapper.costing.cost.route_tables`; ``step`` the seconds per step of the
    low-latency protocol (:func:`step_latency`; None: not modelled). One
    device: nothing moves (0 s). The kernel's launch is the caller's.
    """
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r}")
    k = len(devices)
    if k <= 1:
        return Collective(0.0, "local")
    n = float(nbytes)
    ring_pairs = [(devices[i], devices[(i + 1) % k]) for i in range(k)]
    all_pairs = [(a, b) for a in devices for b in devices if a != b]
    ra, rb = _worst(ring_pairs, latency, sec_per_byte)
    ta, tb = _worst(all_pairs, latency, sec_per_byte)
    steps = math.ceil(math.log2(k))
    if kind == "allreduce":
        ring = 2 * (k - 1) * (ra + n / k * rb)
        tree = steps * (ta + n * tb)
    elif kind in ("allgather", "reducescatter"):
        ring = (k - 1) * (ra + n / k * rb)
        tree = steps * ta + (k - 1) / k * n * tb
    else:
        ring = (steps + k - 1) * ra + 2 * (k - 1) / k * n * rb
        tree = steps * (ta + n * tb)
    return cheapest(kind, n, k, step, rb, Collective(ring, "ring") if ring <= tree else Collective(tree, "tree"))
