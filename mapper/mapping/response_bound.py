"""Sound response-time bounds of a DAG under work-conserving dispatching.

Graham's bound, for ``m`` identical cores (R. L. Graham, "Bounds on
multiprocessing timing anomalies", SIAM J. Appl. Math. 17(2), 1969)::

    R <= len(G) + (vol(G) - len(G)) / m

Han et al.'s bound for *typed* DAGs, each vertex bound to one type of core
and type ``s`` having ``M_s`` identical cores (M. Han, N. Guan, J. Sun,
Q. He, Q. Deng, W. Liu, "Response Time Bounds for Typed DAG Parallel Tasks
on Heterogeneous Multi-cores", IEEE TPDS 30(11), 2019, the first of its two
bounds)::

    R <= max over complete paths L of  len(L) + sum_s (vol_s(G) - len_s(L)) / M_s

where ``vol_s`` is the work of type ``s`` and ``len_s(L)`` that of the type-``s``
vertices on ``L``. It is ``sum_s vol_s / M_s`` plus the longest path with
vertex weights ``c_v (1 - 1 / M_{s(v)})``, one pass in topological order. With
one type it is Graham's bound. A transfer between tasks is a delay that holds
no core (a type with unboundedly many cores): it adds its full length to a
path. Both hold for *any* work-conserving dispatcher (no core of a type idles
while a vertex of that type is ready) whatever the order, and for execution
times at most the ones given (worst-case execution times).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from mapper.core.graph import topological_order
from mapper.engine.schedule import Schedule
from mapper.mapping.orders import identical_device_classes, pooled_classes


@dataclass(frozen=True, slots=True)
class TypedDag:
    """Vertex times and types, edges ``(src, dst, delay)`` and each type's core count."""

    times: Sequence[float]
    types: Sequence[Hashable]
    edges: Sequence[tuple[int, int, float]]
    cores: Mapping[Hashable, int]
    order: Sequence[int] | None = None  # a topological order of the vertices, when known


def _topo(n: int, edges: Sequence[tuple[int, int, float]]) -> list[int]:
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b, _ in edges:
        succ[a].append(b)
    return topological_order(succ)[0]


def han_bound(dag: TypedDag) -> float:
    """Han et al.'s bound (module docstring); Graham's where there is one type."""
    n = len(dag.times)
    vol: dict[Hashable, float] = {}
    for c, s in zip(dag.times, dag.types):
        vol[s] = vol.get(s, 0.0) + c
    weight = [c * (1 - 1 / dag.cores[s]) for c, s in zip(dag.times, dag.types)]
    into: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for a, b, delay in dag.edges:
        into[b].append((a, delay))
    best = [0.0] * n
    for v in dag.order if dag.order is not None else _topo(n, dag.edges):
        best[v] = weight[v] + max((best[a] + delay for a, delay in into[v]), default=0.0)
    return sum(vol[s] / dag.cores[s] for s in vol) + max(best, default=0.0)


def graham_bound(times: Sequence[float], edges: Sequence[tuple[int, int, float]], m: int) -> float:
    """Graham's bound on ``m`` identical cores: ``len + (vol - len) / m``."""
    return han_bound(TypedDag(times, [0] * len(times), edges, {0: m}))


def work_conserving_makespan(dag: TypedDag, priority: Sequence[float]) -> float:
    """The makespan of a work-conserving list schedule of ``dag``: whenever a core of
    a type is free, it takes the ready vertex of that type with the lowest ``priority``."""
    n = len(dag.times)
    preds = [0] * n
    succ: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for a, b, delay in dag.edges:
        succ[a].append((b, delay))
        preds[b] += 1
    ready_at = [0.0] * n
    free = dict(dag.cores)
    queue: dict[Hashable, list[tuple[float, int]]] = {s: [] for s in dag.cores}
    events: list[tuple[float, int, int]] = []  # (time, kind 0 = a vertex ends / 1 = a vertex is ready, v)
    for v in range(n):
        if preds[v] == 0:
            heapq.heappush(events, (0.0, 1, v))
    now = end = 0.0
    while events:
        now, kind, v = heapq.heappop(events)
        if kind == 0:
            free[dag.types[v]] += 1
            end = max(end, now)
            for w, delay in succ[v]:
                ready_at[w] = max(ready_at[w], now + delay)
                preds[w] -= 1
                if preds[w] == 0:
                    heapq.heappush(events, (ready_at[w], 1, w))
        else:
            heapq.heappush(queue[dag.types[v]], (priority[v], v))
        if events and events[0][0] == now:
            continue  # settle every event of this instant before dispatching
        for s, q in queue.items():
            while q and free[s] > 0:
                _, w = heapq.heappop(q)
                free[s] -= 1
                heapq.heappush(events, (now + dag.times[w], 0, w))
    return end


def schedule_dag(schedule: Schedule) -> tuple[TypedDag, tuple[tuple[int, ...], ...]]:
    """The mapping as a typed DAG, and the types used. A task's type is the pool of
    interchangeable devices its device belongs to (:func:`~mapper.mapping.orders.pooled_classes`:
    no transfer between them), else its device alone; its time is its slot's length; an
    edge's delay the slowest transfer between a device of its source's type and a
    different one of its destination's (0 within a pool): so the bound covers a
    dispatcher that runs a task on any device of its pool. Transfers are delays with
    no link contention."""
    cost = schedule.cost
    pools = pooled_classes(cost, identical_device_classes(cost))
    pool_of = {d: c for c in pools for d in c}
    cls = [pool_of.get(d, (d,)) for d in range(cost.n_devices)]
    slots = schedule.slots  # slots[t] is task t's
    times = [s.end - s.start for s in slots]
    types = [cls[s.device] for s in slots]
    edges = []
    for e in cost.graph.edges:
        a, b = types[e.src], types[e.dst]
        if len(a) == 1 and len(b) == 1:  # two lone devices (the common case): the one pair's time
            delay = cost.comm(e.index, a[0], b[0]) if a != b else 0.0
        else:
            delay = 0.0 if a == b else max((cost.comm(e.index, x, y) for x in a for y in b if x != y), default=0.0)
        edges.append((e.src, e.dst, delay))
    used = tuple(sorted(set(types)))
    return TypedDag(times, types, edges, {c: len(c) for c in used}, cost.graph.topo_order), used


def response_bound(schedule: Schedule) -> dict:
    """For the report: the bound on any work-conserving execution of this mapping (each task
    on any device of its device's class, transfers as placed), and the method."""
    dag, used = schedule_dag(schedule)
    names = schedule.cost.platform.devices
    of_type: dict[Hashable, list[float]] = {c: [] for c in used}  # each type's times, in task order
    for x, c in zip(dag.times, dag.types):
        of_type[c].append(x)
    return {
        "bound": han_bound(dag),
        "method": "graham" if len(used) == 1 else "han",
        "types": [{"devices": [names[d].name for d in c], "cores": len(c), "volume": sum(of_type[c])} for c in used],
    }
