"""The delay model as a CP-SAT model (OR-Tools): the one module that imports OR-Tools.

Constraint programming with interval variables, as in the scheduling models
of Laborie, Rogerie, Shaw and Vilim, "IBM ILOG CP Optimizer for Scheduling"
(Constraints 23, 2018) and the CP-SAT job-shop examples:

* ``p[t,d]`` a literal per task and allowed device, exactly one true;
  ``s[t]`` the start and ``e[t] = s[t] + sum_d time[t][d] p[t,d]`` the end;
* an optional interval of length ``time[t][d]`` present iff ``p[t,d]``, and
  ``NoOverlap`` over each device's intervals;
* per edge ``u -> v``: ``s[v] >= e[u]``, and ``s[v] >= e[u] + comm(e,a,b)``
  enforced by ``p[u,a] and p[v,b]``; a pair without a route is forbidden;
* ``memory``/``area``: ``sum_t footprint[t] p[t,d] <= capacity[d]``;
* objectives as in :mod:`mapper.mapping.objectives`: makespan (``Cmax >= e[t]``
  for sinks), energy (``sum energy[t][d] p[t,d]``), throughput under the
  ``device-load`` and ``1f1b`` models (per-device loads with one literal per
  edge and device pair for the transfers); a makespan bound caps ``Cmax``.

CP-SAT works on integers: times are scaled so the upper bound ``U`` is
:data:`SCALE` units and rounded *down*, so the model is a relaxation and its
bound, scaled back, is a valid lower bound; the caller re-times the answer
with the exact times (a path of ``n`` tasks and edges loses under ``2n``
units, ``2n / SCALE`` of ``U``). One worker and a fixed seed.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from mapper.cost import INF, CostTable
from mapper.mapping.orders import allowed_devices, canonical_devices, identical_device_classes

#: Model time units per upper bound (rounding loses at most 2n units on a path).
SCALE = 2**30
#: Energy and area are scaled to integers with this many units per reference value.
VALUE_SCALE = 2**30


@dataclass(frozen=True, slots=True)
class CpSolved:
    """The answer in task terms; ``device`` None when none was found."""

    status: str  # optimal | feasible | infeasible | none
    device: tuple[int, ...] | None
    start: tuple[float, ...] | None  # seconds (rounded model times; re-time them)
    objective: float | None  # caller's units
    bound: float | None  # caller's units, a valid lower bound
    n_literals: int
    n_constraints: int


def solve_cpsat(cost: CostTable, objective: str, upper: float, *, memory: bool, area: bool,
                makespan_bound: float | None, hint: tuple[Sequence[int], Sequence[float]] | None,
                time_limit: float, seed: int, micro_batches: int = 1,
                progress: Callable[[float, float | None, float | None], None] | None = None,
                stop: Callable[[], bool] | None = None, target: float | None = None) -> CpSolved:
    """Build and solve the model (module docstring). ``upper`` bounds the
    makespan of an optimal schedule (the best heuristic's, or a serial bound);
    the search stops at a solution whose value meets ``target`` (a lower bound
    the caller knows)."""
    n, nd = cost.n_tasks, cost.n_devices
    timed = objective == "makespan" or makespan_bound is not None
    if objective != "makespan":
        upper = makespan_bound if makespan_bound is not None else upper
    horizon_s = min(upper, makespan_bound) if makespan_bound is not None else upper
    k = SCALE / horizon_s if 0 < horizon_s < INF else 1.0
    horizon = SCALE + 1
    if k >= 1.0 and whole_times(cost):
        # one tick per time unit: no rounding, so the model is exact, and a bound
        # moves by whole units rather than by one of the SCALE / U ticks of a unit
        k = 1.0
        horizon = math.floor(horizon_s) + 1

    def ticks(x: float) -> int:
        return int(math.floor(x * k))

    m = cp_model.CpModel()
    p: dict[tuple[int, int], cp_model.IntVar] = {}
    start = [m.new_int_var(0, horizon, f"s{t}") for t in range(n)] if timed else []
    end = [m.new_int_var(0, horizon, f"e{t}") for t in range(n)] if timed else []
    by_device: list[list] = [[] for _ in range(nd)]
    spans: list = []  # each task's interval on whichever device runs it, for the cumulative below
    for t in range(n):
        feas = allowed_devices(cost, t)
        if memory:
            feas = tuple(d for d in feas if cost.footprint[t] <= cost.memory_capacity[d])
        if area:
            feas = tuple(d for d in feas if cost.platform.devices[d].kind != "fpga"
                         or cost.area[t][d] <= cost.area_capacity[d])
        if not feas:
            return CpSolved("infeasible", None, None, None, None, 0, 0)
        dur = []
        for d in feas:
            lit = p[t, d] = m.new_bool_var(f"p{t}_{d}")
            length = ticks(cost.time[t][d])
            if timed:
                by_device[d].append(m.new_optional_fixed_size_interval_var(start[t], length, lit, f"i{t}_{d}"))
            dur.append((lit, length))
        m.add_exactly_one(lit for lit, _ in dur)
        if timed:
            lengths = [length for _, length in dur]
            size = m.new_int_var(min(lengths), max(lengths), f"d{t}")
            m.add(size == sum(length * lit for lit, length in dur))
            spans.append(m.new_interval_var(start[t], size, end[t], f"span{t}"))  # end = start + size
    for d in range(nd):
        if len(by_device[d]) > 1:
            m.add_no_overlap(by_device[d])
    if timed and nd > 1:
        # redundant: at most nd tasks run at once; its energetic reasoning (Baptiste,
        # Le Pape and Nuijten, "Constraint-Based Scheduling", 2001, ch. 3) proves
        # bounds that the per-device no-overlaps, one at a time, cannot
        m.add_cumulative(spans, [1] * n, nd)
    classes = identical_device_classes(cost)
    break_symmetry(m, p, classes, n)
    pair: dict[tuple[int, int, int], cp_model.IntVar] = {}
    for e in cost.graph.edges:
        u, v = e.src, e.dst
        if timed:
            m.add(start[v] >= end[u])
        for a in range(nd):
            if (u, a) not in p:
                continue
            for b in range(nd):
                if (v, b) not in p or a == b:
                    continue
                c = cost.comm(e.index, a, b)
                if c == INF:
                    m.add_bool_or([~p[u, a], ~p[v, b]])
                elif ticks(c) > 0:
                    if timed:
                        m.add(start[v] >= end[u] + ticks(c)).only_enforce_if([p[u, a], p[v, b]])
                    if objective == "throughput":
                        z = pair[e.index, a, b] = m.new_bool_var(f"z{e.index}_{a}_{b}")
                        m.add_bool_or([~p[u, a], ~p[v, b], z])
    for enabled, weight, cap, fpga_only in ((memory, lambda t, d: cost.footprint[t], cost.memory_capacity, False),
                                            (area, lambda t, d: cost.area[t][d], cost.area_capacity, True)):
        if not enabled:
            continue
        for d in range(nd):
            if cap[d] == INF or (fpga_only and cost.platform.devices[d].kind != "fpga"):
                continue
            unit = VALUE_SCALE / cap[d] if cap[d] > 0 else 1.0
            terms = [(math.ceil(weight(t, d) * unit), p[t, d]) for t in range(n) if (t, d) in p]
            if terms:
                m.add(sum(c * lit for c, lit in terms) <= int(cap[d] * unit))
    cmax = m.new_int_var(0, horizon, "cmax")
    if timed:
        m.add_max_equality(cmax, [end[t] for t in range(n) if not cost.graph.succs[t]])
    if makespan_bound is not None:
        slack = 0 if k == 1.0 and horizon < SCALE else 2 * n + 1  # rounding slack; the re-timed schedule is checked
        m.add(cmax <= ticks(makespan_bound) + slack)
    obj_k = k
    if objective == "makespan":
        m.minimize(cmax)
    elif objective == "energy":
        ref = sum(max((x for x, tt in zip(er, tr) if tt < INF), default=0.0) for er, tr in zip(cost.energy, cost.time))
        obj_k = VALUE_SCALE / ref if ref > 0 else 1.0
        m.minimize(sum(int(math.floor(cost.energy[t][d] * obj_k)) * lit for (t, d), lit in p.items()))
    else:
        loads = []
        for d in range(nd):
            work = [ticks(cost.time[t][d]) * p[t, d] for t in range(n) if (t, d) in p]
            work += [ticks(cost.comm(ei, a, b)) * z for (ei, a, b), z in pair.items() if b == d]
            load = m.new_int_var(0, horizon * (n + len(cost.graph.edges) + 1), f"load{d}")
            m.add(load == sum(work))
            loads.append(load)
        period = m.new_int_var(0, horizon * (n + len(cost.graph.edges) + 1), "period")
        m.add_max_equality(period, loads)
        if micro_batches > 1:
            m.minimize((micro_batches - 1) * period + sum(loads))
            obj_k = k * micro_batches
        else:
            m.minimize(period)
    if hint is not None:
        device, starts = hint
        device = canonical_devices(tuple(device), classes)
        for (t, d), lit in p.items():
            m.add_hint(lit, 1 if device[t] == d else 0)
        for t in range(n):
            if timed:
                m.add_hint(start[t], min(horizon, ticks(starts[t])))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit)
    solver.parameters.num_workers = 1
    # the cumulative's overload checking and timetable edge finding (Vilim, CPAIOR
    # 2011): off by default in CP-SAT, they prove the STG set's 4-processor optima
    solver.parameters.use_overload_checker_in_cumulative = True
    solver.parameters.use_timetable_edge_finding_in_cumulative = True
    solver.parameters.random_seed = int(seed) % 2**31
    # Ctrl-C is the caller's (``stop``): CP-SAT's own SIGINT handler would leave
    # SIGINT ignored in this process, and so in every process it starts later
    solver.parameters.catch_sigint_signal = False
    t0 = time.perf_counter()

    class _Watch(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            if progress is not None:
                progress(time.perf_counter() - t0, self.objective_value / obj_k, self.best_objective_bound / obj_k)
            if (stop is not None and stop()) or (target is not None
                                                 and self.objective_value / obj_k <= target * (1 + 1e-9)):
                self.stop_search()

    done = threading.Event()

    def watch_stop() -> None:  # the callback runs only on solutions: poll ``stop`` between them too
        while not done.wait(0.05):
            if stop is not None and stop():
                solver.stop_search()
                return

    watcher = threading.Thread(target=watch_stop, daemon=True) if stop is not None else None
    if watcher is not None:
        watcher.start()
    try:
        status = solver.solve(m, _Watch())
    finally:
        done.set()
        if watcher is not None:
            watcher.join()
    stats = m.proto
    n_lits, n_cons = len(p) + len(pair), len(stats.constraints)
    if status == cp_model.INFEASIBLE:
        return CpSolved("infeasible", None, None, None, None, n_lits, n_cons)
    bound = solver.best_objective_bound / obj_k if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CpSolved("none", None, None, None, bound, n_lits, n_cons)
    device = tuple(next(d for d in range(nd) if (t, d) in p and solver.boolean_value(p[t, d])) for t in range(n))
    found = tuple(solver.value(start[t]) / k for t in range(n)) if timed else None
    return CpSolved("optimal" if status == cp_model.OPTIMAL else "feasible", device, found,
                    solver.objective_value / obj_k, bound, n_lits, n_cons)


def break_symmetry(m: cp_model.CpModel, p: dict[tuple[int, int], cp_model.IntVar], classes: tuple[tuple[int, ...], ...],
                   n: int) -> None:
    """Value precedence over each class of interchangeable devices (Law and
    Lee, "Global constraints for integer and set value precedence", CP 2004):
    in task order, a task may use the class's ``i+1``-th device only once some
    earlier task uses its ``i``-th, which keeps one of every ``k!`` relabelled
    copies of a schedule."""
    for members in classes:
        used: list[cp_model.IntVar | None] = [None] * len(members)  # some earlier task is on members[i]
        for t in range(n):
            for i in range(1, len(members)):
                lit = p.get((t, members[i]))
                if lit is None:
                    continue
                prev = used[i - 1]
                if prev is None:
                    m.add(lit == 0)
                else:
                    m.add_implication(lit, prev)
            for i, d in enumerate(members):
                lit = p.get((t, d))
                if lit is None:
                    continue
                now = m.new_bool_var(f"u{t}_{d}")
                before = used[i]
                m.add_bool_or([~now, lit] + ([before] if before is not None else []))
                m.add_implication(lit, now)
                if before is not None:
                    m.add_implication(before, now)
                used[i] = now


def whole_times(cost: CostTable) -> bool:
    """Every finite task and transfer time is a whole number (as in the
    Standard Task Graph set), so an integer scale keeps them exact."""
    if not all(float(x).is_integer() for row in cost.time for x in row if x < INF):
        return False
    nd = cost.n_devices
    return all(float(c).is_integer() for e in cost.graph.edges for a in range(nd) for b in range(nd)
               if a != b and (c := cost.comm(e.index, a, b)) < INF)
