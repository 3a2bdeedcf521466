"""Layouts across node kinds: a fleet's GPUs of different kinds in one training step (:mod:`mapper.cluster`).

Pipelines (:func:`mixed_estimates`): ``d`` replicas of a pipeline whose stages
sit on groups of ``t`` GPUs of one kind each, every GPU of every kind in use
(``p_k = G_k / (d t)`` stages on kind ``k``, kinds in a given order), the
layers split unevenly by each stage's speed (each stage's memory then checked
against its own GPU), as Metis (Um et al., USENIX ATC'24) and AMP (Li et al.,
NeurIPS 2022) place stages on heterogeneous groups. For one order of kinds the
split is exact (:func:`mapper.cluster.model.stage_partition`). Sends between
stages of different kinds cross the fleet's ``[between]`` fabric; each
stage's gradients are synchronised among its ``d`` replicas, all of one kind.

Data parallelism (:func:`shared_estimates`): replicas on every GPU of every
kind, each taking micro-batches in proportion to its speed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import permutations

from mapper.cluster.comm import collective, send
from mapper.cluster.layout import RECOMPUTE, Layout
from mapper.cluster.model import BUCKET, RESERVE, Estimate, PlanModel, stage_partition
from mapper.cluster.schedule import step_time
from mapper.training import OPTIMIZERS


@dataclass(frozen=True, slots=True)
class KindModel:
    """One node kind of a fleet: its name, GPUs in all, and the plan model priced on its GPU."""

    kind: str
    gpus: int
    model: PlanModel


def mixed_estimates(kinds: list[KindModel], samples: int, optimizer: str, between_gbs: float,
                    between_latency: float, per_node: int, even: bool = False) -> list[Estimate]:
    """Every mixed layout of the fleet (module docstring), estimated like
    :meth:`mapper.cluster.model.PlanModel.estimate`; ``Estimate.kinds`` names each stage's kind.
    ``even``: the layers split as if every stage were of the first kind (the even split of a
    planner blind to the kinds' speeds, benchmarks/hetero.py's baseline)."""
    out: list[Estimate] = []
    smallest = min(k.gpus for k in kinds)
    t = 1
    while t <= per_node:
        d = 1
        while d * t <= smallest:
            stages = [k.gpus // (d * t) for k in kinds]
            if all(k.gpus % (d * t) == 0 for k in kinds) and samples % d == 0:
                b = 1
                while samples % (d * b) == 0 and b <= 8:
                    for rc in RECOMPUTE:
                        lay = Layout(t, sum(stages), d, b, 1, rc, 1 if d > 1 else 0, t > 1)
                        for order in set(permutations(range(len(kinds)))):
                            seq = [k for k in order for _ in range(stages[k])]
                            est = _estimate(kinds, lay, seq, samples, optimizer, between_gbs, between_latency,
                                            even)
                            if est is not None:
                                out.append(est)
                    b *= 2
            d *= 2
        t *= 2
    return out


def _estimate(kinds: list[KindModel], lay: Layout, seq: list[int], samples: int, optimizer: str,
              between_gbs: float, between_latency: float, even: bool = False) -> Estimate | None:
    t, d, p = lay.tensor, lay.data, lay.pipeline
    if p > len(kinds[0].model.profile.blocks):
        return None
    m = samples // (d * lay.micro_batch)
    times = [km.model._block_times(lay) for km in kinds]
    weights = [[f + b for f, b in zip(*tb)] for tb in times]
    starts = stage_partition([weights[0]] * len(kinds) if even else weights, seq)
    if starts is None:
        return None
    ends = [*starts[1:], len(kinds[0].model.profile.blocks)]
    blocks = kinds[0].model.profile.blocks
    opt = OPTIMIZERS[optimizer]
    rank_times, chunk_times, rank_sync = [], [], []
    worst: tuple[float, dict[str, float], float, int] | None = None
    for s, (a, e) in enumerate(zip(starts, ends)):
        km = kinds[seq[s]]
        fw, bw = times[seq[s]]
        f, b = sum(fw[a:e]), sum(bw[a:e])
        out = blocks[e - 1].out_bytes / samples * lay.micro_batch
        if s + 1 < p and out > 0:
            if seq[s + 1] != seq[s]:  # to another kind: one rank's share of the between fabric
                hop = between_latency + out / (between_gbs * 1e9 / km.model.net.gpus_per_node)
            else:
                hop = send(km.model.net, out, t * d >= km.model.net.gpus_per_node)
            f, b = f + hop, b + hop
        chunk_times.append((f, b))
        rank_times.append(f + b)
        costs = km.model.block_costs(t, lay.micro_batch)
        params = sum(costs[i].params for i in range(a, e))
        pbytes = sum(costs[i].param_bytes for i in range(a, e))
        update = sum(costs[i].update for i in range(a, e)) / (d if lay.zero else 1)
        exposed = 0.0
        if d > 1:
            group = min(d, max(1, km.model.net.gpus_per_node // t))
            total = collective(km.model.net, "allreduce", pbytes, d, group)[0]
            exposed = max(total - b, total / max(1, math.ceil(pbytes / BUCKET)))
        rank_sync.append(exposed + update)
        kept, work = km.model._activations(lay, range(a, e))
        master = 2 if pbytes < 4 * params else 0
        memory = {"weights": pbytes, "gradients": pbytes,
                  "optimizer": 4.0 * params * (opt.states + master) / (d if lay.zero else 1),
                  "activations": kept * min(p - s, m) + work, "reserve": RESERVE}
        over = sum(memory.values()) / km.model.capacity if km.model.capacity else math.inf
        if worst is None or over > worst[0]:
            worst = (over, memory, km.model.capacity, s)
    assert worst is not None
    pipe = step_time(rank_times, m, 1)
    sync = max(rank_sync)
    return Estimate(lay, "1f1b", m, pipe + sync, pipe, sync, tuple(starts), tuple(rank_times), tuple(chunk_times),
                    tuple(rank_sync), worst[1], worst[2], worst[3], tuple(kinds[k].kind for k in seq))


def _shares(rates: list[tuple[int, float]], micro_batches: int) -> tuple[list[int], list[int]]:
    """Micro-batches of each kind's busiest replica, and of all its replicas together
    (``rates``: replicas and seconds per micro-batch of each kind), so that the slowest replica
    finishes first: each micro-batch to the replica that would end soonest with it (optimal
    for unit jobs on uniform machines)."""
    import heapq

    count = [0] * len(rates)
    heap = [(t, k) for k, (r, t) in enumerate(rates) for _ in range(r)]
    heapq.heapify(heap)
    given = [[0] * r for r, _ in rates]
    slot = [0] * len(rates)
    for _ in range(micro_batches):
        end, k = heapq.heappop(heap)
        i = slot[k] % rates[k][0]
        slot[k] += 1
        given[k][i] += 1
        heapq.heappush(heap, (end + rates[k][1], k))
    for k in range(len(rates)):
        count[k] = max(given[k]) if given[k] else 0
    return count, [sum(g) for g in given]


def shared_estimates(kinds: list[KindModel], samples: int, optimizer: str, between_gbs: float,
                     per_node: int, even: bool = False) -> list[Estimate]:
    """Data parallelism over every GPU of every kind, no pipeline: each replica takes micro-batches
    in proportion to its kind's speed (HetSeq, Ding et al., 2021), and one all-reduce over all
    replicas crosses the fleet's ``[between]`` fabric. Each estimate's ``shares`` are
    ``(kind, replicas, fraction of the batch per replica)``; its one pipeline rank is the slowest
    replica. ``even``: every replica takes the same share (the baseline of benchmarks/hetero.py)."""
    out = []
    t = 1
    while t <= per_node:
        if all(k.gpus % t == 0 for k in kinds):
            b = 1
            while samples % b == 0 and b <= 8:
                for rc in RECOMPUTE:
                    est = _shared(kinds, samples, optimizer, between_gbs, t, b, rc, even)
                    if est is not None:
                        out.append(est)
                b *= 2
        t *= 2
    return out


def _shared(kinds: list[KindModel], samples: int, optimizer: str, between_gbs: float, t: int, b: int,
            rc: str, even: bool = False) -> Estimate | None:
    replicas = [k.gpus // t for k in kinds]
    d = sum(replicas)
    lay = Layout(t, 1, d, b, 1, rc, 1 if d > 1 else 0, t > 1)
    times = [k.model._block_times(lay) for k in kinds]
    per_mb = [sum(f) + sum(bw) for f, bw in times]
    counts, totals = _shares(list(zip(replicas, [1.0] * len(kinds) if even else per_mb)), samples // b)
    ends = [n * tm for n, tm in zip(counts, per_mb)]
    slow = max(range(len(kinds)), key=lambda k: ends[k])
    opt = OPTIMIZERS[optimizer]
    costs = [k.model.block_costs(t, b) for k in kinds]
    pbytes = sum(c.param_bytes for c in costs[0])
    params = sum(c.params for c in costs[0])
    # one ring over all replicas: each kind's NIC share, and the link between kinds
    ring = max(collective(k.model.net, "allreduce", pbytes, d, min(d, max(1, k.model.net.gpus_per_node // t)))[0]
               for k in kinds)
    gpn = max(k.model.net.gpus_per_node for k in kinds)
    ring = max(ring, 2 * (d - 1) / d * pbytes / (between_gbs * 1e9 * min(t, gpn) / gpn))
    exposed = max(ring - sum(times[slow][1]), ring / max(1, math.ceil(pbytes / BUCKET)))
    update = max(sum(c.update for c in cs) for cs in costs) / (d if lay.zero else 1)
    worst: tuple[float, dict[str, float], float] | None = None
    for km in kinds:
        kept, work = km.model._activations(lay, range(len(km.model.profile.blocks)))
        master = 2 if pbytes < 4 * params else 0
        memory = {"weights": pbytes, "gradients": pbytes,
                  "optimizer": 4.0 * params * (opt.states + master) / (d if lay.zero else 1),
                  "activations": kept + work, "reserve": RESERVE}
        over = sum(memory.values()) / km.model.capacity if km.model.capacity else math.inf
        if worst is None or over > worst[0]:
            worst = (over, memory, km.model.capacity)
    assert worst is not None
    f, bw = sum(times[slow][0]), sum(times[slow][1])
    pipe = counts[slow] * (f + bw)
    sync = exposed + update
    shares = tuple((km.kind, r, n * b / samples / r) for km, r, n in zip(kinds, replicas, totals))
    return Estimate(lay, "1f1b", counts[slow], pipe + sync, pipe, sync, (0,), (f + bw,), ((f, bw),), (sync,),
                    worst[1], worst[2], 0, (kinds[slow].kind,), shares)
