"""Delegation to an NPU or a DLA (``--delegate greedy|mapped``, docs/platforms.md, Delegation).

``greedy`` does what the runtimes do by default: every task the accelerator
supports (its ``supports`` list, its ``dtypes``) runs there, the rest on the
fallback device: ONNX Runtime's CPU execution provider behind the QNN
execution provider, the GPU behind TensorRT's DLA (``allowGPUFallback``),
Band's ``fallback_per_device`` (Jeong et al., "Band: Coordinated Multi-DNN
Inference on Heterogeneous Mobile Processors", MobiSys 2022). One
accelerator takes every partition, as a runtime session binds one EP or one
DLA core. The tasks run in the order ONNX Runtime's partitioner visits the
nodes (:func:`partition_order`), so the accelerator's runs are its
partitions.

``mapped`` lets the mapper choose with the same costs: from the best of the
greedy placement, HEFT's and each processor alone, a first-improvement local search moves whole
delegated subgraphs and single tasks between devices while the schedule,
timed by :func:`mapper.engine.schedule.build_schedule` with its invocation
and hand-over costs, improves. Without deadlines, better is a shorter
makespan. With deadlines (several models of a workload, each model's last
tasks due at its ``slo_ms``), better is first fewer late tasks, the number of
SLOs missed (Band's objective, Jeong et al. 2022: the most SLOs met across the
models, not each model alone; the count of tardy jobs of Moore, "An n job,
one machine sequencing algorithm for minimizing the number of tardy jobs",
Management Science 1968), then less total lateness, then the makespan.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

from mapper.core.graph import weak_components
from mapper.costing.cost import CostTable
from mapper.engine.schedule import Assignment, Schedule, build_schedule, delegated_runs, list_schedule
from mapper.errors import InfeasibleError, OptionsError
from mapper.mapping.base import MapOptions, Mapper, MapResult
from mapper.mapping.placer import heuristic_result
from mapper.mapping.ranks import mean_comm, mean_times, priority_order, upward_rank
from mapper.platform.devices import ACCELERATOR_KINDS

#: The most schedules the local search of ``mapped`` times, and the most task placements all of
#: them together may hold: a budget in work, not in seconds, so that the result depends on the
#: input alone (the same schedule on any machine).
MAX_EVALUATIONS = 4000
MAX_PLACEMENTS = 2_000_000


def accelerators(cost: CostTable) -> tuple[int, ...]:
    """Devices a runtime delegates to (kind ``npu`` or ``dla``)."""
    return tuple(d.index for d in cost.platform.devices if d.kind in ACCELERATOR_KINDS)


def fallback_device(cost: CostTable, accel: int) -> int:
    """Where a runtime runs what ``accel`` cannot: a DLA's GPU, else the host CPU, else the fastest CPU."""
    devices = cost.platform.devices
    if devices[accel].kind == "dla":
        gpu = next((d.index for d in devices if d.kind == "gpu"), None)
        if gpu is not None:
            return gpu
    host = cost.platform.host
    if host is not None and devices[cost.platform.device_index(host)].kind == "cpu":
        return cost.platform.device_index(host)
    cpus = [d for d in devices if d.kind == "cpu"]
    if not cpus:
        raise OptionsError(f"platform {cost.platform.name} has no CPU to fall back to", obj="--delegate")
    return max(cpus, key=lambda d: (d.peak("f32") or 0.0, -d.index)).index


def _priority(cost: CostTable) -> tuple[int, ...]:
    return priority_order(cost, upward_rank(cost, mean_times(cost), mean_comm(cost, False)))


def timed(cost: CostTable, device: Sequence[int], options: MapOptions, prio: Sequence[int]) -> Schedule:
    """``device`` list-scheduled in ``prio`` order, then timed with the delegation costs."""
    order = list_schedule(cost, device, prio, options.schedule).order
    return build_schedule(cost, Assignment(tuple(device), order), options.schedule)


