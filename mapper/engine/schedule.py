"""THE timing semantics of mapper (docs/architecture.md, the delay model).

Given an assignment of tasks to devices (and optionally a per-device order),
compute when every task and transfer runs. The MILP and the validator encode
the same rules; this module is the reference.

Delay model
    A task runs on one device, a device runs one task at a time, and for an
    edge ``u -> v`` on different devices ``v`` may start only after
    ``end(u) + cost.comm(e, dev(u), dev(v))``; on the same device the delay is
    0. Transfers do not occupy devices. The makespan is the latest task end.

Delegated subgraphs
    On a device with ``invoke_us > 0`` (an NPU, a DLA: a runtime hands it
    whole partitions), its tasks in execution order form runs: a task
    continues the run of the task before it on that device unless one of its
    inputs comes from another device and depends on that run (the
    partition's border: ONNX Runtime's CreateSupportedPartitionNodeGroups,
    onnxruntime/core/providers/partitioning_utils.cc, which groups parallel
    branches no such input separates) or it belongs to another weakly
    connected part of the graph (another model: one session each); then it
    starts a new run (a new invocation). The first task of each run lasts
    its time plus ``invoke_us``. A
    ``shared_memory`` link prices a transfer at its ``sync_us``
    (``cost.comm``, :func:`mapper.costing.cost.route_tables`).

Options (all off by default; :attr:`Schedule.options` says which were on)
    ``contention``
        Every transfer moves store-and-forward along its route
        (``cost.routes[a][b]``): hop ``i`` may start when hop ``i - 1`` ends
        (hop 0 when the producer ends) and holds its link exclusively. A link
        serves the hops waiting for it first come, first served by the time
        they became ready (ties: edge index, then hop). Hop ``i`` lasts
        ``comm * w_i / sum(w)`` with ``w_i = latency_i + bytes / bandwidth_i``
        of its link (equal shares when all ``w`` are 0), so the hops of an
        uncontended transfer add up to exactly the delay-model time, explicit
        ``comm`` edges included. A transfer whose route has no links (explicit
        ``comm`` on a platform without links) never waits.
    ``streaming``
        On an FPGA device with ``streaming = true``, a maximal run of tasks
        consecutive in the device order, each ``streamable > 0``, where each
        task's only successor is the next and the next's only predecessor is
        it, runs as a pipeline (after Wilhelm et al., arXiv:2208.06321): the
        run starts like one task would, and member ``i`` occupies
        ``[S + a_i, S + b_i]`` with ``(a_i, b_i)`` from
        ``cost.stream_chain_times(times, min(streamable))``. The device is
        free again when the last member ends.
    ``memory``
        Static model: the ``cost.footprint`` of every task placed on a device
        is resident for the whole run and must fit ``cost.memory_capacity``.
    ``area``
        Static model: every task placed on an FPGA stays configured for the
        whole run (no reconfiguration), so the ``cost.area`` of all of them
        must fit ``cost.area_capacity``.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Sequence
from typing import cast

from mapper.core.graph import TaskGraph, weak_components
from mapper.costing.cost import CostTable, stream_chain_times
from mapper.engine.timed import Assignment as Assignment
from mapper.engine.timed import Schedule as Schedule
from mapper.engine.timed import ScheduleOptions as ScheduleOptions
from mapper.engine.timed import TaskSlot as TaskSlot
from mapper.engine.timed import Transfer as Transfer
from mapper.engine.timeline import Timeline
from mapper.errors import InfeasibleError, OptionsError

INF = math.inf


# -- checks shared by both entry points ----------------------------------------


def _index(x, n: int) -> int | None:
    """``x`` as an int in ``range(n)`` (NumPy integers welcome), else None."""
    try:
        i = operator.index(x)
    except TypeError:
        return None
    return i if 0 <= i < n else None


def _task_name(cost: CostTable, t: int) -> str:
    return cost.graph.tasks[t].name


def _dev_name(cost: CostTable, d: int) -> str:
    return cost.platform.devices[d].name


def _check_devices(cost: CostTable, given: Sequence[int]) -> tuple[int, ...]:
    n, nd = cost.n_tasks, cost.n_devices
    if len(given) != n:
        raise OptionsError(f"the assignment places {len(given)} tasks, the graph has {n}", obj=cost.graph.name)
    device = tuple(_index(d, nd) for d in given)
    for t, d in enumerate(device):
        if d is None:
            raise OptionsError(f"task {_task_name(cost, t)!r} is assigned to device {given[t]!r}, not one of "
                               f"0..{nd - 1}", obj=_task_name(cost, t))
        dev = cost.platform.devices[d]
        task = cost.graph.tasks[t]
        if not task.placement.permits(dev.name, dev.kind):
            raise InfeasibleError(f"task {task.name!r} may not run on {dev.name}: placement {task.placement}",
                                  obj=task.name)
        if not cost.time[t][d] < INF:
            why = cost.reason(t, d) or "its time there is infinite"
            raise InfeasibleError(f"task {task.name!r} cannot run on {dev.name}: {why}", obj=task.name)
    return cast(tuple[int, ...], device)  # every entry checked above


def checked_devices(cost: CostTable, given: Sequence[int]) -> tuple[int, ...]:
    """``given`` as a tuple, after checking each task may run on its device and each transfer has a route."""
    device = _check_devices(cost, given)
    _check_routes(cost, device)
    return device


def _check_routes(cost: CostTable, device: Sequence[int]) -> None:
    for e in cost.graph.edges:
        a, b = device[e.src], device[e.dst]
        if a != b and not (e.comm if e.comm is not None else cost.comm(e.index, a, b)) < INF:
            raise cost.route_error(e.index, a, b)


def _check_capacity(cost: CostTable, device: Sequence[int], options: ScheduleOptions) -> None:
    """Static memory and FPGA-area models (see the module docstring)."""
    nd = cost.n_devices
    if options.memory:
        used = [0.0] * nd
        for t, d in enumerate(device):
            used[d] += cost.footprint[t]
        for d in range(nd):
            if used[d] > cost.memory_capacity[d]:
                raise InfeasibleError(
                    f"the tasks placed on {_dev_name(cost, d)} need {used[d]:.6g} bytes of memory, "
                    f"it has {cost.memory_capacity[d]:.6g}", obj=_dev_name(cost, d))
    if options.area:
        used = [0.0] * nd
        for t, d in enumerate(device):
            used[d] += cost.area[t][d]
        for d in range(nd):
            if cost.platform.devices[d].kind == "fpga" and used[d] > cost.area_capacity[d]:
                raise InfeasibleError(
                    f"the tasks placed on {_dev_name(cost, d)} need {used[d]:.6g} area units, "
                    f"it has {cost.area_capacity[d]:.6g}", obj=_dev_name(cost, d))


def _check_order(cost: CostTable, device: Sequence[int], order: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    nd, n = cost.n_devices, cost.n_tasks
    if len(order) != nd:
        raise OptionsError(f"the order lists {len(order)} devices, the platform has {nd}", obj=cost.platform.name)
    seen = [False] * n
    out: list[tuple[int, ...]] = []
    for d, given in enumerate(order):
        seq = tuple(_index(t, n) for t in given)
        out.append(cast(tuple[int, ...], seq))  # every entry checked below
        for k, t in enumerate(seq):
            if t is None:
                raise OptionsError(f"the order of {_dev_name(cost, d)} names task {given[k]!r}, not one of "
                                   f"0..{n - 1}", obj=_dev_name(cost, d))
            if seen[t] or device[t] != d:
                what = "twice" if seen[t] else f"on {_dev_name(cost, d)} but it is assigned to " \
                                               f"{_dev_name(cost, device[t])}"
                raise OptionsError(f"the order lists task {_task_name(cost, t)!r} {what}", obj=_task_name(cost, t))
            seen[t] = True
    missing = [_task_name(cost, t) for t in range(n) if not seen[t]]
    if missing:
        raise OptionsError("the order leaves out tasks " + ", ".join(missing[:8]), obj=missing[0])
    return tuple(out)


# -- helpers for list schedulers -----------------------------------------------


def ready_time(cost: CostTable, t: int, d: int, device_of: Sequence[int], end: Sequence[float]) -> float:
    """Earliest start of task ``t`` on device ``d`` allowed by its (placed)
    predecessors: ``max(end(p) + comm(e, dev(p), d))``; ``inf`` if a needed
    route is missing."""
    r = 0.0
    g = cost.graph
    for e in g.preds[t]:
        p = g.edges[e].src
        r = max(r, end[p] + cost.comm(e, device_of[p], d))
    return r


def check_priority(cost: CostTable, priority: Sequence[int]) -> tuple[int, ...]:
    """``priority`` as a tuple, after checking it is a topological order."""
    g = cost.graph
    pos = [-1] * cost.n_tasks
    prio = tuple(_index(t, cost.n_tasks) for t in priority)
    for k, t in enumerate(prio):
        if t is None or pos[t] >= 0:
            raise OptionsError(f"the priority list has a bad or repeated entry {priority[k]!r}", obj=g.name)
        pos[t] = k
    if min(pos, default=0) < 0:
        raise OptionsError("the priority list leaves out tasks", obj=g.name)
    for e in g.edges:
        if pos[e.src] > pos[e.dst]:
            raise OptionsError(f"the priority list puts {_task_name(cost, e.dst)!r} before its predecessor "
                               f"{_task_name(cost, e.src)!r}", obj=_task_name(cost, e.dst))
    return cast(tuple[int, ...], prio)  # every entry checked above


def list_schedule(cost: CostTable, device_of: Sequence[int], priority: Sequence[int],
                  options: ScheduleOptions = ScheduleOptions()) -> Schedule:
    """Insertion-based list scheduling of a fixed assignment.

    Tasks are taken in ``priority`` (a topological order) and each goes into
    the earliest gap of its device (:class:`Timeline`). The resulting
    per-device order is then timed by :func:`build_schedule`, so the options
    apply exactly as there (with none on, the times are the insertion times).
    """
    device = _check_devices(cost, device_of)
    _check_routes(cost, device)
    prio = check_priority(cost, priority)
    line = Timeline(cost.n_devices)
    end = [0.0] * cost.n_tasks
    for t in prio:
        d = device[t]
        start, pos = line.slot(d, ready_time(cost, t, d, device, end), cost.time[t][d])
        end[t] = start + cost.time[t][d]
        line.place(d, pos, t, start, end[t])
    return build_schedule(cost, Assignment(device, line.order()), options)


# -- the order-driven timing (event simulation) ----------------------------------


def _streams_on(cost: CostTable, d: int) -> bool:
    dev = cost.platform.devices[d]
    return dev.kind == "fpga" and bool(dev.streaming)


def stream_link(cost: CostTable, u: int, v: int) -> bool:
    """Whether ``v`` may follow ``u`` in a streamed chain: both streamable,
    ``v`` the only successor of ``u`` and ``u`` the only predecessor of ``v``."""
    g = cost.graph
    return (g.tasks[u].streamable > 0 and g.tasks[v].streamable > 0
            and set(g.succ_tasks(u)) == {v} and set(g.pred_tasks(v)) == {u})


def _units(cost: CostTable, order: tuple[tuple[int, ...], ...], streaming: bool) -> list[list[tuple[int, ...]]]:
    """Per device, its order cut into units: single tasks and streamed chains."""
    units: list[list[tuple[int, ...]]] = []
    for d, seq in enumerate(order):
        cut: list[tuple[int, ...]] = []
        run: list[int] = []
        chains = streaming and _streams_on(cost, d)
        for t in seq:
            if run and chains and stream_link(cost, run[-1], t):
                run.append(t)
                continue
            if run:
                cut.append(tuple(run))
            run = [t]
        if run:
            cut.append(tuple(run))
        units.append(cut)
    return units


def hop_durations(cost: CostTable, e: int, a: int, b: int, contention: bool) -> list[tuple[int, float]]:
    """``(link, seconds)`` per hop of edge ``e``'s transfer; link -1 never waits."""
    comm = cost.comm(e, a, b)
    links = cost.routes[a][b] if contention else ()
    if not links:
        return [(-1, comm)]
    nbytes = cost.graph.edges[e].bytes
    w = []
    for li in links:
        link = cost.platform.links[li]
        if link.shared_memory:
            w.append(link.sync_us * 1e-6)
            continue
        w.append(link.latency_us * 1e-6 + (nbytes / (link.bandwidth_gbs * 1e9) if link.bandwidth_gbs > 0 else 0.0))
    total = sum(w)
    if total > 0:
        return [(li, comm * wi / total) for li, wi in zip(links, w)]
    return [(li, comm / len(links)) for li in links]


