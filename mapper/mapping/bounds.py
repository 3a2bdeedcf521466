"""Lower bounds on the objectives, for the gap every mapper reports."""

from __future__ import annotations

import math
import weakref

import numpy as np

from mapper.costing.cost import CostTable
from mapper.engine.schedule import ScheduleOptions
from mapper.mapping.bin_bound import bin_packing_bound
from mapper.mapping.orders import allowed_devices
from mapper.mapping.pipeline import pipelined

INF = math.inf
#: Edges per vectorised step of :func:`path_bound` (each takes ``D x D`` floats).
_EDGE_CHUNK = 4096
#: Device sets tried by :func:`class_load_bound` (the heaviest).
_MAX_SETS = 64
#: Steps of the device-weight search of :func:`fractional_load_bound`: at most
#: this many, at least 20, and about ``_LOAD_WORK`` task-device products in all.
_LOAD_STEPS = 200
_LOAD_WORK = 2e7
#: ... and past twice this many, it ends after this many without a gain of 1e-9.
_LOAD_PATIENCE = 50


def min_times(cost: CostTable, allowed: list[tuple[int, ...]] | None = None) -> tuple[float, ...]:
    """Each task's smallest time over the devices its placement allows
    (raises if a task has none)."""
    cost.require_feasible()
    allowed = _allowed(cost) if allowed is None else allowed
    return tuple(min(cost.time[t][d] for d in devs) for t, devs in enumerate(allowed))


def _allowed(cost: CostTable) -> list[tuple[int, ...]]:
    """Each task's :func:`~mapper.mapping.orders.allowed_devices` (all where it
    has a finite time when its placement permits none: that mapping fails
    elsewhere, with its own message)."""
    return [allowed_devices(cost, t) or cost.feasible_devices(t) for t in range(cost.n_tasks)]


def allowed_times(cost: CostTable, allowed: list[tuple[int, ...]]) -> np.ndarray:
    """The time table as an ``n x D`` array, infinite where a task is not allowed."""
    n, nd = cost.n_tasks, cost.n_devices
    times = np.array(cost.time, dtype=float).reshape(n, nd)
    for t, devs in enumerate(allowed):
        if len(devs) < nd:  # infinite times are not allowed already; a placement may forbid more
            times[t, [d for d in range(nd) if d not in devs]] = np.inf
    return times


def makespan_lower_bound(cost: CostTable, allowed: list[tuple[int, ...]] | None = None,
                         w: tuple[float, ...] | None = None) -> float:
    """A lower bound on the makespan under the delay model (``allowed``: each
    task's allowed devices, ``w``: :func:`min_times`): the largest of

    - :func:`path_bound`, the critical path with transfers;
    - :func:`class_load_bound`, the work that must share each set of devices;
    - :func:`fractional_load_bound`, the busiest device with tasks split;
    - the largest single minimum time.
    """
    allowed = _allowed(cost) if allowed is None else allowed
    w = min_times(cost, allowed) if w is None else w
    if not w:
        return 0.0
    return max(path_bound(cost, allowed), class_load_bound(cost, allowed, w), fractional_load_bound(cost, allowed),
               max(w))


def path_bound(cost: CostTable, allowed: list[tuple[int, ...]] | None = None) -> float:
    """The longest path when every task may run on any device it is allowed
    and each edge pays the transfer between its ends' devices (none on one
    device), with no device shared: ``F[t][d] = time[t][d] + max over edges
    p -> t of min over d' of (F[p][d'] + comm(p -> t, d', d))``, the bound
    is ``max_t min_d F[t][d]``. The optimistic cost table of PEFT (Arabnejad
    and Barbosa, IEEE TPDS 25(3), 2014) forward, in time; it takes in both the
    critical path at minimum times and the transfers no mapping avoids
    (between tasks that cannot share a device). Vectorised by topological
    level."""
    allowed = _allowed(cost) if allowed is None else allowed
    n, nd = cost.n_tasks, cost.n_devices
    if not n:
        return 0.0
    times = allowed_times(cost, allowed)
    lat = np.array(cost.route_latency, dtype=float).reshape(nd, nd)
    spb = np.array(cost.route_sec_per_byte, dtype=float).reshape(nd, nd)
    spb = np.where(np.isinf(spb), 0.0, spb)  # no route: the latency is infinite already
    off = ~np.eye(nd, dtype=bool)
    graph = cost.graph
    levels = [0] * n
    for t in graph.topo_order:
        levels[t] = 1 + max((levels[p] for p in graph.pred_tasks(t)), default=-1)
    level = np.array(levels, dtype=np.int64)
    edges = graph.edges
    src = np.fromiter((e.src for e in edges), dtype=np.int64, count=len(edges))
    dst = np.fromiter((e.dst for e in edges), dtype=np.int64, count=len(edges))
    nbytes = np.fromiter((e.bytes for e in edges), dtype=float, count=len(edges))
    explicit = np.fromiter((np.nan if e.comm is None else e.comm for e in edges), dtype=float, count=len(edges))
    by_edge = np.lexsort((dst, level[dst]))  # by level, then by the task they enter
    edge_level = level[dst][by_edge]
    by_task = np.argsort(level, kind="stable")
    task_level = level[by_task]
    finish = np.zeros((n, nd))
    ready = np.zeros((n, nd))
    for lv in range(int(level.max()) + 1):
        lo, hi = np.searchsorted(edge_level, [lv, lv + 1])
        for first in range(int(lo), int(hi), _EDGE_CHUNK):
            chunk = by_edge[first:min(int(hi), first + _EDGE_CHUNK)]
            with np.errstate(invalid="ignore"):
                routed = lat + nbytes[chunk, None, None] * spb
            given = explicit[chunk, None, None]
            comm = np.where(off, np.where(np.isnan(given), routed, given), 0.0)  # none on one device
            arrival = (finish[src[chunk]][:, :, None] + comm).min(axis=1)
            into = dst[chunk]
            starts = np.flatnonzero(np.r_[True, into[1:] != into[:-1]])
            targets = into[starts]
            ready[targets] = np.maximum(ready[targets], np.maximum.reduceat(arrival, starts, axis=0))
        lo, hi = np.searchsorted(task_level, [lv, lv + 1])
        tasks = by_task[lo:hi]
        finish[tasks] = ready[tasks] + times[tasks]
    return float(finish.min(axis=1).max())


