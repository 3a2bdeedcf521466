"""Incremental list scheduling shared by the heuristic mappers, and the
:class:`~mapper.mapping.base.MapResult` they return."""

from __future__ import annotations

import math
import time as _time
from collections.abc import Sequence

from mapper.core.units import fmt_time
from mapper.costing.cost import CostTable
from mapper.engine.schedule import (
    Assignment,
    Schedule,
    ScheduleOptions,
    assembled,
    build_schedule,
    checked_devices,
    hop_durations,
    ready_time,
)
from mapper.engine.timeline import Timeline
from mapper.errors import InfeasibleError
from mapper.mapping.base import MapOptions, MapResult
from mapper.mapping.bounds import lower_bound
from mapper.mapping.objectives import objective_value, pipeline_notes
from mapper.mapping.ranks import rank_key

INF = math.inf


class Placer:
    """Places tasks one by one (in a topological order) at their earliest
    start on a device, with HEFT's insertion policy or append-only.

    With the ``memory`` / ``area`` schedule options on, a device whose static
    budget the task would overflow is not a candidate. With ``contention``
    on, input arrivals are estimated by booking each transfer's hops on its
    route's links after the transfers booked before it (placement order, a
    stand-in for the FIFO order :func:`~mapper.engine.schedule.build_schedule`
    applies when it times the final order). The first task of a
    ``colocate`` class pins the class to its device (and, with ``memory``
    on, reserves the whole class's footprint there).
    """

    def __init__(self, cost: CostTable, options: ScheduleOptions, insertion: bool = True) -> None:
        self.cost = cost
        self.options = options
        self.insertion = insertion
        self.timeline = Timeline(cost.n_devices)
        self.device: list[int] = [-1] * cost.n_tasks  # -1: not placed yet
        self.start: list[float] = [0.0] * cost.n_tasks
        self.end: list[float] = [0.0] * cost.n_tasks
        self.memory = [0.0] * cost.n_devices
        self.area = [0.0] * cost.n_devices
        self.link_free: dict[int, float] = {}
        self.pinned: dict[str, int] = {}  # colocation class -> its device
        self.class_footprint: dict[str, float] = {}
        for task in cost.graph.tasks:
            if task.colocate:
                self.class_footprint[task.colocate] = (self.class_footprint.get(task.colocate, 0.0)
                                                       + cost.footprint[task.index])
        # Without link contention, memory, area or colocation a device fits a task where its time is
        # finite and the inputs arrive by the delay model alone: :meth:`place_best` takes its plain path.
        self.plain = not (options.contention or options.memory or options.area or self.class_footprint)

    def _footprint(self, t: int) -> float:
        """The memory placing ``t`` books: its class's when it is the class's first task."""
        cls = self.cost.graph.tasks[t].colocate
        if not cls:
            return self.cost.footprint[t]
        return 0.0 if cls in self.pinned else self.class_footprint[cls]

    def fits(self, t: int, d: int) -> bool:
        cost = self.cost
        if not cost.time[t][d] < INF:
            return False
        cls = cost.graph.tasks[t].colocate
        if cls and self.pinned.get(cls, d) != d:
            return False
        if self.options.memory and self.memory[d] + self._footprint(t) > cost.memory_capacity[d]:
            return False
        if (self.options.area and cost.platform.devices[d].kind == "fpga"
                and self.area[d] + cost.area[t][d] > cost.area_capacity[d]):
            return False
        return True

    def ready(self, t: int, d: int) -> tuple[float, dict[int, float]]:
        """When ``t``'s inputs are on ``d``, and the link bookings that assumes."""
        if not self.options.contention:
            return ready_time(self.cost, t, d, self.device, self.end), {}
        g = self.cost.graph
        booked: dict[int, float] = {}
        r = 0.0
        for e in sorted(g.preds[t], key=lambda e: (self.end[g.edges[e].src], e)):
            p = g.edges[e].src
            at = self.end[p]
            if self.device[p] != d:
                for link, dur in hop_durations(self.cost, e, self.device[p], d, True):
                    if link >= 0:
                        at = max(at, booked.get(link, self.link_free.get(link, 0.0)))
                        booked[link] = at + dur
                    at += dur
            r = max(r, at)
        return r, booked

    def eft(self, t: int, d: int) -> tuple[float, float, int, dict[int, float]]:
        """``(finish, start, position, link bookings)`` of ``t`` on ``d``;
        finish ``inf`` if it cannot go there."""
        if not self.fits(t, d):
            return INF, INF, -1, {}
        ready, booked = self.ready(t, d)
        if not ready < INF:
            return INF, INF, -1, {}
        start, pos = self.timeline.slot(d, ready, self.cost.time[t][d], self.insertion)
        return start + self.cost.time[t][d], start, pos, booked

    def place(self, t: int, d: int, start: float, pos: int, booked: dict[int, float] | None = None) -> None:
        self.device[t] = d
        self.start[t] = start
        self.end[t] = start + self.cost.time[t][d]
        self.timeline.place(d, pos, t, start, self.end[t])
        self.memory[d] += self._footprint(t)
        cls = self.cost.graph.tasks[t].colocate
        if cls:
            self.pinned.setdefault(cls, d)
        self.area[d] += self.cost.area[t][d]
        self.link_free.update(booked or {})

    def place_best(self, t: int, extra: Sequence[float] | None = None, devices: Sequence[int] | None = None) -> int:
        """Put ``t`` on the device minimising its finish time (plus ``extra[d]``),
        ties to the lowest index; returns the device."""
        if self.plain:
            return self._place_plain(t, extra, range(self.cost.n_devices) if devices is None else devices)
        best = None
        for d in devices if devices is not None else range(self.cost.n_devices):
            finish, start, pos, booked = self.eft(t, d)
            if not finish < INF:
                continue
            score = rank_key(finish + (extra[d] if extra is not None else 0.0))
            if best is None or score < best[0]:
                best = (score, d, start, pos, booked)
        if best is None:
            raise self._nowhere(t)
        self.place(t, best[1], best[2], best[3], best[4])
        return best[1]

    def _nowhere(self, t: int) -> InfeasibleError:
        """The error when ``t`` fits on none of the devices tried."""
        name = self.cost.graph.tasks[t].name
        return InfeasibleError(
            f"task {name!r} fits on no device: each one it can run on is unreachable from its "
            f"predecessors' devices" + (" or out of memory/area" if self.options.memory or self.options.area
                                        else ""), obj=name)

    def _place_plain(self, t: int, extra: Sequence[float] | None, devices: Sequence[int]) -> int:
        """:meth:`place_best` on the plain path: the same floats and the same choice, with each
        input's producer read once and :func:`~mapper.mapping.ranks.rank_key` (monotone) computed
        only for a finish below the best one's."""
        cost = self.cost
        row = cost.time[t]
        g = cost.graph
        edges, device, end, comm = g.edges, self.device, self.end, cost.comm
        inputs = [(e, device[edge.src], end[edge.src], edge.comm) for edge, e in ((edges[e], e) for e in g.preds[t])]
        slot, insertion = self.timeline.slot, self.insertion
        best_score = best_raw = INF
        best: tuple[int, float, int] | None = None
        for d in devices:
            dur = row[d]
            if not dur < INF:
                continue
            ready = 0.0
            for e, a, at, c in inputs:  # cost.comm's value: 0 on one device, else an explicit time wins
                if a != d:
                    at += c if c is not None else comm(e, a, d)
                if at > ready:
                    ready = at
            if not ready < INF:
                continue
            start, pos = slot(d, ready, dur, insertion)
            finish = start + dur + (extra[d] if extra is not None else 0.0)
            if best is not None and not finish < best_raw:
                continue
            score = rank_key(finish)
            if best is None or score < best_score:
                best_score, best_raw, best = score, finish, (d, start, pos)
        if best is None:
            raise self._nowhere(t)
        self.place(t, best[0], best[1], best[2])
        return best[0]

    def schedule(self) -> Schedule:
        """The placed tasks' order, timed by :func:`~mapper.engine.schedule.build_schedule` (on the
        plain path the placement's own times, which are those: each task starts at the latest of its
        inputs' arrivals and the end of the task before it on its device)."""
        order = self.timeline.order()
        if self.plain:
            placed = _placed_schedule(self.cost, self.device, order, self.start, self.end, self.options)
            if placed is not None:
                return placed
        return build_schedule(self.cost, Assignment(tuple(self.device), order), self.options)