_UNIT_DONE, _TASK_END, _HOP_END, _HOP_READY = 0, 1, 2, 3


def build_schedule(cost: CostTable, assignment: Assignment, options: ScheduleOptions = ScheduleOptions()) -> Schedule:
    """Time ``assignment`` under the delay model and ``options``.

    With ``assignment.order`` each device runs its tasks in that order, each
    as early as allowed; without it, :func:`list_schedule` in topological
    order. Raises :class:`InfeasibleError` for a task on a device where it
    cannot run, a transfer without route, or a capacity overflow, and
    :class:`OptionsError` for an order that is malformed or contradicts
    precedence (names the tasks).
    """
    device = checked_devices(cost, assignment.device)
    _check_capacity(cost, device, options)
    if assignment.order is None:
        return list_schedule(cost, device, cost.graph.topo_order, options)
    order = _check_order(cost, device, assignment.order)
    return _simulate(cost, device, order, options)


def delegated_runs(cost: CostTable, order: Sequence[Sequence[int]],
                   devices: Sequence[int] | None = None) -> list[tuple[int, tuple[int, ...]]]:
    """``(device, tasks)`` of each delegated subgraph: the runs of the module docstring on
    ``devices`` (default: those with ``invoke_us > 0``), by device, then in execution order."""
    g = cost.graph
    wanted = set(devices) if devices is not None else {
        d for d, dev in enumerate(cost.platform.devices) if dev.invoke_us > 0}
    if not wanted:
        return []
    where = [-1] * cost.n_tasks
    part = weak_components(cost.n_tasks, [(e.src, e.dst) for e in g.edges])
    for d, seq in enumerate(order):
        for t in seq:
            where[t] = d
    out: list[tuple[int, tuple[int, ...]]] = []
    for d, seq in enumerate(order):
        if d not in wanted:
            continue
        # latest[x]: the latest run of ``d`` that ``x`` depends on (itself included), -1 for none; a
        # task's ancestors on ``d`` precede it in ``seq``, so each value is final when first asked for
        latest: dict[int, int] = {}
        run: list[int] = []
        for t in seq:
            if run and (part[t] != part[run[0]]
                        or any(where[p] != d and _latest_run(g, latest, p) == len(out) for p in g.pred_tasks(t))):
                out.append((d, tuple(run)))
                run = []
            run.append(t)
            latest[t] = len(out)
        if run:
            out.append((d, tuple(run)))
    return out


