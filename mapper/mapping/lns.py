"""MILP-based large-neighbourhood search for graphs too big for the exact model.

Large neighbourhood search (Shaw, "Using constraint programming and local
search methods to solve vehicle routing problems", CP 1998) with an exact
MILP as the repair step, as in the window decompositions used for
scheduling (e.g. Pacino & Van Hentenryck, IJCAI 2011): a window of ``k``
consecutive tasks (of the critical tasks by start time, for makespan, then of
a topological order) is freed (device and order), every
other task keeps its device and its relative order on that device, and the
window works inside the time slab ``[T0, T1]`` its tasks occupy now (tasks
that end before ``T0`` keep their times, the window's tasks end by ``T1``,
tasks that start after ``T1`` stay after it). Its model
(:mod:`mapper.mapping.exact.window_model`) has variables for the window and
the tasks overlapping its slab only, so its size follows the window, not
the graph. The window subproblem (:func:`mapper.mapping.exact.solve.solve`) is
solved exactly or up to its time slice, warm-started from the current
mapping. A window result is
accepted only when its re-timed schedule (:func:`mapper.engine.schedule.build_schedule`)
validates and improves the objective (a window whose solver found nothing
better than its start is not re-timed); for makespan, a window also minimises
a small multiple of the sum of finish times, and an equal makespan with a
smaller sum is accepted, so work moves earlier and later windows can shorten
the critical path. Windows slide by ``k // 2``; after
every accepted window the windows are rebuilt (the critical path moved); when
every window fails the width doubles (up to :data:`MAX_WINDOW`), and when
those fail too, when the search stalls (its recent gain per second, over
the time left, would not reach :data:`MIN_GAIN` of the objective: judged after
:data:`STALL_MIN_WINDOWS` windows and :data:`PROBE_SHARE` of its time), or
when less time is left than the last window took (model building included),
the search ends.

:func:`map_large` is what :class:`~mapper.mapping.milp.MilpMapper` does above
its exact-size limit (on a graph whose every task has one device, it keeps the
best heuristic's schedule and searches nothing): coarsen chains (:mod:`.coarsen`), start from the better
of the coarse heuristics and the projected best fine heuristic, run LNS on the
coarse graph, expand, re-time on the original graph, and return the better of
that and the best heuristic on the original graph.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mapper.core.units import fmt_objective
from mapper.costing.cost import CostTable
from mapper.engine.schedule import Schedule, ScheduleOptions
from mapper.engine.validate import validate
from mapper.errors import InfeasibleError, MapperError
from mapper.mapping.base import MapOptions, MapResult
from mapper.mapping.coarsen import Coarsening, coarsen, expand, project
from mapper.mapping.exact.incumbent import (
    Incumbent,
    best_heuristic,
    checked,
    delay_options,
    pinned,
    retime,
    schedule_order,
    value_of,
)
from mapper.mapping.exact.result import lower_bound_for, make_result, progress_reporter
from mapper.mapping.exact.solve import solve
from mapper.mapping.exact.subproblem import REL_TOL, Subproblem, objective_needs_time
from mapper.mapping.orders import chain_arcs, order_from_starts, topo_arcs

#: Tasks freed per window.
WINDOW = 8
#: Widest window tried after passes without improvement.
MAX_WINDOW = 16
#: Weight (times 1/n) of the sum of finish times in makespan windows.
FLOW_WEIGHT = 1e-3
#: Seconds at most per window solve.
WINDOW_TIME = 2.0
#: The search ends when its gain per second over the recent past (the last quarter of its
#: run, and at least :data:`PROBE_SHARE` of its time), kept up for the time left, would gain
#: less than this share of the objective: windows that stop paying would otherwise spend the
#: whole time limit for a few thousandths of a per cent (on thousands of tasks a window, with
#: its re-timing, takes a tenth of a second or more).
MIN_GAIN = 1e-4
#: The share of its time (and :data:`PROBE_MIN` seconds at least) the search runs before it
#: may be judged stalled, with :data:`STALL_MIN_WINDOWS` windows solved at least.
PROBE_SHARE = 0.05
PROBE_MIN = 0.25
STALL_MIN_WINDOWS = 2
#: Seconds at least per window solve (when that much time is left).
MIN_SLICE = 0.5
#: What the result says of a graph whose every task has one device (a split plan's): its
#: layout is given, and the best list schedule's order on each device is kept unsearched.
PINNED_NOTE = ("graph too large for the exact MILP; every task has one device: the layout is given, so it is "
               "not searched (no LNS): {}'s order on each device is kept, and the gap bounds what re-ordering "
               "could gain")
#: The coarse pass (which re-runs every heuristic on the coarse graph) runs only
#: when those heuristics, timed by the fine ones, take at most this share of the time left.
COARSE_TIME_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class LnsStats:
    """What a search did: windows solved and accepted, passes, values."""

    windows: int
    accepted: int
    passes: int
    start_value: float
    end_value: float
    stalled: bool = False  # ended because its recent gain per second could not reach MIN_GAIN in the time left
    last_window: float = 0.0  # seconds the last window took, model building included


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
    window_time: float = 0.0,
    progress=None,
    stop=None,
) -> tuple[Schedule, LnsStats]:
    """Improve ``schedule`` (valid for ``cost``) by MILP windows until
    ``deadline`` (a :func:`time.perf_counter` value). The returned schedule
    is timed with ``options`` restricted to what the MILP models (delay
    model plus memory/area; see :func:`~mapper.mapping.exact.incumbent.delay_options`).
    ``window_time`` estimates the first window's seconds (no window starts
    with less time left than the last one took). ``stop()``, when given, is
    polled; once it returns True the search ends."""
    opts = delay_options(options)
    bound = makespan_bound if objective != "makespan" else None
    timed = objective_needs_time(objective, bound)
    if schedule.options == opts and schedule.cost is cost and (schedule.order or not timed):
        current = schedule  # timed by these options already (re-timing it gives it back)
    else:
        current = retime(cost, schedule.device_of, schedule_order(schedule) if timed else None, opts)
    value = start_value = value_of(current, objective)
    flow = FLOW_WEIGHT / max(1, cost.n_tasks) if objective == "makespan" else 0.0
    key = _key(current, value, flow)
    n = cost.n_tasks
    k = max(1, min(window, n))
    solved_count = accepted = passes = 0
    tried: set[tuple[int, ...]] = set()
    stopped = stop if stop is not None else (lambda: False)
    began = time.perf_counter()
    last_window = window_time  # seconds the last window took (first: ``window_time``), model building included
    probe = max(PROBE_MIN, PROBE_SHARE * max(0.0, deadline - began))
    history = [(began, start_value)]  # (time, value) after each accepted window

    def stalled() -> bool:
        now = time.perf_counter()
        if solved_count < STALL_MIN_WINDOWS or now - began < probe:
            return False
        horizon = max(probe, (now - began) / 4)
        before = next((v for t, v in reversed(history) if t <= now - horizon), start_value)
        return (before - value) / horizon * max(0.0, deadline - now) < MIN_GAIN * abs(value)

    out_of_time = False
    while n and not out_of_time and time.perf_counter() < deadline - 0.05 and not stopped() and not stalled():
        windows = [w for w in _windows(current, k, objective == "makespan") if w not in tried]
        if not windows:
            if k >= min(MAX_WINDOW, n):
                break
            k = min(MAX_WINDOW, n, 2 * k)  # every window failed: widen them
            continue
        passes += 1
        for i, free in enumerate(windows):
            left = deadline - time.perf_counter()
            out_of_time = left <= max(0.05, last_window)
            if out_of_time or stopped() or stalled():
                break  # out of time, or less left than the last window took (model building included)
            window_t0 = time.perf_counter()
            tried.add(free)
            to_beat = value + flow * key[1]  # the start's value in the window's objective
            sub = Subproblem(
                cost=cost,
                objective=objective,
                free=free,
                device=current.device_of,
                start=tuple(s.start for s in current.slots),
                upper=current.makespan * (1 + 1e-9) + 1e-12 if bound is None else bound,
                time_limit=min(WINDOW_TIME, left, max(MIN_SLICE, left / (len(windows) - i))),
                seed=seed,
                memory=options.memory,
                area=options.area,
                makespan_bound=bound,
                symmetry=False,
                start_value=to_beat,
                flow_weight=flow,
                frozen_before=min(current.slots[t].start for t in free) if timed else None,
                horizon=max(current.slots[t].end for t in free) if timed else None,
                stop=stop,
            )
            res = solve(sub)
            last_window = time.perf_counter() - window_t0
            solved_count += 1
            if res.device is None or (res.objective is not None and res.objective >= to_beat):
                continue  # nothing better than the start: no need to re-time it
            try:
                cand = retime(cost, res.device, res.order, opts)
            except MapperError:
                cand = None
            if cand is None or (bound is not None and cand.makespan > bound * (1 + REL_TOL)):
                continue
            cand_value = value_of(cand, objective)
            cand_key = _key(cand, cand_value, flow)
            if cand_key < key and not validate(cand):  # validated only when it would be taken
                current, value, key = cand, cand_value, cand_key
                history.append((time.perf_counter(), value))
                accepted += 1
                tried.clear()
                if progress is not None:
                    progress(value)
                break  # the schedule changed: rebuild the windows
    return current, LnsStats(solved_count, accepted, passes, start_value, value, stalled(), last_window)


def _key(schedule: Schedule, value: float, flow: float) -> tuple[float, float]:
    """Acceptance order: the objective (rounded to 1e-9 relative), then,
    with a flow weight, the sum of task ends."""
    scale = 1e-9 * max(abs(value), 1e-300)
    return (round(value / scale) * scale if value else 0.0, sum(s.end for s in schedule.slots) if flow else 0.0)


def critical_tasks(schedule: Schedule) -> tuple[int, ...]:
    """Tasks with zero slack in ``schedule`` (delay model): delaying any of
    them delays the makespan. Slack from a backward pass over the graph's
    edges (with their transfer times) and the device orders."""
    cost = schedule.cost
    n = cost.n_tasks
    dev, slots = schedule.device_of, schedule.slots
    arcs = [(e.src, e.dst, cost.comm(e.index, dev[e.src], dev[e.dst])) for e in cost.graph.edges]
    arcs += [(a, b, 0.0) for a, b in chain_arcs(schedule_order(schedule), frozenset(range(n)))]
    topo, _, _ = topo_arcs(n, arcs)
    out: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for a, b, c in arcs:
        out[a].append((b, c))
    latest = [schedule.makespan] * n
    for t in reversed(topo):
        for b, c in out[t]:
            latest[t] = min(latest[t], latest[b] - (slots[b].end - slots[b].start) - c)
    tol = 1e-9 * max(schedule.makespan, 1e-300)
    return tuple(t for t in range(n) if latest[t] - slots[t].end <= tol)


def _windows(schedule: Schedule, k: int, critical: bool) -> list[tuple[int, ...]]:
    """Windows of ``k`` tasks, sliding by ``k // 2``: first along the critical
    tasks in start order (when ``critical``), then along the topological order."""
    cost = schedule.cost
    seqs = []
    if critical:
        crit = sorted(critical_tasks(schedule), key=lambda t: (schedule.slots[t].start, t))
        seqs.append(crit)
    seqs.append(list(cost.graph.topo_order))
    out: list[tuple[int, ...]] = []
    seen: set[tuple[int, ...]] = set()
    for seq in seqs:
        m = len(seq)
        if not m:
            continue
        width = min(k, m)
        firsts = list(range(0, m - width + 1, max(1, width // 2)))
        if firsts[-1] + width < m:
            firsts.append(m - width)
        for first in firsts:
            w = tuple(sorted(seq[first : first + width]))
            if w not in seen:
                seen.add(w)
                out.append(w)
    return out


def near_enough(cost: CostTable, options: MapOptions, best: Incumbent | None, notes: tuple[str, ...], t0: float,
                bound: float | None = None) -> MapResult | None:
    """``best`` as the result when it is within :data:`MIN_GAIN` of the lower
    bound (no window, nor all of them, could gain what a window must), else None."""
    low = lower_bound_for(cost, options.objective, options.schedule, bound)
    if best is None or low is None or best.value > low * (1 + MIN_GAIN):
        return None
    note = (f"graph too large for the exact MILP; {best.name} is within {100 * MIN_GAIN:g} % of the lower bound "
            f"{fmt_objective(low, options.objective)}, more than any search could gain: kept")
    return make_result(cost, options, best.schedule, best.value, "heuristic", bound, t0, (*notes, note))


def map_large(
    cost: CostTable, options: MapOptions, best: Incumbent | None, given_notes: tuple[str, ...], t0: float,
    heuristics_s: float = 0.0, bound: float | None = None,
) -> MapResult:
    """The large-graph path of :class:`~mapper.mapping.milp.MilpMapper`.

    Half of the remaining time goes to LNS on the coarse graph, the rest to
    LNS on the original graph, started from the better of the expanded coarse
    result and the best heuristic. The coarse pass is skipped when nothing
    fuses, or when re-running every heuristic on the coarse graph (estimated
    from ``heuristics_s``, what they took on the original) would take more
    than :data:`COARSE_TIME_SHARE` of the time left: on thousands of tasks
    they take seconds. ``bound`` is a lower bound found before (CP-SAT's); a
    result that meets it is ``optimal``. A :func:`pinned` graph (every task has
    one device: a split plan's) keeps ``best`` with no search (:data:`PINNED_NOTE`).
    """
    near = near_enough(cost, options, best, given_notes, t0, bound)
    if near is not None:
        return near
    if best is not None and pinned(cost):  # the layout is given: it is not searched
        return make_result(cost, options, best.schedule, best.value, "heuristic", bound, t0,
                           (*given_notes, PINNED_NOTE.format(best.name)))
    objective, sopts = options.objective, options.schedule
    deadline = t0 + options.time_limit
    timed = objective_needs_time(objective, options.makespan_bound if objective != "makespan" else None)
    notes = list(given_notes)
    report = progress_reporter(options, t0, "LNS")
    seeds: list[tuple[Schedule, str]] = []
    if best is not None:
        given = best.schedule  # re-timing a schedule timed by these options already gives it back
        same = given.cost is cost and given.options == delay_options(sopts) and given.order
        seeds.append((given if same else retime(cost, given.device_of, schedule_order(given), delay_options(sopts)),
                      best.name))
    coarse = coarsen(cost, sopts)
    notes.append(f"graph too large for the exact MILP: coarsened {cost.n_tasks} -> {coarse.cost.n_tasks} tasks")
    estimate = heuristics_s * coarse.cost.n_tasks / max(1, cost.n_tasks)
    worth = coarse.fused and (
        estimate <= COARSE_TIME_SHARE * (deadline - time.perf_counter()) or not seeds)
    if coarse.fused and not worth:
        notes.append(f"coarse pass skipped: its heuristics would take about {estimate:.1f} s of the "
                     f"{max(0.0, deadline - time.perf_counter()):.1f} s left")
    start, origin = (_coarse_start(coarse, options, seeds[0][0] if seeds else None, best)
                     if worth else (None, ""))
    if start is not None:
        now = time.perf_counter()
        improved, stats = improve(coarse.cost, start, objective, sopts, now + (deadline - now) / 2,
                                  seed=options.seed, makespan_bound=options.makespan_bound, progress=report,
                                  stop=options.stop)
        notes.append(f"coarse LNS from {origin}: {_stats(stats, objective)}")
        dev, order = expand(coarse, improved.device_of, schedule_order(improved) if timed else None)
        fine = checked(cost, dev, order, delay_options(sopts))
        if fine is not None and _within(fine, options):
            seeds.append((fine, "the expanded coarse LNS result"))
    if not seeds:
        raise InfeasibleError("no heuristic found a mapping and LNS had no start", obj=cost.graph.name)
    seed_sched, seed_name = min(seeds, key=lambda p: value_of(p[0], objective))
    # the coarse pass's last window, scaled by the task count (re-timing is linear in it), estimates the first here
    first = stats.last_window * cost.n_tasks / max(1, coarse.cost.n_tasks) if start is not None else 0.0
    improved, stats = improve(cost, seed_sched, objective, sopts, deadline, seed=options.seed,
                              makespan_bound=options.makespan_bound, window_time=first, progress=report,
                              stop=options.stop)
    notes.append(f"LNS from {seed_name}: {_stats(stats, objective)}")
    unchanged = stats.accepted == 0 and best is not None and seed_name == best.name
    final = None if unchanged else checked(cost, improved.device_of, schedule_order(improved) if timed else None,
                                           sopts)
    if final is not None and _within(final, options) and (
        best is None or value_of(final, objective) < best.value * (1 - REL_TOL)
    ):
        value = value_of(final, objective)
        if best is not None:
            notes.append(f"improvement over {best.name}: {_pct(best.value, value)}")
        return make_result(cost, options, final, value, "feasible", bound, t0, notes)
    if best is None:
        raise InfeasibleError("LNS produced no valid mapping and no heuristic succeeded", obj=cost.graph.name)
    notes.append(f"no improvement over {best.name}; kept")
    return make_result(cost, options, best.schedule, best.value, "heuristic", bound, t0, notes)


def _coarse_start(coarse: Coarsening, options: MapOptions, fine_best: Schedule | None,
                  best: Incumbent | None) -> tuple[Schedule | None, str]:
    """Better of the heuristics on the coarse graph and the projection of the
    best fine mapping (when no chain is split): ``(schedule, origin)``."""
    objective = options.objective
    c_best, _ = best_heuristic(coarse.cost, options)
    start = c_best.schedule if c_best is not None else None
    origin = f"{c_best.name} on the coarse graph" if c_best is not None else ""
    if fine_best is None or best is None:
        return start, origin
    proj = project(coarse, fine_best.device_of, tuple(s.start for s in fine_best.slots))
    if proj is not None:
        order = order_from_starts(coarse.cost, proj[0], proj[1])
        cand = checked(coarse.cost, proj[0], order, delay_options(options.schedule))
        if cand is not None and (start is None or value_of(cand, objective) < value_of(start, objective)):
            start, origin = cand, f"{best.name} projected onto the coarse graph"
    return start, origin


def _within(schedule: Schedule, options: MapOptions) -> bool:
    """Whether ``schedule`` meets the makespan bound (energy/throughput)."""
    bound = options.makespan_bound if options.objective != "makespan" else None
    return bound is None or schedule.makespan <= bound * (1 + REL_TOL)


def _stats(stats: LnsStats, objective: str) -> str:
    return (f"{stats.windows} windows of {WINDOW} tasks re-solved exactly in {stats.passes} passes, "
            f"{stats.accepted} of them improved the schedule, "
            f"{describe_change(stats.start_value, stats.end_value, objective)}{stall_note(stats)}")


def stall_note(stats: LnsStats) -> str:
    """``; stopped: ...`` when the search ended because windows stopped paying, else ``""``."""
    if not stats.stalled:
        return ""
    return (f"; stopped: its recent gain per second would not reach {100 * MIN_GAIN:g} % in the time left "
            f"(judged after {100 * PROBE_SHARE:g} % of its time, {PROBE_MIN:g} s at least)")


def describe_change(before: float, after: float, objective: str) -> str:
    """``12.21 ms -> 11.9 ms (2.54 % better)``, or ``no change at 12.21 ms``."""
    if not after < before:
        return f"no change at {fmt_objective(before, objective)}"
    return f"{fmt_objective(before, objective)} -> {fmt_objective(after, objective)} ({_pct(before, after)} better)"


def _pct(before: float, after: float) -> str:
    if before <= 0:
        return "0.00 %"
    return f"{100.0 * (before - after) / before:.2f} %"
