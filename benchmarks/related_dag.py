"""The layered random DAGs on related machines that the benchmarks share (no SAGA import here,
so scripts that must not load SAGA can use them too)."""

from __future__ import annotations

import math
import random

from mapper.frontend.importers import RelatedNetwork


def related_dag(n: int, ccr: float, seed: int,
                nodes: int = 4) -> tuple[list[str], list[float], list[tuple[int, int, float]], RelatedNetwork]:
    """A layered random DAG (Topcuoglu et al. 2002, section 5.1: shape 1, out-degree
    1-3 to later layers, costs U[1, 20]) on ``nodes`` nodes with speeds U[1, 4] and pair
    strengths U[0.5, 2], scaled so that mean transfer / mean compute = ``ccr``: task names,
    costs, ``(src, dst, size)`` edges by index in order, and the network."""
    rng = random.Random(seed)
    width = max(1, round(math.sqrt(n)))
    layers: list[list[int]] = []
    k = 0
    while k < n:
        w = min(n - k, max(1, round(rng.uniform(0.5, 1.5) * width)))
        layers.append(list(range(k, k + w)))
        k += w
    names = [f"t{i}" for i in range(n)]
    costs = [rng.uniform(1.0, 20.0) for _ in range(n)]
    edges: dict[tuple[int, int], float] = {}
    for li in range(1, len(layers)):
        for v in layers[li]:  # every task below the top has a parent in the layer above
            edges[(rng.choice(layers[li - 1]), v)] = rng.uniform(1.0, 20.0)
        for u in layers[li - 1]:
            for _ in range(rng.randint(0, 2)):
                lj = min(len(layers) - 1, li + rng.choice((0, 0, 1)))
                edges.setdefault((u, rng.choice(layers[lj])), rng.uniform(1.0, 20.0))
    speeds = tuple(round(rng.uniform(1.0, 4.0), 3) for _ in range(nodes))
    raw = {(a, b): rng.uniform(0.5, 2.0) for a in range(nodes) for b in range(a + 1, nodes)}
    mean_comp = sum(costs) / n * sum(1 / s for s in speeds) / nodes
    mean_comm = sum(edges.values()) / len(edges) * sum(1 / x for x in raw.values()) / len(raw)
    scale = mean_comm / (ccr * mean_comp)
    strength = tuple(tuple(0.0 if a == b else raw[min(a, b), max(a, b)] * scale for b in range(nodes))
                     for a in range(nodes))
    net = RelatedNetwork(tuple(f"n{k + 1}" for k in range(nodes)), speeds, strength)
    return names, costs, [(a, b, s) for (a, b), s in sorted(edges.items())], net