def greedy_devices(cost: CostTable) -> tuple[int, ...]:
    """Each task on the first accelerator when it runs there, else on the fallback device
    (else on the first device that runs it)."""
    accel = accelerators(cost)
    if not accel:
        raise OptionsError(f"platform {cost.platform.name} has no npu or dla device to delegate to",
                           obj="--delegate")
    a, back = accel[0], fallback_device(cost, accel[0])
    out = []
    for t in range(cost.n_tasks):
        feasible = cost.feasible_devices(t)
        if not feasible:
            cost.require_feasible()
        out.append(a if a in feasible else back if back in feasible else feasible[0])
    return tuple(out)


def partition_order(cost: CostTable, device: Sequence[int], accel: int) -> tuple[int, ...]:
    """The order ONNX Runtime's partitioner visits the tasks when ``accel`` takes those ``device``
    puts there (CreateSupportedPartitionNodeGroups, onnxruntime/core/providers/partitioning_utils.cc,
    which GetCapability of the QNN EP calls): Kahn's algorithm in waves from the roots in
    topological order, first in first out; a wave takes every task that becomes ready except the
    fallback tasks that read the current group's outputs (its border), which wait for the next
    wave. A topological order in which each wave's accelerator tasks are one partition; the
    weakly connected parts of the graph (several models: one session each) one after another."""
    g = cost.graph
    indeg = [len(p) for p in g.preds]
    ready = deque(t for t in g.topo_order if indeg[t] == 0)
    later: deque[int] = deque()
    border: set[int] = set()
    order: list[int] = []
    while ready or later:
        if not ready:  # the wave is over: the group closes, the border's tasks start the next one
            border.clear()
            ready, later = later, ready
            continue
        t = ready.popleft()
        on = device[t] == accel
        if not on and t in border:
            later.append(t)
            continue
        border.discard(t)
        order.append(t)
        for e in g.succs[t]:
            s = g.edges[e].dst
            if on:
                border.add(s)
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    part = weak_components(cost.n_tasks, [(e.src, e.dst) for e in g.edges])
    return tuple(sorted(order, key=lambda t: part[t]))  # stable: each part keeps its waves


def greedy_schedule(cost: CostTable, options: MapOptions) -> tuple[Schedule, tuple[int, ...]]:
    """The greedy placement run in :func:`partition_order` on every device, and that order."""
    device = greedy_devices(cost)
    order = partition_order(cost, device, accelerators(cost)[0])
    per = tuple(tuple(t for t in order if device[t] == d) for d in range(cost.n_devices))
    return build_schedule(cost, Assignment(device, per), options.schedule), order


class DelegateGreedyMapper(Mapper):
    """What the runtimes do by default (the module docstring)."""

    name = "delegate-greedy"
    summary = "the runtimes' default delegation: every supported task on the NPU/DLA, the rest on the fallback"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        started = time.perf_counter()
        schedule, _ = greedy_schedule(cost, options)
        return heuristic_result(self.name, schedule, options, started, (summary(schedule),))