def class_load_bound(cost: CostTable, allowed: list[tuple[int, ...]] | None = None,
                     w: tuple[float, ...] | None = None) -> float:
    """The work that must share a set of devices over its size: for each set
    ``S`` that some task is allowed exactly, the tasks allowed only within
    ``S``, each at its minimum time, divided by ``|S|`` (the whole platform
    is one such set: total work over the device count). Pinned tasks make
    this the busiest device's load."""
    allowed = _allowed(cost) if allowed is None else allowed
    w = min_times(cost, allowed) if w is None else w
    groups: dict[frozenset[int], float] = {}
    for devs, x in zip(allowed, w):
        key = frozenset(devs)
        groups[key] = groups.get(key, 0.0) + x
    everything = frozenset().union(*groups)
    sets = [everything] + (sorted(groups, key=lambda g: -groups[g])[:_MAX_SETS] if len(groups) > 1 else [])
    best = 0.0
    for s in sets:
        if s:
            best = max(best, sum(x for g, x in groups.items() if g <= s) / len(s))
    return best


def fractional_load_bound(cost: CostTable, allowed: list[tuple[int, ...]] | None = None) -> float:
    """The busiest device's load, at least, when tasks may even be split
    across their allowed devices: the linear relaxation of scheduling on
    unrelated machines (Lenstra, Shmoys and Tardos, "Approximation algorithms
    for scheduling unrelated parallel machines", Math. Programming 46, 1990),
    bounded through its dual. For device weights ``y >= 0`` summing to 1,
    ``sum_t min_d y[d] time[t][d]`` is at most ``sum_d y[d] load[d]``, so at
    most the busiest load, of any mapping; every ``y`` gives a valid bound.
    The weights start inversely proportional to each device's total time
    (the optimum when times are work over speed) and follow exponentiated
    supergradient steps (the load each device gets when every task takes
    its cheapest) until they stop gaining; the best value found is the
    bound. On heterogeneous devices it is far above the total work over
    the device count."""
    allowed = _allowed(cost) if allowed is None else allowed
    n = cost.n_tasks
    if not n:
        return 0.0
    times = allowed_times(cost, allowed)
    finite = np.isfinite(times)
    if not finite.any(axis=1).all():
        return 0.0  # a task with no device: that mapping fails elsewhere, with its own message
    total = np.where(finite, times, 0.0).sum(axis=0)  # each device's time for every task it may take
    used = finite.any(axis=0)
    if (used & (total <= 0)).any():
        return 0.0  # a device runs every task it may take in no time
    with np.errstate(all="ignore"):  # times far apart (1e-15 beside 1e12) under- or overflow: no warnings
        return _load_search(times, finite, total, used)