def _latest_run(g: TaskGraph, latest: dict[int, int], x: int) -> int:
    """``latest[x]`` of :func:`delegated_runs`, computed (and kept) for ``x`` and its ancestors."""
    stack = [x]
    while stack:
        y = stack[-1]
        todo = [p for p in g.pred_tasks(y) if p not in latest]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        latest[y] = max((latest[p] for p in g.pred_tasks(y)), default=-1)
    return latest[x]


def invocations(cost: CostTable, order: Sequence[Sequence[int]]) -> list[float]:
    """Seconds each task pays for starting a delegated subgraph (the module docstring), 0 for the others."""
    extra = [0.0] * cost.n_tasks
    for d, run in delegated_runs(cost, order):
        extra[run[0]] = cost.platform.devices[d].invoke_us * 1e-6
    return extra


def _plain_times(cost: CostTable, device: tuple[int, ...], order: tuple[tuple[int, ...], ...],
                 extra: list[float]) -> tuple[list[float], list[float], list[float]] | None:
    """The event simulation's times when no link is shared and no chain streams, in one pass
    over the tasks in a topological order of the edges and the devices' orders (each task
    starts at the latest of its device's previous end and its inputs' arrivals, as there;
    ``max`` is exact, so the times are the same floats): starts, ends and arrivals (by edge, -1:
    none), for :func:`assembled`. None on a deadlock (the event simulation names the tasks)."""
    g = cost.graph
    n = cost.n_tasks
    time, edges, succs, comm = cost.time, g.edges, g.succs, cost.comm
    waiting = [len(p) for p in g.preds]
    after = [-1] * n
    for seq in order:
        for a, b in zip(seq, seq[1:]):
            after[a] = b
            waiting[b] += 1
    ready = [0.0] * n
    start = [0.0] * n
    end = [0.0] * n
    arrival = [-1.0] * len(edges)  # by edge: when its data reaches another device (-1: it stays)
    todo = [seq[0] for seq in order if seq and not waiting[seq[0]]]
    done = 0
    while todo:
        t = todo.pop()
        done += 1
        d = device[t]
        s = start[t] = ready[t]
        f = end[t] = s + (time[t][d] + extra[t])
        for e in succs[t]:
            edge = edges[e]
            v = edge.dst
            at = f
            if device[v] != d:
                c = edge.comm  # an explicit time wins, as in cost.comm
                at = arrival[e] = f + (c if c is not None else comm(e, d, device[v]))
            if at > ready[v]:
                ready[v] = at
            waiting[v] -= 1
            if not waiting[v]:
                todo.append(v)
        v = after[t]
        if v >= 0:
            if f > ready[v]:
                ready[v] = f
            waiting[v] -= 1
            if not waiting[v]:
                todo.append(v)
    if done < n:
        return None
    return start, end, arrival