class DelegateMappedMapper(Mapper):
    """Delegation chosen by local search on the delegation costs (the module docstring)."""

    name = "delegate-mapped"
    summary = "delegation by local search over subgraph and task moves, with invocation and hand-over costs"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        started = time.perf_counter()
        from mapper.mapping.heft import HeftMapper

        ranked = _priority(cost)
        greedy = greedy_devices(cost)
        # (schedule, the task order its moves are timed in): the greedy placement in the model's order,
        # by upward rank and by earliest due date, and HEFT's
        starts = [(timed(cost, greedy, options, order), order)
                  for order in dict.fromkeys((tuple(cost.graph.topo_order), ranked, due_order(cost)))]
        starts.append(greedy_schedule(cost, options))  # what greedy itself gives
        starts.append((HeftMapper().map(cost, options).schedule, ranked))
        topo = tuple(cost.graph.topo_order)
        for d in range(cost.n_devices):  # and each processor alone: mapped is never worse than the best one
            if all(d in cost.feasible_devices(t) for t in topo):
                try:
                    starts.append((timed(cost, [d] * cost.n_tasks, options, topo), topo))
                except InfeasibleError:  # a capacity the whole model breaks there
                    pass
        best, prio = min(starts, key=lambda sp: quality(sp[0]))
        device = list(best.device_of)
        count = 0
        budget = max(1, min(MAX_EVALUATIONS, MAX_PLACEMENTS // max(cost.n_tasks, 1)))
        improved = True
        while improved and count < budget and not options.should_stop():
            improved = False
            for group, target in _moves(cost, best):
                trial = list(device)
                for t in group:
                    trial[t] = target
                try:
                    s = timed(cost, trial, options, prio)
                except InfeasibleError:  # a capacity or route the move breaks
                    continue
                count += 1
                if better(s, best):
                    best, device, improved = s, trial, True
                    break
                if count >= budget:
                    break
        notes = (summary(best),
                 f"delegation: local search from the best of greedy (four task orders), HEFT and each "
                 f"processor alone, "
                 f"{count} schedules timed")
        return heuristic_result(self.name, best, options, started, notes)


def due_order(cost: CostTable) -> tuple[int, ...]:
    """Earliest due date first (Jackson's rule; EDF): a task is due at the earliest deadline among
    itself and the tasks after it (none: last), ties in index order; a topological order."""
    g = cost.graph
    due = [float("inf")] * cost.n_tasks
    for t in reversed(g.topo_order):
        own = g.tasks[t].deadline
        due[t] = min([own if own is not None else float("inf")] + [due[g.edges[e].dst] for e in g.succs[t]])
    return priority_order(cost, [-d if d != float("inf") else -1e300 for d in due])


def quality(schedule: Schedule) -> tuple[int, float, float]:
    """What ``mapped`` minimises, in order: late tasks, their total lateness, the makespan
    (the module docstring); the first two are 0 without deadlines."""
    tol = 1e-12 * max(schedule.makespan, 1e-30)
    late = [schedule.slots[t.index].end - t.deadline for t in schedule.cost.graph.tasks
            if t.deadline is not None and schedule.slots[t.index].end - t.deadline > tol]
    return len(late), sum(late), schedule.makespan


def better(a: Schedule, b: Schedule) -> bool:
    """``a`` better than ``b`` by :func:`quality` (a lateness or makespan gain past rounding)."""
    qa, qb = quality(a), quality(b)
    if qa[0] != qb[0]:
        return qa[0] < qb[0]
    if qa[1] < qb[1] * (1 - 1e-9) - 1e-15:
        return True
    if qa[1] > qb[1] * (1 + 1e-9) + 1e-15:
        return False
    return qa[2] < qb[2] * (1 - 1e-9)


def summary(schedule: Schedule) -> str:
    """One note: the delegated subgraphs per accelerator and the tasks none of them can run."""
    cost = schedule.cost
    accel = accelerators(cost)
    runs = delegated_runs(cost, schedule.order, accel)
    per = ", ".join(f"{sum(1 for d, _ in runs if d == a)} on {cost.platform.devices[a].name}" for a in accel)
    refused = sum(1 for t in range(cost.n_tasks) if any(cost.time[t][a] == float("inf") for a in accel))
    return f"delegation: subgraphs {per}; {refused} tasks an accelerator cannot run (JSON delegation.fallbacks)"


def _moves(cost: CostTable, schedule: Schedule) -> list[tuple[tuple[int, ...], int]]:
    """Whole delegated subgraphs to every other device that runs them all, then single tasks."""
    device = schedule.device_of
    moves: list[tuple[tuple[int, ...], int]] = []
    for d, run in delegated_runs(cost, schedule.order, accelerators(cost)):
        for target in range(cost.n_devices):
            if target != d and all(target in cost.feasible_devices(t) for t in run):
                moves.append((run, target))
    for t in cost.graph.topo_order:
        moves.extend(((t,), target) for target in cost.feasible_devices(t) if target != device[t])
    return moves