def _load_search(times: np.ndarray, finite: np.ndarray, total: np.ndarray, used: np.ndarray) -> float:
    """The supergradient search of :func:`fractional_load_bound`, from weights ``1 / total``."""
    n, nd = times.shape
    smallest = float(total[used].min())
    y = np.where(used, smallest / np.where(used, total, 1.0), 0.0)  # 1 / total, scaled: at most 1, sum >= 1
    y /= y.sum()
    rows = np.arange(n)
    best, last = 0.0, 0
    zeroed = np.where(finite, times, 0.0)
    for k in range(max(20, min(_LOAD_STEPS, int(_LOAD_WORK / (n * nd))))):
        weighted = np.where(finite, zeroed * y, np.inf)
        pick = weighted.argmin(axis=1)
        value = float(weighted[rows, pick].sum())
        if not math.isfinite(value):
            break
        if value > best * (1 + 1e-9):
            best, last = value, k
        if value <= 0 or (k >= 2 * _LOAD_PATIENCE and k - last >= _LOAD_PATIENCE):
            break
        load = np.bincount(pick, weights=times[rows, pick], minlength=nd)
        y = np.where(used, y * np.exp(np.clip((load / value - 1.0) / math.sqrt(k + 1), -1.0, 1.0)), 0.0)
        y /= y.sum()
    return best * (1 - 1e-12)  # a sum of n products: keep it below the exact value


def integral_times(cost: CostTable) -> bool:
    """Whether every task time and transfer time is a whole number (of seconds, or of
    the time units an explicit-cost graph reads as seconds). Then some optimal
    schedule under the delay model starts every task at a whole number (each
    start is an end, or an end plus a transfer, in a left-justified schedule),
    so the optimal makespan is whole and a bound may be rounded up."""
    if any(x != math.floor(x) for row in cost.time for x in row if x < INF):
        return False
    for e in cost.graph.edges:
        if e.comm is not None:
            if e.comm != math.floor(e.comm):
                return False
        elif e.bytes > 0:
            return False
    return True


#: The last bound computed: ``(cost, objective, options, bound)``, the cost held weakly (the cache
#: never keeps a graph alive). The exact engine prices one table with every heuristic, and each
#: reports the bound.
_last: list[tuple[weakref.ref[CostTable], str, ScheduleOptions, float | None]] = []


def lower_bound(cost: CostTable, objective: str, options: ScheduleOptions = ScheduleOptions()) -> float | None:
    """:func:`compute_lower_bound`, kept for the last cost table asked about."""
    if _last and _last[0][0]() is cost and _last[0][1:3] == (objective, options):
        return _last[0][3]
    bound = compute_lower_bound(cost, objective, options)
    _last[:] = [(weakref.ref(cost), objective, options, bound)]
    return bound


def compute_lower_bound(cost: CostTable, objective: str, options: ScheduleOptions = ScheduleOptions()) -> float | None:
    """A lower bound on ``objective`` (see :mod:`mapper.mapping.objectives`).

    makespan: :func:`makespan_lower_bound`, rounded up when the times are
    whole (:func:`integral_times`), and then on identical processors raised
    to where their task times fit in as many bins
    (:func:`~mapper.mapping.bin_bound.bin_packing_bound`); with streaming on and streamable
    tasks in the graph, chains overlap, so only the largest single minimum
    time (a streamed chain lasts at least as long as its slowest stage). deadline: the
    largest lateness of the earliest finishes along precedence with minimum times (0 if
    none is late). energy: the sum of each task's minimum energy. throughput (period): the
    larger of the largest minimum time and
    :func:`class_load_bound` (under ``1f1b``, with the total minimum work as
    the fill and drain). Minima are over the devices a task is allowed.
    """
    allowed = _allowed(cost)
    w = min_times(cost, allowed)
    if not w:
        return 0.0
    if objective == "makespan":
        streams = options.streaming and any(t.streamable > 0 for t in cost.graph.tasks)
        if streams:
            return max(w)
        bound = makespan_lower_bound(cost, allowed, w)
        if not integral_times(cost):
            return bound
        bound = math.ceil(bound * (1 - 1e-12))
        nd = cost.n_devices
        if all(len(devs) == nd for devs in allowed) and all(len(set(row)) == 1 for row in cost.time):
            bound = bin_packing_bound(w, nd, bound)  # identical processors
        return bound
    if objective == "energy":
        return float(sum(min(cost.energy[t][d] for d in devs) for t, devs in enumerate(allowed)))
    if objective == "throughput":
        busiest = max(max(w), class_load_bound(cost, allowed, w), fractional_load_bound(cost, allowed))
        if cost.platform.throughput_model == "1f1b":
            m = cost.platform.micro_batches
            return pipelined(sum(w), busiest, m) / m
        return busiest
    if objective == "deadline":
        g = cost.graph
        if options.streaming and any(t.streamable > 0 for t in g.tasks):
            return 0.0  # streamed chains overlap: no precedence chain to bound by
        finish = [0.0] * cost.n_tasks  # earliest finish with minimum times and no transfers
        for t in g.topo_order:
            finish[t] = w[t] + max((finish[g.edges[e].src] for e in g.preds[t]), default=0.0)
        return max([0.0] + [finish[t.index] - t.deadline for t in g.tasks if t.deadline is not None])
    return None
