"""Collectives priced on a platform: alpha-beta models of the ring and tree algorithms.

A collective among ``k`` devices moves ``n`` bytes (the whole tensor) in
steps; a step between two devices costs ``alpha + m beta`` for ``m`` bytes,
with ``alpha`` the route's latency and ``beta`` its seconds per byte
(:func:`mapper.cost.route_tables`; a switch port's bandwidth is per
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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The collectives :func:`collective_time` prices.
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast")


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


def collective_time(kind: str, nbytes: float, devices: Sequence[int], latency: Sequence[Sequence[float]],
                    sec_per_byte: Sequence[Sequence[float]]) -> Collective:
    """Time of collective ``kind`` over ``devices`` (indices, in ring order) on ``nbytes``.

    ``latency[a][b]`` and ``sec_per_byte[a][b]`` are the route tables of
    :func:`mapper.cost.route_tables`. One device: nothing moves (0 s).
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
    return Collective(ring, "ring") if ring <= tree else Collective(tree, "tree")
