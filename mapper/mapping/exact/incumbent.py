"""Incumbents for the exact engine: the best heuristic schedule to start
from, re-timing of a device assignment and order, and the serial bound that
caps the model's big-M when no heuristic succeeds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mapper.core.units import fmt_time
from mapper.costing.cost import INF, CostTable
from mapper.engine.schedule import Assignment, Schedule, ScheduleOptions, build_schedule
from mapper.engine.validate import validate
from mapper.errors import MapperError
from mapper.mapping.base import MapOptions, Mapper
from mapper.mapping.cpop import CpopMapper
from mapper.mapping.exact.subproblem import REL_TOL
from mapper.mapping.greedy import GreedyMapper
from mapper.mapping.heft import HeftMapper, HeftSameDeviceMapper
from mapper.mapping.objectives import objective_value
from mapper.mapping.orders import allowed_devices, order_from_starts
from mapper.mapping.peft import PeftMapper
from mapper.mapping.single import SingleDeviceMapper

#: Heuristics whose best result seeds the exact engine, in tie-break order.
HEURISTICS: tuple[type[Mapper], ...] = (HeftMapper, HeftSameDeviceMapper, CpopMapper, PeftMapper, GreedyMapper,
                                        SingleDeviceMapper)
#: ... on a graph whose every task has one feasible device (a split plan pins each piece): the
#: heuristics then differ only in the priority order of their list schedules, which the search
#: after them (LNS windows, or the exact models) chooses anyway; HEFT's upward rank starts it.
PINNED_HEURISTICS: tuple[type[Mapper], ...] = (HeftMapper,)


def pinned(cost: CostTable) -> bool:
    """Every task has exactly one device it can run on: only the order is left to choose."""
    return all(len(cost.feasible_devices(t)) == 1 for t in range(cost.n_tasks))


@dataclass(frozen=True, slots=True)
class Incumbent:
    """The best schedule so far: where it came from, the schedule and its objective value."""

    name: str
    schedule: Schedule
    value: float


def value_of(schedule: Schedule, objective: str) -> float:
    return float(objective_value(schedule, objective))


def best_heuristic(cost: CostTable, options: MapOptions,
                   enough: float | None = None) -> tuple[Incumbent | None, tuple[str, ...]]:
    """Run every heuristic of :data:`HEURISTICS` (:data:`PINNED_HEURISTICS` on a :func:`pinned`
    graph); the best feasible result
    (ties by list order) and notes on those that failed. Schedules are
    validated best first, until one passes. With ``enough``, the run stops at
    the first heuristic whose validated value is at most ``enough`` (no later
    one could be kept for more than it: the caller's lower bound times its
    least gain); earlier ones all valued more, so it is the best so far."""
    notes: list[str] = []
    bound = options.makespan_bound if options.objective != "makespan" else None
    found: list[Incumbent] = []
    for cls in PINNED_HEURISTICS if pinned(cost) else HEURISTICS:
        name = cls.name
        try:
            res = cls().map(cost, options)
        except MapperError as err:
            notes.append(f"{name}: {err.message.split(' (')[0]}")
            continue
        sched = res.schedule
        if bound is not None and sched.makespan > bound * (1 + REL_TOL):
            notes.append(f"{name}: makespan {fmt_time(sched.makespan)} exceeds the bound {fmt_time(bound)}")
            continue
        inc = Incumbent(name, sched, value_of(sched, options.objective))
        if enough is not None and inc.value <= enough:
            if not validate(sched):
                return inc, tuple(notes)
            notes.append(f"{name}: its schedule does not validate; ignored")
            continue
        found.append(inc)
    while found:
        best = found[0]
        for inc in found[1:]:  # ties go to the earlier heuristic
            if inc.value < best.value * (1 - 1e-12) - 1e-300:
                best = inc
        if not validate(best.schedule):
            return best, tuple(notes)
        notes.append(f"{best.name}: its schedule does not validate; ignored")
        found = [inc for inc in found if inc is not best]
    return None, tuple(notes)


def delay_options(options: ScheduleOptions) -> ScheduleOptions:
    """The options the MILP models exactly: the delay model plus capacities."""
    return ScheduleOptions(memory=options.memory, area=options.area)


def serial_upper_bound(cost: CostTable) -> float:
    """Makespan of running every task, slowest feasible device, one after
    another with every transfer at its slowest: bounds any schedule's optimum."""
    total = sum(max(x for x in row if x < INF) for row in cost.time)
    for e in cost.graph.edges:
        worst = 0.0
        for a in allowed_devices(cost, e.src):
            for b in allowed_devices(cost, e.dst):
                c = cost.comm(e.index, a, b)
                if c < INF:
                    worst = max(worst, c)
        total += worst
    return total * (1 + 1e-9) + 1e-9


def retime(cost: CostTable, device: Sequence[int], order: tuple[tuple[int, ...], ...] | None,
           options: ScheduleOptions) -> Schedule:
    """The schedule of ``device`` and per-device ``order`` under ``options``."""
    return build_schedule(cost, Assignment(tuple(device), order), options)


def schedule_order(schedule: Schedule) -> tuple[tuple[int, ...], ...]:
    """Per-device order of ``schedule`` (its own, else by start time)."""
    if schedule.order:
        return schedule.order
    return order_from_starts(schedule.cost, schedule.device_of, tuple(s.start for s in schedule.slots))


def checked(cost: CostTable, device: Sequence[int], order: tuple[tuple[int, ...], ...] | None,
            options: ScheduleOptions) -> Schedule | None:
    """Re-timed and validated schedule, or None when it is rejected."""
    try:
        sched = retime(cost, device, order, options)
    except MapperError:
        return None
    return None if validate(sched) else sched
