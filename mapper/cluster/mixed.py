"""Layouts across node kinds: a fleet's GPUs of different kinds in one training step (:mod:`mapper.cluster`).

Pipelines (:func:`mixed_estimates`): ``d`` replicas of a pipeline whose stages
sit on groups of ``t`` GPUs of one kind each, every GPU of every kind in use
(``p_k = G_k / (d t)`` stages on kind ``k``, kinds in a given order), the
layers split unevenly by each stage's speed, each stage's memory checked
against its own GPU, as Metis (Um et al., USENIX ATC'24) and AMP (Li et al.,
NeurIPS 2022) place stages on heterogeneous groups. For one order of kinds the
split is exact under the model (:mod:`mapper.cluster.split`); a layout whose
least bottleneck cannot beat the best step so far keeps the bottleneck split
(:func:`mapper.mapping.pipeline.stage_partition`) and a bound over every split. Sends between
stages of different kinds cross the fleet's ``[between]`` fabric; each
stage's gradients are synchronised among its ``d`` replicas, all of one kind.

Data parallelism (:func:`shared_estimates`): replicas on every GPU of every
kind, each taking micro-batches in proportion to its speed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import combinations, permutations

import numpy as np

from mapper.cluster.model import BUCKET, Estimate, PlanModel
from mapper.cluster.profile import MAX_TENSOR
from mapper.cluster.reserve import reserve
from mapper.cluster.schedule import step_time
from mapper.cluster.split import exact_split
from mapper.cluster.states import activation_parts, state_bytes
from mapper.costing.training import OPTIMIZERS
from mapper.mapping.pipeline import stage_partition
from mapper.parallel.collectives import collective, ring, send
from mapper.parallel.layout import RECOMPUTE, Layout


@dataclass(frozen=True, slots=True)
class KindModel:
    """One node kind of a fleet: its name, GPUs in all, and the plan model priced on its GPU."""

    kind: str
    gpus: int
    model: PlanModel


@dataclass(frozen=True, slots=True)
class Splits:
    """How :func:`mixed_estimates` splits the layers.

    ``even``: as if every stage were of the first kind (the even split of a planner blind to the
    kinds' speeds, benchmarks/hetero.py's baseline); ``every_split``: each layout once per
    contiguous split, not only the exact one (exhaustive enumeration of the same space, to check
    the planner on small instances); ``incumbent``: a step found elsewhere (another kind's plan),
    which layouts that cannot beat keep their bottleneck split (:func:`_exact`); ``keep``: the
    layouts asked for (``--parallel`` degrees), None for all."""

    even: bool = False
    every_split: bool = False
    incumbent: float = math.inf
    keep: Callable[[Layout], bool] | None = None


def mixed_estimates(kinds: list[KindModel], samples: int, optimizer: str, between_gbs: float,
                    between_latency: float, per_node: int, splits: Splits = Splits()) -> list[Estimate]:
    """Every mixed layout of the fleet (module docstring), estimated like
    :meth:`mapper.cluster.model.PlanModel.estimate`, its layers split as ``splits`` says;
    ``Estimate.kinds`` names each stage's kind."""
    even, every_split = splits.even, splits.every_split
    out: list[tuple[Estimate, list[int]]] = []
    smallest = min(k.gpus for k in kinds)
    t = 1
    while t <= min(per_node, MAX_TENSOR):
        d = 1
        while d * t <= smallest:
            stages = [k.gpus // (d * t) for k in kinds]
            if all(k.gpus % (d * t) == 0 for k in kinds) and samples % d == 0:
                b = 1
                while samples % (d * b) == 0 and b <= 8:
                    for rc in RECOMPUTE:
                        lay = Layout(t, sum(stages), d, b, 1, rc, 1 if d > 1 else 0, t > 1)
                        if splits.keep is not None and not splits.keep(lay):
                            continue
                        for order in set(permutations(range(len(kinds)))):
                            seq = [k for k in order for _ in range(stages[k])]
                            n = len(kinds[0].model.profile.blocks)
                            cuts = [(0, *c) for c in combinations(range(1, n), len(seq) - 1)] \
                                if every_split else [None]
                            for starts in cuts:
                                est = _estimate(kinds, lay, seq, samples, optimizer, between_gbs,
                                                between_latency, "even" if even else "bottleneck", starts)
                                if est is not None:
                                    out.append((est, seq))
                    b *= 2
            d *= 2
        t *= 2
    if even or every_split:
        return [est for est, _ in out]
    return _exact(out, kinds, samples, optimizer, between_gbs, between_latency, splits.incumbent)


def _exact(found: list[tuple[Estimate, list[int]]], kinds: list[KindModel], samples: int, optimizer: str,
           between_gbs: float, between_latency: float, incumbent: float) -> list[Estimate]:
    """``found`` (bottleneck splits) with the exact split (:mod:`mapper.cluster.split`) wherever it
    may beat the best step so far: a layout whose ``m B*`` (``B*`` its bottleneck split's largest
    stage, the least of any split) reaches that step keeps its bottleneck split, with ``m B*`` as
    the bound on every split of it."""
    best = min((e.step for e, _ in found if e.fits), default=incumbent)
    best = min(best, incumbent)
    out = []
    for est, seq in sorted(found, key=lambda x: x[0].micro_batches * max(x[0].rank_times)):
        floor = est.micro_batches * max(est.rank_times)
        if floor < best * (1 - 1e-9):
            exact = _estimate(kinds, est.layout, seq, samples, optimizer, between_gbs, between_latency, "exact",
                              cap=best)
            if exact is not None:
                est = exact
                if est.fits:
                    best = min(best, est.step)
        else:
            est = replace(est, split_floor=floor)
        out.append(est)
    return out


def _estimate(kinds: list[KindModel], lay: Layout, seq: list[int], samples: int, optimizer: str,
              between_gbs: float, between_latency: float, split: str = "exact",
              given: tuple[int, ...] | None = None, cap: float = math.inf) -> Estimate | None:
    """One mixed layout, its layers split as ``given``, or by ``split``: ``exact``
    (:func:`~mapper.cluster.split.exact_split`), ``bottleneck`` (:func:`stage_partition`, sends
    included) or ``even`` (as if every stage were of the first kind); ``cap``: a step to beat."""
    t, d, p = lay.tensor, lay.data, lay.pipeline
    if p > len(kinds[0].model.profile.blocks):
        return None
    m = samples // (d * lay.micro_batch)
    times = [km.model._block_times(lay) for km in kinds]
    weights = [[f + b for f, b in zip(*tb)] for tb in times]
    blocks = kinds[0].model.profile.blocks

    sends: dict[tuple[int, bool], list[float]] = {}  # (kind, to another kind) -> seconds by end block

    def hop(s: int, e: int) -> float:
        """Seconds of stage ``s``'s send to the next when it ends before block ``e``."""
        if s + 1 >= p:
            return 0.0
        key = (seq[s], seq[s + 1] != seq[s])
        if key not in sends:
            net = kinds[seq[s]].model.net
            outs = [0.0] + [blk.out_bytes / samples * lay.micro_batch for blk in blocks]
            if key[1]:  # to another kind: one rank's share of the between fabric
                between = replace(net, node_gbs=between_gbs, inter_latency=between_latency)
                sends[key] = [send(between, x, True) for x in outs]
            else:
                sends[key] = [send(net, x, t * d >= net.gpus_per_node) for x in outs]
        return sends[key][e]

    def hop_rows() -> list[list[float]]:
        """Each stage's sends, forward and backward (``2 hop(s, e)``), as a row by end block; the
        stages of one kind sending in one direction share a row."""
        rows: dict[tuple[int, bool] | None, list[float]] = {None: [0.0] * (len(blocks) + 1)}
        out = []
        for s in range(p):
            key = (seq[s], seq[s + 1] != seq[s]) if s + 1 < p else None
            if key not in rows:
                rows[key] = [2 * hop(s, e) for e in range(len(blocks) + 1)]
            out.append(rows[key])
        return out

    floor = None
    if given is not None:
        starts: tuple[int, ...] | None = given
    elif split == "even":
        starts = stage_partition([weights[0]] * len(kinds), seq)
    elif split == "bottleneck":
        starts = stage_partition(weights, seq, hop_rows())
    else:
        exact = exact_split(_stage_costs(kinds, lay, seq, weights, hop_rows(), m, optimizer), m, cap)
        if exact is None:  # no split fits: the bottleneck one, to report what it needs
            starts = stage_partition(weights, seq, hop_rows())
        else:
            starts, floor = exact
    if starts is None:
        return None
    ends = [*starts[1:], len(kinds[0].model.profile.blocks)]
    opt = OPTIMIZERS[optimizer]
    rank_times, chunk_times, rank_sync = [], [], []
    worst: tuple[float, dict[str, float], float, int] | None = None
    held: list[float] = []  # each rank's bytes per GPU
    for s, (a, e) in enumerate(zip(starts, ends)):
        km = kinds[seq[s]]
        fw, bw = times[seq[s]]
        f, b = sum(fw[a:e]) + hop(s, e), sum(bw[a:e]) + hop(s, e)
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
        wbytes = sum(km.model.low.held_bytes(costs[i], lay) for i in range(a, e))  # as held (lowparam)
        memory = {**state_bytes(params, pbytes, opt.states, km.model.grad, lay.zero, d, wbytes),
                  **activation_parts(kept * min(p - s, m) + work, km.model.fragmentation),
                  "reserve": reserve(km.model.capacity, lay)}
        held.append(sum(memory.values()))
        over = sum(memory.values()) / km.model.capacity if km.model.capacity else math.inf
        if worst is None or over > worst[0]:
            worst = (over, memory, km.model.capacity, s)
    assert worst is not None
    pipe = step_time(rank_times, m, 1)
    sync = max(rank_sync)
    return Estimate(lay, "1f1b", m, pipe + sync, pipe, sync, tuple(starts), tuple(rank_times), tuple(chunk_times),
                    tuple(rank_sync), worst[1], worst[2], worst[3], tuple(kinds[k].kind for k in seq),
                    split_floor=floor, rank_memory=tuple(held))


def _stage_costs(kinds: list[KindModel], lay: Layout, seq: list[int], weights: list[list[float]],
                 hops: list[list[float]], m: int, optimizer: str) -> list[np.ndarray]:
    """``cost[s][a, e]``: seconds per micro-batch of blocks ``a .. e-1`` as stage ``s`` (its kind's
    times and its send to the next stage), ``inf`` where they do not fit its GPUs (the memory of
    :func:`_estimate`, by prefix sums)."""
    n, p, d = len(weights[0]), len(seq), lay.data
    opt = OPTIMIZERS[optimizer]
    ends = np.arange(n + 1)
    upper = ends[None, :] > ends[:, None]  # a < e
    per_kind = {}
    for k in set(seq):
        km = kinds[k]
        costs = km.model.block_costs(lay.tensor, lay.micro_batch)
        acts = [km.model._activations(lay, range(i, i + 1)) for i in range(n)]

        def span(values: list[float]) -> np.ndarray:
            pre = np.concatenate(([0.0], np.cumsum(values)))
            with np.errstate(invalid="ignore"):  # inf - inf below the diagonal, which is masked
                return pre[None, :] - pre[:, None]  # [a, e]: blocks a .. e-1

        pbytes, params = span([c.param_bytes for c in costs]), span([c.params for c in costs])
        work = np.zeros((n + 1, n + 1))
        for a in range(n):
            work[a, a + 1:] = np.maximum.accumulate([w for _, w in acts[a:]])
        wbytes = span([km.model.low.held_bytes(c, lay) for c in costs])  # the weights as held (lowparam)
        fixed = (sum(state_bytes(params, pbytes, opt.states, km.model.grad, lay.zero, d, wbytes).values())
                 + sum(activation_parts(work, km.model.fragmentation).values())
                 + reserve(km.model.capacity, lay))
        kept_span = span([sum(activation_parts(kept, km.model.fragmentation).values()) for kept, _ in acts])
        per_kind[k] = (span(weights[k]), fixed, kept_span, km.model.capacity)
    out = []
    for s, k in enumerate(seq):
        time, fixed, kept, capacity = per_kind[k]
        memory = fixed + kept * min(p - s, m)
        fits = upper & (memory <= capacity) if capacity else upper
        out.append(np.where(fits, time + np.asarray(hops[s])[None, :], np.inf))
    return out


def _shares(rates: list[tuple[int, float]], micro_batches: int) -> tuple[list[int], list[int]]:
    """Micro-batches of each kind's busiest replica, and of all its replicas together
    (``rates``: replicas and seconds per micro-batch of each kind), so that the slowest replica
    finishes first: each micro-batch to the replica that would end soonest with it (optimal
    for unit jobs on uniform machines). A kind's replicas are alike, so they end each round
    together and take its micro-batches in turn: one heap entry a kind, a round a pop (the same
    choices as one entry a replica, in ``micro_batches / replicas`` steps)."""
    import heapq

    heap = [(t, k) for k, (r, t) in enumerate(rates) if r > 0]
    heapq.heapify(heap)
    totals = [0] * len(rates)
    left = micro_batches
    while left > 0 and heap:
        end, k = heapq.heappop(heap)
        n = min(rates[k][0], left)
        totals[k] += n
        left -= n
        heapq.heappush(heap, (end + rates[k][1], k))
    return [-(-n // r) if r else 0 for n, (r, _) in zip(totals, rates)], totals


def shared_estimates(kinds: list[KindModel], samples: int, optimizer: str, between_gbs: float,
                     per_node: int, even: bool = False, every_share: bool = False) -> list[Estimate]:
    """Data parallelism over every GPU of every kind, no pipeline: each replica takes micro-batches
    in proportion to its kind's speed (HetSeq, Ding et al., 2021), and one all-reduce over all
    replicas crosses the fleet's ``[between]`` fabric. Each estimate's ``shares`` are
    ``(kind, replicas, fraction of the batch per replica)``; its one pipeline rank is the slowest
    replica. ``even``: every replica takes the same share (the baseline of benchmarks/hetero.py).
    ``every_share``: each layout once per division of the micro-batches among the kinds (each kind's
    spread evenly over its replicas), not only the greedy one (exhaustive enumeration, to check
    the planner on small instances)."""
    out = []
    t = 1
    while t <= min(per_node, MAX_TENSOR):
        if all(k.gpus % t == 0 for k in kinds):
            b = 1
            while samples % b == 0 and b <= 8:
                for rc in RECOMPUTE:
                    divisions = _divisions(samples // b, [k.gpus // t for k in kinds]) if every_share else [None]
                    for division in divisions:
                        est = _shared(kinds, samples, optimizer, between_gbs, t, b, rc, even, division)
                        if est is not None:
                            out.append(est)
                b *= 2
        t *= 2
    return out


def _divisions(micro_batches: int, replicas: list[int]) -> list[tuple[list[int], list[int]]]:
    """Every division of ``micro_batches`` among kinds of ``replicas`` replicas each, as
    :func:`_shares` answers: each kind's busiest replica's micro-batches and the kind's total."""
    out = []

    def split(left: int, k: int, totals: list[int]) -> None:
        if k == len(replicas) - 1:
            totals = [*totals, left]
            out.append(([-(-n // r) for n, r in zip(totals, replicas)], totals))
            return
        for n in range(left + 1):
            split(left - n, k + 1, [*totals, n])

    split(micro_batches, 0, [])
    return out


def _shared(kinds: list[KindModel], samples: int, optimizer: str, between_gbs: float, t: int, b: int,
            rc: str, even: bool = False, given: tuple[list[int], list[int]] | None = None) -> Estimate | None:
    """Data parallelism over every kind, micro-batches shared by :func:`_shares` (or as ``given``)."""
    replicas = [k.gpus // t for k in kinds]
    d = sum(replicas)
    lay = Layout(t, 1, d, b, 1, rc, 1 if d > 1 else 0, t > 1)
    times = [k.model._block_times(lay) for k in kinds]
    per_mb = [sum(f) + sum(bw) for f, bw in times]
    counts, totals = given if given is not None else \
        _shares(list(zip(replicas, [1.0] * len(kinds) if even else per_mb)), samples // b)
    ends = [n * tm for n, tm in zip(counts, per_mb)]
    slow = max(range(len(kinds)), key=lambda k: ends[k])
    opt = OPTIMIZERS[optimizer]
    costs = [k.model.block_costs(t, b) for k in kinds]
    pbytes = sum(c.param_bytes for c in costs[0])
    params = sum(c.params for c in costs[0])
    # one ring over all replicas: each kind's NIC share, and the link between kinds
    allreduce = max(collective(k.model.net, "allreduce", pbytes, d, min(d, max(1, k.model.net.gpus_per_node // t)))[0]
               for k in kinds)
    gpn = max(k.model.net.gpus_per_node for k in kinds)
    # and the link between kinds (its latency aside)
    allreduce = max(allreduce, ring("allreduce", pbytes, d, between_gbs * 1e9 * min(t, gpn) / gpn, 0.0))
    exposed = max(allreduce - sum(times[slow][1]), allreduce / max(1, math.ceil(pbytes / BUCKET)))
    update = max(sum(c.update for c in cs) for cs in costs) / (d if lay.zero else 1)
    worst: tuple[float, dict[str, float], float] | None = None
    for km in kinds:
        kept, work = km.model._activations(lay, range(len(km.model.profile.blocks)))
        wbytes = sum(km.model.low.held_bytes(c, lay) for c in km.model.block_costs(t, b))  # as held (lowparam)
        memory = {**state_bytes(params, pbytes, opt.states, km.model.grad, lay.zero, d, wbytes),
                  **activation_parts(kept + work, km.model.fragmentation),
                  "reserve": reserve(km.model.capacity, lay)}
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
