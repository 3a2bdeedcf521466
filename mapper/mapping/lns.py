"""MILP-based large-neighbourhood search for graphs too big for the exact model.

Large neighbourhood search (Shaw, "Using constraint programming and local
search methods to solve vehicle routing problems", CP 1998) with an exact
MILP as the repair step, as in the window decompositions used for
scheduling (e.g. Pacino & Van Hentenryck, IJCAI 2011): a window of ``k``
consecutive tasks of a topological order is freed (device and order), every
other task keeps its device and its relative order on that device, and the
window subproblem (:func:`mapper.mapping.milp.solve`) is solved exactly or up
to its time slice, warm-started from the current mapping. A window result is
accepted only when its re-timed schedule (:func:`mapper.schedule.build_schedule`)
validates and improves the objective. Windows slide by ``k // 2`` and passes
repeat until a pass improves nothing or time runs out.

:func:`map_large` is what :class:`~mapper.mapping.milp.MilpMapper` does above
its exact-size limit: coarsen chains (:mod:`.coarsen`), start from the better
of the coarse heuristics and the projected best fine heuristic, run LNS on the
coarse graph, expand, re-time on the original graph, and return the better of
that and the best heuristic on the original graph.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mapper.cost import CostTable
from mapper.errors import InfeasibleError
from mapper.mapping.base import MapOptions, MapResult
from mapper.mapping.coarsen import coarsen, expand, project
from mapper.mapping.milp import (
    REL_TOL,
    Incumbent,
    Subproblem,
    best_heuristic,
    delay_options,
    make_result,
    objective_needs_time,
    retime,
    schedule_order,
    solve,
    value_of,
)
from mapper.schedule import Schedule, ScheduleOptions

#: Tasks freed per window.
WINDOW = 8
#: Seconds at most per window solve.
WINDOW_TIME = 2.0


@dataclass(frozen=True, slots=True)
class LnsStats:
    """What a search did: windows solved and accepted, passes, values."""

    windows: int
    accepted: int
    passes: int
    start_value: float
    end_value: float


def improve(
    cost: CostTable,
    schedule: Schedule,
    objective: str,
    options: ScheduleOptions,
    deadline: float,
    *,
    seed: int = 0,
    makespan_bound: float | None = None,
    window: int = WINDOW,
    progress=None,
) -> tuple[Schedule, LnsStats]:
    """Improve ``schedule`` (valid for ``cost``) by MILP windows until
    ``deadline`` (a :func:`time.perf_counter` value). The returned schedule
    is timed with ``options`` restricted to what the MILP models (delay
    model plus memory/area; see :func:`~mapper.mapping.milp.delay_options`)."""
    from mapper.validate import validate

    opts = delay_options(options)
    bound = makespan_bound if objective != "makespan" else None
    timed = objective_needs_time(objective, bound)
    current = retime(cost, schedule.device_of, schedule_order(schedule) if timed else None, opts)
    value = start_value = value_of(current, objective)
    topo = cost.graph.topo_order
    n = cost.n_tasks
    k = max(1, min(window, n))
    stride = max(1, k // 2)
    starts = list(range(0, max(n - k, 0) + 1, stride))
    if starts[-1] + k < n:
        starts.append(n - k)
    solved_count = accepted = passes = 0
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        passes += 1
        for i, first in enumerate(starts):
            left = deadline - time.perf_counter()
            if left <= 0.05:
                break
            slice_ = min(WINDOW_TIME, max(0.05, left / max(1, len(starts) - i)))
            free = tuple(sorted(topo[first : first + k]))
            sub = Subproblem(
                cost=cost,
                objective=objective,
                free=free,
                device=current.device_of,
                start=tuple(s.start for s in current.slots),
                upper=current.makespan * (1 + 1e-9) + 1e-12 if bound is None else bound,
                time_limit=slice_,
                seed=seed,
                memory=options.memory,
                area=options.area,
                makespan_bound=bound,
                symmetry=False,
                start_value=value,
            )
            res = solve(sub)
            solved_count += 1
            if res.device is None:
                continue
            try:
                cand = retime(cost, res.device, res.order, opts)
            except InfeasibleError:
                continue
            if validate(cand):
                continue
            cand_value = value_of(cand, objective)
            if bound is not None and cand.makespan > bound * (1 + REL_TOL):
                continue
            if cand_value < value * (1 - 1e-9):
                current, value = cand, cand_value
                accepted += 1
                improved = True
                if progress is not None:
                    progress(value)
    return current, LnsStats(solved_count, accepted, passes, start_value, value)


def map_large(
    cost: CostTable, options: MapOptions, best: Incumbent | None, notes: tuple[str, ...], t0: float
) -> MapResult:
    """The large-graph path of :class:`~mapper.mapping.milp.MilpMapper`."""
    from mapper.validate import validate

    objective, sopts = options.objective, options.schedule
    deadline = t0 + options.time_limit
    notes = list(notes)
    coarse = coarsen(cost, sopts)
    notes.append(f"graph too large for the exact MILP: coarsened {cost.n_tasks} -> {coarse.cost.n_tasks} tasks")
    c_best, _ = best_heuristic(coarse.cost, options)
    start = c_best.schedule if c_best is not None else None
    origin = f"{c_best.name} on the coarse graph" if c_best is not None else ""
    if best is not None:
        fine_sched = retime(cost, best.schedule.device_of, schedule_order(best.schedule), delay_options(sopts))
        proj = project(coarse, fine_sched.device_of, tuple(s.start for s in fine_sched.slots))
        if proj is not None:
            from mapper.mapping.milp import order_from_starts

            order = order_from_starts(coarse.cost, proj[0], proj[1])
            try:
                cand = retime(coarse.cost, proj[0], order, delay_options(sopts))
            except InfeasibleError:
                cand = None
            if cand is not None and (start is None or value_of(cand, objective) < value_of(start, objective)):
                start, origin = cand, f"{best.name} projected onto the coarse graph"
    result_sched: Schedule | None = None
    result_value = None
    if start is not None:
        report = None
        if options.progress is not None:
            from mapper.mapping.base import Progress

            def report(v: float) -> None:
                options.progress(Progress(time.perf_counter() - t0, v, None))

        improved, stats = improve(
            coarse.cost,
            start,
            objective,
            sopts,
            deadline,
            seed=options.seed,
            makespan_bound=options.makespan_bound,
            progress=report,
        )
        notes.append(
            f"LNS from {origin}: {stats.windows} windows of {WINDOW} tasks in {stats.passes} passes, "
            f"{stats.accepted} accepted, {stats.start_value:.6g} -> {stats.end_value:.6g} "
            f"({_pct(stats.start_value, stats.end_value)} better)"
        )
        timed = objective_needs_time(objective, options.makespan_bound if objective != "makespan" else None)
        dev, order = expand(coarse, improved.device_of, schedule_order(improved) if timed else None)
        try:
            fine = retime(cost, dev, order, sopts)
        except InfeasibleError as err:
            notes.append(f"expanded LNS mapping rejected: {err.message}")
            fine = None
        if fine is not None and not validate(fine):
            result_sched, result_value = fine, value_of(fine, objective)
    status = "feasible"
    if result_sched is None or (best is not None and best.value <= result_value * (1 + REL_TOL)):
        if best is None:
            raise InfeasibleError("no heuristic found a mapping and LNS had no start", obj=cost.graph.name)
        if result_value is not None:
            notes.append(f"{best.name} on the original graph ({best.value:.6g}) is at least as good; kept")
        result_sched, result_value, status = best.schedule, best.value, "heuristic"
    elif best is not None:
        notes.append(f"improvement over {best.name}: {_pct(best.value, result_value)}")
    return make_result(cost, options, result_sched, result_value, status, None, t0, notes)


def _pct(before: float, after: float) -> str:
    if before <= 0:
        return "0.00%"
    return f"{100.0 * (before - after) / before:.2f}%"
