"""Orders, reachability and device symmetry for exact and window mapping.

Pure functions over a :class:`~mapper.costing.cost.CostTable` and arc sets that the
MILP (:mod:`.milp`) and LNS (:mod:`.lns`) share: topological orders (Kahn,
"Topological sorting of large networks", CACM 1962), transitive closure as
bitsets, longest-path heads and tails (the critical-path method), per-device
orders from start times, and the detection of interchangeable devices.
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Callable
from dataclasses import replace

from mapper.costing.cost import INF, CostTable


def topo_arcs(n: int, arcs) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """``(topological order, successors, predecessors)`` of an acyclic arc set
    over ``0..n-1`` (arcs are ``(a, b, ...)``; extra items are ignored)."""
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for arc in arcs:
        a, b = arc[0], arc[1]
        succ[a].append(b)
        pred[b].append(a)
        indeg[b] += 1
    stack = [i for i in range(n) if indeg[i] == 0]
    topo: list[int] = []
    while stack:
        i = stack.pop()
        topo.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    return topo, succ, pred


def closure(n: int, arcs: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    """Descendant bitsets (``bit j of result[i]`` = ``i`` reaches ``j``) of an acyclic arc set."""
    topo, succ, _ = topo_arcs(n, arcs)
    reach = [0] * n
    for i in reversed(topo):
        r = 0
        for j in succ[i]:
            r |= (1 << j) | reach[j]
        reach[i] = r
    return tuple(reach)


def head_tail(
    n: int, arcs: tuple[tuple[int, int], ...], weight: list[float], release: list[float] | None = None
) -> tuple[list[float], list[float]]:
    """Longest ``weight`` path ending before each task (head, at least its
    ``release``) and starting after it (tail) over an acyclic arc set: lower
    bounds on the start and on the time from the end to the makespan,
    whatever the devices."""
    topo, succ, pred = topo_arcs(n, arcs)
    head = list(release) if release is not None else [0.0] * n
    tail = [0.0] * n
    for t in topo:
        head[t] = max([head[t]] + [head[p] + weight[p] for p in pred[t]])
    for t in reversed(topo):
        tail[t] = max((weight[q] + tail[q] for q in succ[t]), default=0.0)
    return head, tail


def allowed_devices(cost: CostTable, t: int) -> tuple[int, ...]:
    """Devices where task ``t`` has a finite time and its placement permits it."""
    place = cost.graph.tasks[t].placement
    if not (place.allow or place.deny):  # no placement: every feasible device
        return cost.feasible_devices(t)
    devices = cost.platform.devices
    return tuple(d for d in cost.feasible_devices(t) if place.permits(devices[d].name, devices[d].kind))


def dag_arcs(cost: CostTable) -> tuple[tuple[int, int], ...]:
    return tuple((e.src, e.dst) for e in cost.graph.edges)


def order_from_starts(
    cost: CostTable,
    device: tuple[int, ...],
    start: tuple[float, ...],
    extra_arcs: tuple[tuple[int, int], ...] = (),
) -> tuple[tuple[int, ...], ...]:
    """Per-device task order: a topological order of the graph (plus
    ``extra_arcs``) that always takes the ready task with the earliest start,
    ties by end then topological rank, filtered by device."""
    per: list[list[int]] = [[] for _ in range(cost.n_devices)]
    for t in start_sequence(cost, device, start, extra_arcs):
        per[device[t]].append(t)
    return tuple(tuple(p) for p in per)


def start_sequence(cost: CostTable, device: tuple[int, ...], start: tuple[float, ...],
                   extra_arcs: tuple[tuple[int, int], ...] = ()) -> list[int]:
    """Every task in the order :func:`order_from_starts` takes them: a
    topological order of the graph, of ``extra_arcs`` and of the device
    orders it yields. Ties in start go to the earlier end (a zero-duration
    task that starts with another ran before it), then to topological rank."""
    n = cost.n_tasks
    time = cost.time
    topo_rank = {t: r for r, t in enumerate(cost.graph.topo_order)}
    rank = {t: (start[t] + time[t][device[t]], topo_rank[t]) for t in range(n)}
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for a, b in dag_arcs(cost) + tuple(extra_arcs):
        succ[a].append(b)
        indeg[b] += 1
    heap = [(start[t], rank[t], t) for t in range(n) if indeg[t] == 0]
    heapq.heapify(heap)
    seq: list[int] = []
    while heap:
        _, _, t = heapq.heappop(heap)
        seq.append(t)
        for v in succ[t]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (start[v], rank[v], v))
    return seq


def chain_arcs(order: tuple[tuple[int, ...], ...], keep: frozenset[int]) -> tuple[tuple[int, int], ...]:
    """Arcs between consecutive tasks of ``keep`` in each device order."""
    arcs: list[tuple[int, int]] = []
    for seq in order:
        kept = [t for t in seq if t in keep]
        arcs.extend(zip(kept, kept[1:]))
    return tuple(arcs)


def count_order_pairs(cost: CostTable) -> int:
    """Number of ordering binaries the full model needs."""
    reach = closure(cost.n_tasks, dag_arcs(cost))
    feas = [frozenset(allowed_devices(cost, t)) for t in range(cost.n_tasks)]
    count = 0
    for i in range(cost.n_tasks):
        for j in range(i + 1, cost.n_tasks):
            if not (reach[i] >> j) & 1 and not (reach[j] >> i) & 1 and feas[i] & feas[j]:
                count += 1
    return count


#: The last table's classes: the exact models and the report's response-time bound ask for the same
#: table's (the table held weakly: the cache never keeps a graph alive).
_last_classes: list[tuple[weakref.ref[CostTable], tuple[tuple[int, ...], ...]]] = []


def identical_device_classes(cost: CostTable) -> tuple[tuple[int, ...], ...]:
    """Classes (size >= 2, ascending) of pairwise interchangeable devices."""
    if _last_classes and _last_classes[0][0]() is cost:
        return _last_classes[0][1]
    classes = _device_classes(cost)
    _last_classes[:] = [(weakref.ref(cost), classes)]
    return classes


def _device_classes(cost: CostTable) -> tuple[tuple[int, ...], ...]:
    nd = cost.n_devices
    cols = []
    placed = [t for t in cost.graph.tasks if t.placement.allow or t.placement.deny]  # the others permit all
    for d in range(nd):
        dev = cost.platform.devices[d]
        cols.append(
            (
                replace(dev, index=0, name=""),
                tuple(t.placement.permits(dev.name, dev.kind) for t in placed),
                cost.memory_capacity[d],
                cost.area_capacity[d],
            )
        )

    def same_columns(a: int, b: int) -> bool:  # the tables' columns, compared up to the first difference
        return all(row[a] == row[b] for table in (cost.time, cost.energy, cost.area) for row in table)

    def swappable(a: int, b: int) -> bool:  # the columns are equal: the routes decide
        for mat in (cost.route_latency, cost.route_sec_per_byte):
            if mat[a][b] != mat[b][a]:
                return False
            for c in range(nd):
                if c not in (a, b) and (mat[a][c] != mat[b][c] or mat[c][a] != mat[c][b]):
                    return False
        return True

    # being swappable is an equivalence (equal columns; routes equal to and from every
    # third device make those between the two equal too), so each device is compared
    # with one member of each class of equal descriptions and columns, not with every member
    buckets: dict[tuple, list[list[int]]] = {}
    for d in range(nd):
        found = buckets.setdefault(cols[d], [])
        for cls in found:
            if same_columns(cls[0], d) and swappable(cls[0], d):
                cls.append(d)
                break
        else:
            found.append([d])
    return tuple(sorted(tuple(c) for group in buckets.values() for c in group if len(c) > 1))


def pooled_classes(cost: CostTable, classes: tuple[tuple[int, ...], ...],
                   negligible: Callable[[float], bool] = lambda c: c == 0.0) -> tuple[tuple[int, ...], ...]:
    """The ``classes`` of interchangeable devices a scheduling model may pool
    (one resource of as many units as the class has devices): those between
    two of whose devices every edge's transfer is ``negligible``, in a graph
    without colocation (a pool cannot say which of its devices a task is on).
    Which device runs a task then does not matter, only how many of the
    class's devices are busy at each moment."""
    if any(t.colocate for t in cost.graph.tasks):
        return ()
    edges = cost.graph.edges
    return tuple(c for c in classes
                 if all((x := cost.comm(e.index, c[0], c[1])) < INF and negligible(x) for e in edges))


def canonical_devices(device: tuple[int, ...], classes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """Relabel interchangeable devices so each class is used in order of its
    lowest assigned task index (the representative the symmetry cuts keep)."""
    out = list(device)
    for cls in classes:
        first = {d: min((t for t, x in enumerate(device) if x == d), default=len(device)) for d in cls}
        ranked = sorted(cls, key=lambda d: (first[d], d))
        remap = dict(zip(ranked, cls))
        out = [remap.get(x, x) if device[t] in remap else x for t, x in enumerate(out)]
    return tuple(out)