def _placed_schedule(cost: CostTable, device: Sequence[int], order: tuple[tuple[int, ...], ...],
                    start: list[float], end: list[float], options: ScheduleOptions) -> Schedule | None:
    """The schedule of a list scheduler's placement when :func:`build_schedule` would give its own
    times back: each task placed at the latest of its inputs' arrivals and the end of the task
    before it in ``order`` (an insertion fits between two tasks), under the plain delay model (no
    contention, streaming, memory or area option, no delegated runs). None otherwise."""
    if options.enabled or any(dev.invoke_us > 0 for dev in cost.platform.devices):
        return None
    checked = checked_devices(cost, device)
    edges, comm = cost.graph.edges, cost.comm
    arrival = [-1.0] * len(edges)
    for edge in edges:
        a, b = checked[edge.src], checked[edge.dst]
        if a != b:
            c = edge.comm
            arrival[edge.index] = end[edge.src] + (c if c is not None else comm(edge.index, a, b))
    return assembled(cost, options, checked, order, start, end, arrival)


def heuristic_result(name: str, schedule: Schedule, options: MapOptions, started: float,
                     notes: tuple[str, ...] = ()) -> MapResult:
    """Package a heuristic's schedule: objective value, lower bound, gap."""
    value = objective_value(schedule, options.objective)
    bound = lower_bound(schedule.cost, options.objective, schedule.options)
    gap = None
    if bound is not None:
        gap = max(0.0, (value - bound) / value) if value > 0 else 0.0
    if options.objective == "deadline" and name.startswith("heft"):
        notes = notes + (f"{name} lists tasks earliest effective deadline first (EDF), ties by upward rank",)
    elif options.objective != "makespan":
        notes = notes + (f"{name} minimises makespan; {options.objective} is reported, not optimised",)
    notes = notes + pipeline_notes(schedule, options.objective)
    if options.makespan_bound is not None and schedule.makespan > options.makespan_bound:
        notes = notes + (f"makespan {fmt_time(schedule.makespan)} exceeds the requested bound "
                         f"{fmt_time(options.makespan_bound)}",)
    return MapResult(schedule=schedule, mapper=name, status="heuristic", objective=options.objective,
                     objective_value=value, lower_bound=bound, gap=gap,
                     solve_time=_time.perf_counter() - started, notes=notes)
