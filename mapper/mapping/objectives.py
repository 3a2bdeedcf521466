"""Objective values of a schedule: makespan, energy, throughput.

Definitions (the MILP encodes the same ones):

``makespan``
    ``schedule.makespan``, the latest task end (seconds).
``energy``
    Active energy only: ``sum_t cost.energy[t][dev(t)]`` (joules). Idle
    power and transfer energy are not counted.
``throughput``
    Reported and minimised as the *period* of pipelined execution of
    successive graph instances: the largest per-device load of one
    instance, ``period = max_d load(d)``. Throughput is ``1 / period``
    instances per second; ``objective_value`` returns the period (seconds,
    lower is better). Times are ``cost.time`` (no streaming overlap). The
    platform's ``throughput_model`` says how a device's load is counted:

    ``device-load`` (the default), after Wilhelm et al. (arXiv:2208.06321)::

        load(d) = sum_{t : dev(t) = d} time[t][d]
                  + sum_{e = u -> v : dev(v) = d != dev(u)} comm(e, dev(u), d)

    each device computes its tasks and receives its cross-device inputs one
    after the other.

    ``max-load``, after Tarnawski, Phanishayee, Devanur, Mahajan and
    Nagarajan, "Efficient Algorithms for Device Placement of DNN Graph
    Operators", NeurIPS 2020 (Section 4)::

        load(d) = sum_{t : dev(t) = d} time[t][d]
                  + sum_{u : dev(u) = d, some consumer off d} out(u)
                  + sum_{u : dev(u) != d, some consumer on d} in(u, d)

    an accelerator sends each output once, however many devices read it,
    and receives it once, however many of its tasks read it, and does not
    overlap transfers with compute; ``out(u)`` is the slowest of ``u``'s
    crossing edges, ``in(u, d)`` the slowest of those into ``d`` (with one
    transfer time per output, as in the paper, both are that time). A CPU
    device pays its compute only. Colocation classes and the memory
    knapsack of that model are constraints of every mapping
    (``colocate``, ``--memory``).

    ``1f1b``: a training step pipelined over the devices in ``M`` micro-batches
    (the platform's ``micro_batches``) with the one-forward-one-backward
    schedule of PipeDream-Flush and DAPPLE (Narayanan et al., SC'21, 2.2; Fan
    et al., PPoPP'21). The graph is the step of one micro-batch; each device
    is a stage whose time per micro-batch is its ``device-load`` load, and an
    iteration takes its fill and drain plus ``M - 1`` periods of the slowest
    stage::

        iteration = sum_d load(d) + (M - 1) max_d load(d),   period = iteration / M

    so more stages balance the load but lengthen the bubble. The stage at
    pipeline position ``k`` of ``S`` (devices ordered by their first forward
    task) keeps the activations of ``min(M, S - k)`` micro-batches
    (:func:`pipeline_stash`, in the notes).
``deadline``
    Feasibility first, then the least maximum lateness: the value is the
    largest tardiness ``max(0, max_t (end_t - deadline_t))`` over the tasks
    with a deadline (a graph's deadline is each sink's), so 0 means every
    deadline is met (Lawler's ``Lmax`` criterion, clipped at 0; Lawler,
    "Optimal sequencing of a single machine subject to precedence
    constraints", Management Science 19(5), 1973). Per-task lateness
    ``end_t - deadline_t`` (negative: slack) is in the report.
"""

from __future__ import annotations

from collections.abc import Sequence

from mapper.core.units import fmt_bytes, fmt_time
from mapper.costing.cost import CostTable
from mapper.engine.schedule import Schedule
from mapper.errors import OptionsError
from mapper.mapping.pipeline import pipelined

OBJECTIVE_NAMES = ("makespan", "energy", "throughput", "deadline")


def lateness(schedule: Schedule) -> tuple[tuple[int, float], ...]:
    """``(task, end - deadline)`` for every task with a deadline, in task order."""
    tasks = schedule.cost.graph.tasks
    end = {s.task: s.end for s in schedule.slots}
    return tuple((t.index, end[t.index] - t.deadline) for t in tasks if t.deadline is not None)


def tardiness(schedule: Schedule) -> float:
    """The deadline objective: the largest lateness, 0 when every deadline is met."""
    return max((late for _, late in lateness(schedule)), default=0.0) if has_deadlines(schedule.cost) else 0.0


def has_deadlines(cost: CostTable) -> bool:
    return any(t.deadline is not None for t in cost.graph.tasks)


def energy(schedule: Schedule) -> float:
    """Active energy in joules (see the module docstring)."""
    cost = schedule.cost
    return float(sum(cost.energy[s.task][s.device] for s in schedule.slots))