def assembled(cost: CostTable, options: ScheduleOptions, device: tuple[int, ...], order: tuple[tuple[int, ...], ...],
               start: list[float], end: list[float], arrival: list[float]) -> Schedule:
    """The schedule of these times (checked by the caller): a transfer for each edge with an ``arrival``
    (-1: none)."""
    edges = cost.graph.edges
    slots = tuple(map(TaskSlot, range(cost.n_tasks), device, start, end))
    links = [[tuple(r) for r in row] for row in cost.routes]  # one tuple per device pair
    moved = [e for e, at in enumerate(arrival) if at >= 0.0]
    src = [edges[e].src for e in moved]
    src_dev = [device[p] for p in src]
    dst_dev = [device[edges[e].dst] for e in moved]
    transfers = tuple(map(Transfer, moved, src_dev, dst_dev, [end[p] for p in src], [arrival[e] for e in moved],
                          [links[x][y] for x, y in zip(src_dev, dst_dev)]))
    return Schedule(cost, options, slots, transfers, max(end, default=0.0), order, ())


def _one_pass(cost: CostTable, device: tuple[int, ...], order: tuple[tuple[int, ...], ...],
              options: ScheduleOptions) -> tuple[tuple[list[float], list[float], list[float]] | None, list[float],
                                                 list[list[tuple[int, ...]]]]:
    """:func:`_plain_times` where it applies (no link contention, no chain streams; else None),
    with the invocation overheads and the run units the event simulation takes otherwise."""
    extra = invocations(cost, order)
    units = _units(cost, order, options.streaming)
    times = None
    if not options.contention and all(len(u) == 1 for us in units for u in us):
        times = _plain_times(cost, device, order, extra)
    return times, extra, units


