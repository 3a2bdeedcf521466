"""Graph coarsening by fusing linear chains, for mapping large graphs.

A chain link is an edge ``u -> v`` where ``u`` has exactly one outgoing edge
(to ``v``) and ``v`` exactly one incoming edge (from ``u``). Fusing such links
(in the spirit of the edge-zeroing clustering of Sarkar, "Partitioning and
Scheduling Parallel Programs for Multiprocessors", MIT Press 1989) turns a
maximal chain into one coarse task whose time on a device is the sum of its
members' times; the fused edges cost nothing because the members share a
device.

What fusion does to the search, precisely: it adds the constraint "all members
of a chain run on one device, back to back". Back to back costs nothing (a
member's only input comes from its predecessor on the same device, so in an
ASAP schedule it can start the moment the predecessor ends, exactly as the
coarse task's timing assumes); the same-device restriction CAN cost, when the
members' best devices differ. We therefore only fuse a link when the two tasks
have a common fastest device (their argmin-time device sets intersect) and
the chain keeps a common feasible device (and, with the memory/area options,
fits one). That keeps the restriction mild but is not a guarantee of
optimality; :mod:`mapper.mapping.lns` always compares the expanded result with
the best heuristic on the original graph and keeps the better one.

Expanding a coarse mapping (:func:`expand`) gives each member its chain's
device and splices the chain into that device's order; re-timing the fine
graph with :func:`mapper.engine.schedule.build_schedule` then reproduces the coarse
makespan exactly under the delay model.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.graph import Edge, Task, TaskGraph
from mapper.costing.cost import INF, CostTable
from mapper.engine.schedule import ScheduleOptions


@dataclass(frozen=True, slots=True)
class Coarsening:
    """A coarse cost table and how it maps back.

    ``groups[k]`` lists the fine tasks of coarse task ``k`` in chain order;
    ``group_of[t]`` is the coarse task holding fine task ``t``.
    """

    fine: CostTable
    cost: CostTable
    groups: tuple[tuple[int, ...], ...]
    group_of: tuple[int, ...]

    @property
    def fused(self) -> int:
        """Number of fine tasks removed by fusion."""
        return self.fine.n_tasks - self.cost.n_tasks


def _argmin_set(row: tuple[float, ...]) -> frozenset[int]:
    best = min(row)
    return frozenset(d for d, x in enumerate(row) if x == best and x < INF)


def _fits(cost: CostTable, members: list[int], d: int, options: ScheduleOptions) -> bool:
    if any(cost.time[t][d] == INF for t in members):
        return False
    if options.memory and sum(cost.footprint[t] for t in members) > cost.memory_capacity[d]:
        return False
    if options.area and cost.platform.devices[d].kind == "fpga":
        if sum(cost.area[t][d] for t in members) > cost.area_capacity[d]:
            return False
    return True


def chains(cost: CostTable, options: ScheduleOptions = ScheduleOptions()) -> tuple[tuple[int, ...], ...]:
    """Maximal fusable chains (length >= 1) covering every task, ordered by
    their lowest task index."""
    g = cost.graph
    n, nd = cost.n_tasks, cost.n_devices
    nxt: dict[int, int] = {}
    for u in range(n):
        if len(g.succs[u]) != 1:
            continue
        v = g.edges[g.succs[u][0]].dst
        if len(g.preds[v]) == 1 and _argmin_set(cost.time[u]) & _argmin_set(cost.time[v]):
            nxt[u] = v
    has_prev = set(nxt.values())
    out: list[tuple[int, ...]] = []
    for head in range(n):
        if head in has_prev:
            continue
        group = [head]
        t = head
        while t in nxt:
            cand = group + [nxt[t]]
            if not any(_fits(cost, cand, d, options) for d in range(nd)):
                out.append(tuple(group))
                group = [nxt[t]]
            else:
                group = cand
            t = nxt[t]
        out.append(tuple(group))
    return tuple(sorted(out, key=min))


def coarsen(cost: CostTable, options: ScheduleOptions = ScheduleOptions()) -> Coarsening:
    """Fuse the chains of :func:`chains` into a coarse :class:`CostTable`."""
    return grouped(cost, chains(cost, options))


def grouped(cost: CostTable, groups: tuple[tuple[int, ...], ...]) -> Coarsening:
    """The coarse table of ``groups`` (each a set of fine tasks in an order that respects their
    edges; the quotient must be acyclic): a group's time on a device is its members' sum, and the
    edges between two groups become one carrying the largest of their data (their transfers run
    side by side under the delay model, so the coarse arrival bounds every fine one)."""
    g = cost.graph
    nd = cost.n_devices
    group_of = [0] * cost.n_tasks
    for k, members in enumerate(groups):
        for t in members:
            group_of[t] = k
    tasks, time, energy, bound, reasons, footprint, area = [], [], [], [], [], [], []
    for k, members in enumerate(groups):
        label = g.tasks[members[0]].name if len(members) == 1 else \
            f"{g.tasks[members[0]].name}..{g.tasks[members[-1]].name}"
        tasks.append(Task(index=k, name=label, op="task"))
        row_t, row_e, row_b, row_a = [], [], [], []
        for d in range(nd):
            if all(cost.time[t][d] < INF for t in members):
                row_t.append(sum(cost.time[t][d] for t in members))
                row_e.append(sum(cost.energy[t][d] for t in members))
                row_b.append("explicit")
            else:
                row_t.append(INF)
                row_e.append(INF)
                row_b.append("infeasible")
                reasons.append((k, d, "a fused member cannot run there"))
            row_a.append(sum(cost.area[t][d] for t in members))
        time.append(tuple(row_t))
        energy.append(tuple(row_e))
        bound.append(tuple(row_b))
        area.append(tuple(row_a))
        footprint.append(sum(cost.footprint[t] for t in members))
    merged: dict[tuple[int, int, bool], list] = {}
    for e in g.edges:
        a, b = group_of[e.src], group_of[e.dst]
        if a != b:
            key = (a, b, e.comm is not None)
            have = merged.get(key)
            if have is None:
                merged[key] = [e.bytes, e.comm, e.tensor]
            else:
                have[0] = max(have[0], e.bytes)
                have[1] = None if e.comm is None else max(have[1], e.comm)
    edges = [Edge(index=i, src=a, dst=b, bytes=v[0], comm=v[1], tensor=v[2])
             for i, ((a, b, _), v) in enumerate(sorted(merged.items()))]
    graph = TaskGraph(name=f"{g.name}.coarse", tasks=tuple(tasks), edges=tuple(edges))
    coarse = CostTable(
        graph=graph,
        platform=cost.platform,
        time=tuple(time),
        energy=tuple(energy),
        bound=tuple(bound),
        reasons=tuple(reasons),
        route_latency=cost.route_latency,
        route_sec_per_byte=cost.route_sec_per_byte,
        routes=cost.routes,
        footprint=tuple(footprint),
        memory_capacity=cost.memory_capacity,
        area=tuple(area),
        area_capacity=cost.area_capacity,
    )
    return Coarsening(fine=cost, cost=coarse, groups=groups, group_of=tuple(group_of))


def expand(
    coarsening: Coarsening, device: tuple[int, ...], order: tuple[tuple[int, ...], ...] | None
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...] | None]:
    """Fine ``(device, order)`` from a coarse one: members inherit their
    chain's device and run back to back where the chain stood."""
    fine_dev = tuple(device[k] for k in coarsening.group_of)
    if order is None:
        return fine_dev, None
    return fine_dev, tuple(tuple(t for k in seq for t in coarsening.groups[k]) for seq in order)


def project(
    coarsening: Coarsening, device: tuple[int, ...], start: tuple[float, ...]
) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
    """Coarse ``(device, start)`` of a fine mapping, or None when some chain
    is split over devices (the fine mapping is not expressible)."""
    out_dev, out_start = [], []
    for members in coarsening.groups:
        devs = {device[t] for t in members}
        if len(devs) != 1:
            return None
        out_dev.append(device[members[0]])
        out_start.append(start[members[0]])
    return tuple(out_dev), tuple(out_start)