def device_loads(schedule: Schedule) -> tuple[float, ...]:
    """Per device: its load under the platform's throughput model (module docstring)."""
    return loads(schedule.cost, schedule.device_of)


def loads(cost: CostTable, device: Sequence[int]) -> tuple[float, ...]:
    """Per device: its load when task ``t`` runs on ``device[t]``, under
    ``cost.platform.throughput_model`` (module docstring)."""
    load = [0.0] * cost.n_devices
    for t, d in enumerate(device):
        load[d] += cost.time[t][d]
    if cost.platform.throughput_model == "max-load":
        return _max_load(cost, device, load)
    for e in cost.graph.edges:
        a, b = device[e.src], device[e.dst]
        if a != b:
            load[b] += cost.comm(e.index, a, b)
    return tuple(load)


def _max_load(cost: CostTable, device: Sequence[int], load: list[float]) -> tuple[float, ...]:
    """Tarnawski et al.'s loads: each output sent once, received once per device."""
    g = cost.graph
    pays = [cost.platform.devices[d].kind != "cpu" for d in range(cost.n_devices)]
    for u in range(cost.n_tasks):
        a = device[u]
        out = 0.0
        into: dict[int, float] = {}
        for ei in g.succs[u]:
            b = device[g.edges[ei].dst]
            if b != a:
                c = cost.comm(ei, a, b)
                out = max(out, c)
                into[b] = max(into.get(b, 0.0), c)
        if into and pays[a]:
            load[a] += out
        for b, c in into.items():
            if pays[b]:
                load[b] += c
    return tuple(load)


def period(schedule: Schedule) -> float:
    """The pipelined period in seconds (module docstring)."""
    return period_of(schedule.cost, device_loads(schedule))


def period_of(cost: CostTable, load: Sequence[float]) -> float:
    """The period of per-device loads under the platform's throughput model."""
    if cost.platform.throughput_model == "1f1b":
        m = cost.platform.micro_batches
        return pipelined(sum(load), max(load, default=0.0), m) / m
    return max(load, default=0.0)


def pipeline_notes(schedule: Schedule, objective: str) -> tuple[str, ...]:
    """Under ``1f1b`` with the throughput objective: the stages, the bubble and
    each stage's stashed activations, for a result's notes; () otherwise."""
    cost = schedule.cost
    if objective != "throughput" or cost.platform.throughput_model != "1f1b":
        return ()
    load = device_loads(schedule)
    m = cost.platform.micro_batches
    stash = pipeline_stash(schedule)
    iteration = pipelined(sum(load), max(load, default=0.0), m)
    names = cost.platform.devices
    stages = ", ".join(f"{names[d].name} ({k} in flight, {fmt_bytes(b)} stashed)" for d, k, b in stash)
    bubble = 1 - m * max(load, default=0.0) / iteration if iteration > 0 else 0.0
    return (f"1F1B pipeline of {len(stash)} stages, {m} micro-batches: iteration {fmt_time(iteration)}, "
            f"bubble {bubble:.1%}; stages {stages}",)


def pipeline_stash(schedule: Schedule) -> tuple[tuple[int, int, float], ...]:
    """Under ``1f1b``: ``(device, micro-batches in flight, stashed bytes)`` per used
    device in pipeline order: a stage at position ``k`` of ``S`` keeps
    ``min(M, S - k)`` micro-batches' activations (outputs of its forward tasks
    that a backward task reads)."""
    cost = schedule.cost
    g = cost.graph
    dev = schedule.device_of
    first: dict[int, int] = {}
    for pos, t in enumerate(g.topo_order):
        if not g.tasks[t].backward:
            first.setdefault(dev[t], pos)
    stages = sorted(first, key=lambda d: first[d])
    stash = {d: 0.0 for d in stages}
    for t in range(cost.n_tasks):
        task = g.tasks[t]
        if not task.backward and any(g.tasks[v].backward for v in g.succ_tasks(t)):
            stash[dev[t]] = stash.get(dev[t], 0.0) + (task.output.nbytes if task.output is not None
                                                      else task.bytes_written)
    m, s = cost.platform.micro_batches, len(stages)
    return tuple((d, min(m, s - k), min(m, s - k) * stash[d]) for k, d in enumerate(stages))


def objective_value(schedule: Schedule, objective: str) -> float:
    """The value of ``objective`` (one of :data:`OBJECTIVE_NAMES`) for ``schedule``."""
    if objective == "makespan":
        return float(schedule.makespan)
    if objective == "energy":
        return energy(schedule)
    if objective == "throughput":
        return period(schedule)
    if objective == "deadline":
        return max(0.0, tardiness(schedule))
    raise OptionsError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVE_NAMES)}",
                       obj="--objective")