def timing(cost: CostTable, assignment: Assignment,
           options: ScheduleOptions = ScheduleOptions()) -> tuple[float, Callable[[], Schedule]]:
    """:func:`build_schedule`'s makespan and a maker of the schedule itself. When the times take the
    one pass (:func:`_plain_times`), the slots and transfers are made only if the maker is called:
    a mapper comparing candidates by makespan builds only the one it keeps. Raises as
    :func:`build_schedule` does."""
    if assignment.order is not None:
        device = checked_devices(cost, assignment.device)
        _check_capacity(cost, device, options)
        order = _check_order(cost, device, assignment.order)
        times = _one_pass(cost, device, order, options)[0]
        if times is not None:
            start, end, arrival = times
            return max(end, default=0.0), lambda: assembled(cost, options, device, order, start, end, arrival)
    schedule = build_schedule(cost, assignment, options)
    return schedule.makespan, lambda: schedule


def _simulate(cost: CostTable, device: tuple[int, ...], order: tuple[tuple[int, ...], ...],
              options: ScheduleOptions) -> Schedule:
    g = cost.graph
    n, nd = cost.n_tasks, cost.n_devices
    times, extra, units = _one_pass(cost, device, order, options)
    if times is not None:
        return assembled(cost, options, device, order, *times)
    pending = [len(g.preds[t]) for t in range(n)]
    ready = [0.0] * n
    start: list[float] = [0.0] * n
    end: list[float] = [0.0] * n
    started = [False] * n
    head = [0] * nd
    free = [0.0] * nd
    busy = [False] * nd
    link_free: dict[int, float] = {}
    hops: dict[int, list[tuple[int, float]]] = {}
    hop_times: dict[int, list[tuple[int, float, float]]] = {}
    arrival: dict[int, float] = {}
    heap: list[tuple[float, int, int, int]] = []

    def try_start(d: int) -> None:
        if busy[d] or head[d] >= len(units[d]):
            return
        unit = units[d][head[d]]
        if pending[unit[0]]:
            return
        s = max(free[d], ready[unit[0]])
        offsets: tuple[tuple[float, float], ...]
        if len(unit) == 1:
            offsets = ((0.0, cost.time[unit[0]][d] + extra[unit[0]]),)
        else:
            chunks = min(g.tasks[t].streamable for t in unit)
            launch = cost.platform.devices[d].launch_us * 1e-6
            offsets = tuple(stream_chain_times([cost.time[t][d] for t in unit], chunks, [launch] * len(unit)))
        for t, (a, b) in zip(unit, offsets):
            start[t], end[t], started[t] = s + a, s + b, True
            heapq.heappush(heap, (end[t], _TASK_END, t, 0))
        busy[d] = True
        head[d] += 1
        heapq.heappush(heap, (max(end[t] for t in unit), _UNIT_DONE, d, 0))

    def arrive(e: int, at: float) -> None:
        v = g.edges[e].dst
        pending[v] -= 1
        ready[v] = max(ready[v], at)
        if pending[v] == 0 and not started[v]:
            try_start(device[v])

    for d in range(nd):
        try_start(d)
    while heap:
        now, kind, a, b = heapq.heappop(heap)
        if kind == _UNIT_DONE:
            busy[a], free[a] = False, now
            try_start(a)
        elif kind == _TASK_END:
            for e in g.succs[a]:
                v = g.edges[e].dst
                if device[v] == device[a]:
                    arrive(e, now)
                else:
                    hops[e] = hop_durations(cost, e, device[a], device[v], options.contention)
                    hop_times[e] = []
                    heapq.heappush(heap, (now, _HOP_READY, e, 0))
        elif kind == _HOP_READY:
            link, dur = hops[a][b]
            held = cost.platform.resources(link) if link >= 0 else ()
            s = max([now, *(link_free.get(r, now) for r in held)])
            for r in held:
                link_free[r] = s + dur
            hop_times[a].append((link, s, s + dur))
            heapq.heappush(heap, (s + dur, _HOP_END, a, b))
        else:  # _HOP_END
            if b + 1 < len(hops[a]):
                heapq.heappush(heap, (now, _HOP_READY, a, b + 1))
            else:
                arrival[a] = now
                arrive(a, now)

    if not all(started):
        stuck: list[tuple[int, str]] = []
        for d in range(nd):
            if head[d] < len(units[d]):
                t = units[d][head[d]][0]
                waits = [_task_name(cost, p) for p in g.pred_tasks(t) if not started[p]]
                stuck.append((t, f"{_task_name(cost, t)} on {_dev_name(cost, d)} waits for {', '.join(waits)}"))
        raise OptionsError("the per-device order contradicts precedence (deadlock): "
                           + "; ".join(text for _, text in stuck), obj=_task_name(cost, stuck[0][0]))

    slots = tuple(TaskSlot(t, device[t], start[t], end[t]) for t in range(n))
    transfers = []
    for e in sorted(arrival):
        edge = g.edges[e]
        a, b = device[edge.src], device[edge.dst]
        hop = tuple(hop_times[e]) if options.contention and cost.routes[a][b] else ()
        transfers.append(Transfer(e, a, b, end[edge.src], arrival[e], tuple(cost.routes[a][b]), hop))
    streamed = tuple(sorted((u for us in units for u in us if len(u) > 1), key=lambda u: u[0]))
    return Schedule(cost, options, slots, tuple(transfers), max(end, default=0.0), order, streamed)
