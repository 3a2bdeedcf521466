"""The task graph as a hypergraph, partitioned by Mt-KaHyPar (the only module that imports it).

One net per produced tensor: the producer and its consumers (the edges of a
task that carry the same tensor, or all its out-edges when they name none),
weighted by the time its largest transfer takes on average over the device
pairs (bytes through the links, or the edge's explicit ``comm``), so the
connectivity objective ``km1`` (sum over nets of the blocks they span minus
one) counts what crossing devices costs. Partitioned with Mt-KaHyPar's
deterministic preset, two settings changed (:mod:`.partition_preset`), and a
fixed seed (Gottesbüren, Heuer, Maas, Sanders, Schlag, "Scalable high-quality
hypergraph partitioning", ACM TOPC 2024; Gottesbüren, Hamann, "Deterministic
parallel hypergraph partitioning", Euro-Par 2022), so the same input gives the
same partition, whatever the thread count.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from mapper.core.graph import TaskGraph
from mapper.errors import OptionsError
from mapper.mapping.partition_preset import CHANGES, preset_text

#: Net weights are integers from 1 to this (Mt-KaHyPar's weights are 32-bit).
WEIGHT_SCALE = 10_000
#: Blocks one Mt-KaHyPar call makes at most; more are made in two levels (:func:`partition`).
DIRECT_BLOCKS = 16
#: Threads Mt-KaHyPar runs with (this machine's CPUs are shared; the preset is deterministic whatever the count).
THREADS = 2
#: The preset's settings mapper changes (:data:`.partition_preset.CHANGES`); {} is the stock deterministic preset.
PRESET_CHANGES: dict[str, str] = CHANGES


@dataclass(frozen=True, slots=True)
class Nets:
    """``pins[i]`` = (producer, consumer, ...) of net ``i``; ``weight[i]`` >= 1; ``producer[i]`` its source."""

    pins: tuple[tuple[int, ...], ...]
    weight: tuple[int, ...]

    def producer(self, i: int) -> int:
        return self.pins[i][0]


def available() -> bool:
    """Whether Mt-KaHyPar imports (the ``huge`` extra)."""
    try:
        import mtkahypar  # noqa: F401
    except ImportError:
        return False
    return True


def nets_of(graph: TaskGraph, edge_time: Sequence[float]) -> Nets:
    """The nets of ``graph``: one per (producer, tensor); ``edge_time[e]`` is edge ``e``'s mean transfer time."""
    pins: list[tuple[int, ...]] = []
    raw: list[float] = []
    edges = graph.edges
    for u in range(len(graph.tasks)):
        out = graph.succs[u]
        if not out:
            continue
        by_tensor: dict[str, list[int]] = {}
        for e in out:
            by_tensor.setdefault(edges[e].tensor, []).append(e)
        for group in by_tensor.values():
            consumers = tuple(dict.fromkeys(edges[e].dst for e in group))
            pins.append((u, *consumers))
            raw.append(max(edge_time[e] for e in group))
    top = max(raw, default=0.0)
    scale = WEIGHT_SCALE / top if top > 0 else 0.0
    weight = tuple(max(1, min(WEIGHT_SCALE, round(x * scale))) for x in raw)
    return Nets(tuple(pins), weight)


@lru_cache(maxsize=1)
def _initializer():
    import mtkahypar

    return mtkahypar.initialize(THREADS, False)


def partition(n: int, nets: Nets, node_weight: Sequence[int], max_weight: Sequence[int], seed: int,
              epsilon: float = 0.03) -> tuple[int, ...]:
    """Block of each of ``n`` nodes for ``len(max_weight)`` blocks, block ``b`` weighing at most
    ``max_weight[b]`` (Mt-KaHyPar's individual block weights; it may exceed them slightly, the caller
    repairs), minimising ``km1``. Past :data:`DIRECT_BLOCKS` blocks, in two levels: groups of
    consecutive blocks first, then each group's nodes into its blocks (the sub-hypergraph of the
    group's pins), which keeps the deterministic preset's time near that of a few blocks."""
    k = len(max_weight)
    if k < 1:
        raise OptionsError("a partition needs at least one block")
    pins = nets.pins
    if k <= DIRECT_BLOCKS:
        return tuple(_direct(n, pins, nets.weight, node_weight, list(max_weight), seed, epsilon))
    groups = [list(range(i, min(k, i + DIRECT_BLOCKS))) for i in range(0, k, DIRECT_BLOCKS)]
    top = _direct(n, pins, nets.weight, node_weight,
                  [sum(max_weight[b] for b in g) for g in groups], seed, epsilon)
    members: list[list[int]] = [[] for _ in groups]
    local = [0] * n
    for v, gi in enumerate(top):
        local[v] = len(members[gi])
        members[gi].append(v)
    sub_pins: list[list[list[int]]] = [[] for _ in groups]
    sub_weight: list[list[int]] = [[] for _ in groups]
    for net, w in zip(pins, nets.weight):
        split: dict[int, list[int]] = {}
        for v in net:
            split.setdefault(top[v], []).append(local[v])
        for gi, part in split.items():
            if len(part) > 1:
                sub_pins[gi].append(part)
                sub_weight[gi].append(w)
    out = [0] * n
    for gi, g in enumerate(groups):
        nodes = members[gi]
        if not nodes:
            continue
        weights = [node_weight[v] for v in nodes]
        caps = [max_weight[b] for b in g]
        short = sum(weights) - sum(caps)
        if short > 0:  # the top level went over the group's room: spread the excess (the caller repairs)
            caps = [c + -(-short // len(caps)) for c in caps]
        sub = _direct(len(nodes), sub_pins[gi], sub_weight[gi], weights, caps, seed, epsilon)
        for v, b in zip(nodes, sub):
            out[v] = g[b]
    return tuple(out)


def _direct(n: int, pins: Sequence[Sequence[int]], net_weight: Sequence[int], node_weight: Sequence[int],
            max_weight: list[int], seed: int, epsilon: float) -> list[int]:
    k = len(max_weight)
    if k == 1 or n == 0:
        return [0] * n
    import mtkahypar

    ini = _initializer()
    mtkahypar.set_seed(seed % 2**31)
    ctx = _context(ini)
    ctx.logging = False
    ctx.set_partitioning_parameters(k, epsilon, mtkahypar.Objective.KM1)
    ctx.set_individual_target_block_weights([max(1, int(w)) for w in max_weight])
    hg = ini.create_hypergraph(ctx, n, len(pins), pins, node_weight, net_weight)
    return list(hg.partition(ctx).get_partition())


def _context(ini):
    """A context of the deterministic preset with :data:`PRESET_CHANGES` (Mt-KaHyPar reads
    settings from a file only: a temporary one, removed once read)."""
    import mtkahypar

    if not PRESET_CHANGES:
        return ini.context_from_preset(mtkahypar.PresetType.DETERMINISTIC)
    fd, path = tempfile.mkstemp(suffix=".ini", prefix="mapper-preset-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(preset_text(PRESET_CHANGES))
        return ini.context_from_file(path)
    finally:
        os.unlink(path)


def km1(nets: Nets, block: Sequence[int]) -> int:
    """Connectivity minus one, summed over nets with their weights (what Mt-KaHyPar minimises)."""
    return sum(w * (len({block[p] for p in pins}) - 1) for pins, w in zip(nets.pins, nets.weight))
