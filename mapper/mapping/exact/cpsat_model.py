"""The delay model as a CP-SAT model (OR-Tools): the one module that imports OR-Tools.

Constraint programming with interval variables, as in the scheduling models
of Laborie, Rogerie, Shaw and Vilim, "IBM ILOG CP Optimizer for Scheduling"
(Constraints 23, 2018) and the CP-SAT job-shop examples:

* ``p[t,d]`` a literal per task and allowed device, exactly one true (a pool
  of interchangeable devices counts as one, below);
  ``s[t]`` the start and ``e[t] = s[t] + sum_d time[t][d] p[t,d]`` the end;
* an optional interval of length ``time[t][d]`` present iff ``p[t,d]``, and
  ``NoOverlap`` over each device's intervals;
* per edge ``u -> v``: ``s[v] >= e[u]``, and ``s[v] >= e[u] + comm(e,a,b)``
  enforced by ``p[u,a] and p[v,b]``, or one ``same`` literal where the
  transfer costs the same between any two devices; a pair without a route
  is forbidden; with the makespan objective and every transfer uniform, each
  device's idle time before its first task and after its last
  (:mod:`~mapper.mapping.exact.cpsat_transfers`); on forks and joins, a
  fixed order of the tasks on each device and the bounds it gives
  (:mod:`~mapper.mapping.exact.cpsat_orders`);
* ``memory``/``area``: ``sum_t footprint[t] p[t,d] <= capacity[d]``;
* a class of interchangeable devices between which no edge costs a transfer
  (:func:`~mapper.mapping.orders.pooled_classes`: identical processors
  without communication, as in P|prec|Cmax) is one pool of ``k`` devices:
  one literal and interval per task, a ``Cumulative`` of capacity ``k`` in
  place of the ``k`` no-overlaps, and no ``k!`` relabelled copies of each
  schedule to search; the answer's devices follow from its starts
  (:func:`assign_pools`);
* objectives as in :mod:`mapper.mapping.objectives`: makespan (``Cmax >= e[t]``
  for sinks), energy (``sum energy[t][d] p[t,d]``), throughput under the
  ``device-load`` and ``1f1b`` models (per-device loads with one literal per
  edge and device pair for the transfers), deadline (the largest tardiness
  ``T >= 0``, ``T >= e[t] - deadline[t]``); a makespan bound caps ``Cmax``.

CP-SAT works on integers: times are scaled so the upper bound ``U`` is
:data:`SCALE` units and rounded *down*, so the model is a relaxation and its
bound, scaled back, is a valid lower bound; the caller re-times the answer
with the exact times (a path of ``n`` tasks and edges loses under ``2n``
units, ``2n / SCALE`` of ``U``). Searches of one worker each with a fixed
seed, two side by side where there are two cores (:func:`solve_cpsat`).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:
    class _Deferred:
        """OR-Tools' ``cp_model``, imported at its first use: loading it (and pandas with it) takes
        half a second, which a compile that never runs CP-SAT should not pay."""

        def __getattr__(self, name: str) -> Any:
            import ortools.sat.python.cp_model as module

            globals()["cp_model"] = module
            return getattr(module, name)

    cp_model = _Deferred()

from mapper.costing.cost import INF, CostTable
from mapper.mapping.exact.cpsat_orders import add_fixed_orders, fork_join_parts, precedence_order
from mapper.mapping.exact.cpsat_transfers import add_idle_times, add_transfers, every_transfer_uniform
from mapper.mapping.orders import allowed_devices, canonical_devices, identical_device_classes, pooled_classes
from mapper.mapping.pipeline import pipelined

#: Model time units per upper bound (rounding loses at most 2n units on a path).
SCALE = 2**30
#: Energy and area are scaled to integers with this many units per reference value.
VALUE_SCALE = 2**30
#: The searches run side by side where there are two cores: CP-SAT's default
#: search (the first, and the only one on one core) and its portfolio of
#: heuristics with quick restarts, which proves Standard Task Graph optima the
#: default misses in 15 s (benchmarks/stg.py) but finds worse schedules on
#: graphs with transfers (benchmarks/exact_backends.py).
STRATEGIES = ("default", "quick-restart")
#: Seconds at least that the first search gets, after another proved an
#: answer, to find that answer itself (:func:`_race`).
GRACE = 1.0


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
    gave_up: bool = False  # ended at ``patience``, no search having found a solution
    pools: tuple[tuple[int, ...], ...] = ()  # device classes the model pooled


def solve_cpsat(cost: CostTable, objective: str, upper: float, *, memory: bool, area: bool,
                makespan_bound: float | None, hint: tuple[Sequence[int], Sequence[float]] | None,
                time_limit: float, seed: int, micro_batches: int = 1,
                progress: Callable[[float, float | None, float | None], None] | None = None,
                stop: Callable[[], bool] | None = None, target: float | None = None,
                patience: float | None = None) -> CpSolved:
    """Build and solve the model (module docstring). ``upper`` bounds the
    makespan of an optimal schedule (the best heuristic's, or a serial bound);
    the search stops at a solution whose value meets ``target`` (a lower bound
    the caller knows), and after ``patience`` seconds when no search has
    found a solution by then (on large models even the hint's takes seconds).

    Where there are two cores, the searches of :data:`STRATEGIES` run side by
    side, one worker each, from the same hint (:func:`_race`); the answer
    does not depend on which one proves first."""
    built = _build(cost, objective, upper, memory=memory, area=area, makespan_bound=makespan_bound, hint=hint,
                   micro_batches=micro_batches)
    if built is None:
        return CpSolved("infeasible", None, None, None, None, 0, 0)
    n_lits, n_cons = built.n_literals, len(built.model.proto.constraints)
    t0 = time.perf_counter()
    cap = None if target is None else math.floor(target * built.obj_k * (1 + 1e-9))
    shared = _Shared(progress, t0, built.obj_k)
    runs = [_Run(built, name, seed, cap, shared) for name in (STRATEGIES if _cores() >= 2 else STRATEGIES[:1])]
    gave_up = _race(runs, t0 + max(0.01, time_limit), stop, None if patience is None else t0 + patience)
    if any(r.status == cp_model.INFEASIBLE for r in runs):
        return CpSolved("infeasible", None, None, None, None, n_lits, n_cons)
    found = [r for r in runs if r.value is not None]
    optimum = next((r.value for r in runs if r.status == cp_model.OPTIMAL), None)
    if cap is not None and any(r.value <= cap for r in found if r.value is not None):
        limit: int | None = cap  # the caller's bound is met: optimal, whatever the model's optimum
        status, bound = "feasible", None
    elif optimum is not None:
        limit, status, bound = optimum, "optimal", optimum / built.obj_k
    else:
        limit, status = None, "feasible"
        bounds = [r.bound for r in runs if r.bound is not None]
        bound = max(bounds) / built.obj_k if bounds else None
    if not found:
        return CpSolved("none", None, None, None, bound, n_lits, n_cons, gave_up, built.pools)
    # proven: the first strategy's first solution within the limit (the others' only when
    # it found none in time); else the best (ties: the first strategy's)
    best = next(r for r in found if r.value is not None and r.value <= limit) if limit is not None \
        else min(found, key=lambda r: r.value or 0)
    return CpSolved(status, best.device, best.start, (best.value or 0) / built.obj_k, bound, n_lits, n_cons,
                    gave_up, built.pools)


def _cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(slots=True)
class _Built:
    """A built model and what reading its answer needs."""

    model: cp_model.CpModel
    p: dict[tuple[int, int], cp_model.IntVar]
    start: list[cp_model.IntVar]  # empty when the objective needs no times
    k: float  # model ticks per second
    obj_k: float  # objective units per caller unit
    n_literals: int
    n_tasks: int
    n_devices: int
    pools: tuple[tuple[int, ...], ...]  # device classes modelled as one pool
    lengths: dict[tuple[int, int], int]  # (task, device in the model) -> ticks


def _build(cost: CostTable, objective: str, upper: float, *, memory: bool, area: bool,
           makespan_bound: float | None, hint: tuple[Sequence[int], Sequence[float]] | None,
           micro_batches: int) -> _Built | None:
    """The model (module docstring), None when a task has no device."""
    n, nd = cost.n_tasks, cost.n_devices
    timed = objective in ("makespan", "deadline") or makespan_bound is not None
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
        """``x`` seconds in model ticks; past the horizon, one tick past it: no schedule within the
        horizon holds it, and CP-SAT's 64-bit coefficients never overflow (a latency of 10^9 s)."""
        y = x * k
        return horizon + 1 if y > horizon else int(math.floor(y))

    m = cp_model.CpModel()
    p: dict[tuple[int, int], cp_model.IntVar] = {}
    classes = identical_device_classes(cost)
    pools = pooled_classes(cost, classes, lambda c: ticks(c) == 0) if _pools_apply(objective, memory, area) else ()
    pooled = {d: members[0] for members in pools for d in members}  # a pool's device -> the one in the model
    apart = tuple(c for c in classes if c not in pools)  # interchangeable, but each device in the model
    lengths: dict[tuple[int, int], int] = {}
    start = [m.new_int_var(0, horizon, f"s{t}") for t in range(n)] if timed else []
    end = [m.new_int_var(0, horizon, f"e{t}") for t in range(n)] if timed else []
    by_device: list[list] = [[] for _ in range(nd)]
    spans: list = []  # each task's interval on whichever device runs it, for the cumulative below
    for t in range(n):
        feas = tuple(dict.fromkeys(pooled.get(d, d) for d in allowed_devices(cost, t)))
        if memory:
            feas = tuple(d for d in feas if cost.footprint[t] <= cost.memory_capacity[d])
        if area:
            feas = tuple(d for d in feas if cost.platform.devices[d].kind != "fpga"
                         or cost.area[t][d] <= cost.area_capacity[d])
        if not feas:
            return None
        dur = []
        for d in feas:
            lit = p[t, d] = m.new_bool_var(f"p{t}_{d}")
            length = lengths[t, d] = ticks(cost.time[t][d])
            if timed:
                by_device[d].append(m.new_optional_fixed_size_interval_var(start[t], length, lit, f"i{t}_{d}"))
            dur.append((lit, length))
        m.add_exactly_one(lit for lit, _ in dur)
        if timed:
            choices = [length for _, length in dur]
            size = m.new_int_var(min(choices), max(choices), f"d{t}")
            m.add(size == sum(length * lit for lit, length in dur))
            spans.append(m.new_interval_var(start[t], size, end[t], f"span{t}"))  # end = start + size
    pool_size = {members[0]: len(members) for members in pools}
    for d in range(nd):
        if d in pool_size and len(by_device[d]) > pool_size[d]:
            m.add_cumulative(by_device[d], [1] * len(by_device[d]), pool_size[d])
        elif d not in pool_size and len(by_device[d]) > 1:
            m.add_no_overlap(by_device[d])
    if timed and nd > 1:
        # redundant: at most nd tasks run at once; its energetic reasoning (Baptiste,
        # Le Pape and Nuijten, "Constraint-Based Scheduling", 2001, ch. 3) proves
        # bounds that the per-device no-overlaps, one at a time, cannot
        m.add_cumulative(spans, [1] * n, nd)
    parts = fork_join_parts(cost)
    break_symmetry(m, p, apart, precedence_order(cost, parts))
    # throughput: a literal per edge and device pair that pays a transfer, for the loads below
    same, pair = add_transfers(m, p, start if timed else None, end, cost, ticks, nd,
                               pairs=objective == "throughput")
    for enabled, weight, capacity, fpga_only in (
            (memory, lambda t, d: cost.footprint[t], cost.memory_capacity, False),
            (area, lambda t, d: cost.area[t][d], cost.area_capacity, True)):
        if not enabled:
            continue
        for d in range(nd):
            if capacity[d] == INF or (fpga_only and cost.platform.devices[d].kind != "fpga"):
                continue
            unit = VALUE_SCALE / capacity[d] if capacity[d] > 0 else 1.0
            terms = [(math.ceil(weight(t, d) * unit), p[t, d]) for t in range(n) if (t, d) in p]
            if terms:
                m.add(sum(c * lit for c, lit in terms) <= int(capacity[d] * unit))
    cmax = m.new_int_var(0, horizon, "cmax")
    if timed:
        m.add_max_equality(cmax, [end[t] for t in range(n) if not cost.graph.succs[t]])
    if timed and nd > 1:
        add_fixed_orders(m, p, start, end, cmax, lengths, cost, ticks, [d for d in range(nd) if d not in pool_size],
                         parts)
    if objective == "makespan" and nd > 1 and every_transfer_uniform(cost, p, same, ticks):
        add_idle_times(m, p, start, end, cmax, lengths, same, cost, ticks,
                       [d for d in range(nd) if d not in pool_size and any((t, d) in p for t in range(n))], horizon)
    if makespan_bound is not None:
        slack = 0 if k == 1.0 and horizon < SCALE else 2 * n + 1  # rounding slack; the re-timed schedule is checked
        m.add(cmax <= ticks(makespan_bound) + slack)
    obj_k = k
    if objective == "makespan":
        m.minimize(cmax)
    elif objective == "deadline":
        # the largest tardiness: at least 0 and at least each deadline task's end past its deadline
        tard = m.new_int_var(0, horizon, "tardiness")
        for task in cost.graph.tasks:
            if task.deadline is not None:
                m.add(tard >= end[task.index] - math.ceil(task.deadline * k))  # rounded up: a relaxation
        m.minimize(tard)
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
            m.minimize(pipelined(sum(loads), period, micro_batches))
            obj_k = k * micro_batches
        else:
            m.minimize(period)
    if hint is not None:
        device, starts = hint
        device = canonical_devices(tuple(pooled.get(d, d) for d in device), apart)
        for (t, d), lit in p.items():
            m.add_hint(lit, 1 if device[t] == d else 0)
        for t in range(n):
            if timed:
                m.add_hint(start[t], min(horizon, ticks(starts[t])))
    return _Built(m, p, start, k, obj_k, len(p) + len(pair), n, nd, pools, lengths)


class _Shared:
    """Progress shared by the searches: each improvement reported once."""

    def __init__(self, progress: Callable[[float, float | None, float | None], None] | None, t0: float,
                 obj_k: float) -> None:
        self.progress, self.t0, self.obj_k = progress, t0, obj_k
        self.best: float | None = None
        self.lock = threading.Lock()

    def report(self, value: float, bound: float) -> None:
        with self.lock:
            if self.best is not None and value >= self.best:
                return
            self.best = value
            if self.progress is not None:
                self.progress(time.perf_counter() - self.t0, value / self.obj_k, bound / self.obj_k)


class _Run:
    """One single-worker search of the model with one of :data:`STRATEGIES`;
    it stops at its first solution within ``cap`` (model units), which
    :func:`_race` may lower while it runs."""

    def __init__(self, built: _Built, strategy: str, seed: int, cap: int | None, shared: _Shared) -> None:
        self.built, self.cap, self.shared = built, cap, shared
        self.solver = _solver(strategy, seed)
        self.status: cp_model.CpSolverStatus | None = None
        self.incumbent: int | None = None  # while it runs
        self.value: int | None = None
        self.bound: float | None = None
        self.device: tuple[int, ...] | None = None
        self.start: tuple[float, ...] | None = None
        self.done = threading.Event()
        self.cancelled = False
        self.error: Exception | None = None  # what its solve raised

    def solve(self, deadline: float) -> None:
        """Search until ``deadline`` (a :func:`time.perf_counter` value), a
        proof, a solution within ``cap``, or :meth:`cancel`."""
        try:
            if self.cancelled:
                return
            self.solver.parameters.max_time_in_seconds = max(0.01, deadline - time.perf_counter())
            run = self

            class _Watch(cp_model.CpSolverSolutionCallback):
                def on_solution_callback(self) -> None:
                    value = int(round(self.objective_value))
                    run.incumbent = value
                    run.shared.report(self.objective_value, self.best_objective_bound)
                    if run.cancelled or (run.cap is not None and value <= run.cap):
                        self.stop_search()

            self.status = status = self.solver.solve(self.built.model, _Watch())
            b, solver = self.built, self.solver
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                self.value = int(round(solver.objective_value))
                self.bound = solver.best_objective_bound
                device = tuple(next(d for d in range(b.n_devices) if (t, d) in b.p
                                    and solver.boolean_value(b.p[t, d])) for t in range(b.n_tasks))
                ticks = [solver.value(s) for s in b.start]
                if b.pools:
                    device = assign_pools(device, ticks, b.lengths, b.pools)
                self.device = device
                self.start = tuple(x / b.k for x in ticks) if b.start else None
        except Exception as exc:  # on its own thread: kept for the caller of _race to raise
            self.error = exc
        finally:
            self.done.set()

    def proof(self) -> int | None:
        """The value it proved (its optimum, or a solution within ``cap``),
        None while it has not (or when it proved the model infeasible)."""
        if self.status == cp_model.OPTIMAL:
            return self.value
        if self.cap is not None and self.value is not None and self.value <= self.cap:
            return self.cap
        return None

    def cancel(self) -> None:
        self.cancelled = True
        self.solver.stop_search()


def _race(runs: list[_Run], deadline: float, stop: Callable[[], bool] | None,
          give_up: float | None = None) -> bool:
    """Run the searches side by side until each ends, each on a thread of its
    own while the calling thread waits in Python, where signal handlers run: a
    SIGTERM or Ctrl-C that ends the process cancels and joins every search on
    its way out, instead of waiting for the first one's time limit.

    Each search is deterministic, but which one proves first is not. So when
    one proves a value, the searches after it stop, and those before it run
    on until their first solution within that value, for as long again as
    the proof took (at least :data:`GRACE` seconds, at most to ``deadline``):
    the answer is then the first strategy's, as if it had run alone, unless it
    finds none in that time. ``stop()`` ends them all, and so does ``give_up``
    (a :func:`time.perf_counter` value) when no search has found a solution
    by then; returns whether that happened."""
    helpers = [threading.Thread(target=r.solve, args=(deadline,), daemon=True) for r in runs]
    quit_ = threading.Event()
    t0 = time.perf_counter()
    grace_end: list[float] = []  # when the searches before a proven one stop
    idled: list[bool] = []

    def watch() -> None:  # solution callbacks come only with solutions: poll between them too
        while not quit_.wait(0.02):
            now = time.perf_counter()
            idle = give_up is not None and now >= give_up and all(r.incumbent is None for r in runs)
            if idle and not idled:
                idled.append(True)
            if (stop is not None and stop()) or (grace_end and now >= grace_end[0]) or idle:
                for r in runs:
                    r.cancel()
                continue
            for i, r in enumerate(runs):
                if r.done.is_set() and r.status == cp_model.INFEASIBLE:
                    for other in runs:
                        other.cancel()
                value = r.proof() if r.done.is_set() else None
                if value is None:
                    continue
                for other in runs[i + 1:]:
                    other.cancel()
                if not grace_end:
                    grace_end.append(now + max(GRACE, now - t0))
                for other in runs[:i]:
                    other.cap = value if other.cap is None else min(other.cap, value)
                    if other.incumbent is not None and other.incumbent <= value:
                        other.cancel()  # it already has that solution: its first within the value
                break

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    for h in helpers:
        h.start()
    try:
        while not runs[0].done.wait(0.05):
            pass
    finally:
        for r in runs:  # the first is done (its time is up, or it proved its answer), or the process ends
            if r.done.is_set():
                continue
            r.cancel()
            while not r.done.wait(0.05):  # a stop sent before its solve began would be lost: send it again
                r.cancel()
        for h in helpers:
            h.join()
        quit_.set()
        watcher.join()
    error = getattr(runs[0], "error", None)
    if error is not None:
        raise error
    return bool(idled)


def _solver(strategy: str, seed: int) -> cp_model.CpSolver:
    """A one-worker solver with the fixed seed for ``strategy``."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    if strategy == "quick-restart":
        # CP-SAT's portfolio of heuristics with quick restarts
        solver.parameters.search_branching = cp_model.PORTFOLIO_WITH_QUICK_RESTART_SEARCH
    # the cumulative's overload checking and timetable edge finding (Vilim, CPAIOR
    # 2011): off by default in CP-SAT, they prove the STG set's 4-processor optima
    solver.parameters.use_overload_checker_in_cumulative = True
    solver.parameters.use_timetable_edge_finding_in_cumulative = True
    solver.parameters.random_seed = int(seed) % 2**31
    # Ctrl-C is the caller's (``stop``): CP-SAT's own SIGINT handler would leave
    # SIGINT ignored in this process, and so in every process it starts later
    solver.parameters.catch_sigint_signal = False
    return solver


def model_terms(cost: CostTable, objective: str, memory: bool, area: bool) -> int:
    """About how large the model is: a literal per task and device, and a
    conditional transfer constraint per edge and pair of devices, where a
    pool (:func:`~mapper.mapping.orders.pooled_classes`) counts as one device."""
    pools = pooled_classes(cost, identical_device_classes(cost)) if _pools_apply(objective, memory, area) else ()
    m = cost.n_devices - sum(len(c) - 1 for c in pools)
    return cost.n_tasks * m + len(cost.graph.edges) * m * (m - 1)


def _pools_apply(objective: str, memory: bool, area: bool) -> bool:
    """Pools need the makespan objective (the throughput models weigh each
    device's load) and no per-device memory or area budget."""
    return objective == "makespan" and not memory and not area


def assign_pools(device: Sequence[int], start: Sequence[int], lengths: dict[tuple[int, int], int],
                 pools: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """Devices for a pooled answer: each pool's tasks (``device`` holds the
    pool's first device) in order of start, each to the lowest free device of
    the pool. An interval graph is coloured by as many colours as it has
    intervals at one point, and this greedy order does so (Golumbic,
    "Algorithmic Graph Theory and Perfect Graphs", 1980, ch. 8). A
    zero-length task, which the cumulative does not count, may find every
    device busy: it goes to the first one free, and re-timing delays it."""
    out = list(device)
    for members in pools:
        rep = members[0]
        tasks = sorted((t for t, d in enumerate(device) if d == rep),
                       key=lambda t: (start[t], start[t] + lengths[t, rep], t))
        free = [0] * len(members)  # the tick each device of the pool is free from
        for t in tasks:
            k = next((i for i, f in enumerate(free) if f <= start[t]), None)
            if k is None:
                k = min(range(len(members)), key=lambda i: (free[i], i))
            free[k] = max(free[k], start[t] + lengths[t, rep])
            out[t] = members[k]
    return tuple(out)


def break_symmetry(m: cp_model.CpModel, p: dict[tuple[int, int], cp_model.IntVar], classes: tuple[tuple[int, ...], ...],
                   order: Sequence[int]) -> None:
    """Value precedence over each class of interchangeable devices (Law and
    Lee, "Global constraints for integer and set value precedence", CP 2004):
    in ``order`` (:func:`~mapper.mapping.exact.cpsat_orders.precedence_order`),
    a task may use the class's ``i+1``-th device only once some earlier task
    uses its ``i``-th, which keeps one of every ``k!`` relabelled copies of a
    schedule."""
    for members in classes:
        used: list[cp_model.IntVar | None] = [None] * len(members)  # some earlier task is on members[i]
        for t in order:
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


def solve_limits(feasible: Sequence[Sequence[int]], nets: Sequence[Sequence[int]], tasks: Sequence[float],
                 inbound: Sequence[float], hint: Sequence[int], seconds: float,
                 seed: int) -> tuple[str, list[int]]:
    """An assignment within per-device task counts and distinct inbound nets (``nets[i]``: producer
    first): ``x[t,d]`` places task ``t``, ``y[i,d] >= x[c,d] - x[p,d]`` for each consumer ``c`` marks net
    ``i`` entering ``d``. ``("feasible", device)``, ``("infeasible", [])`` or ``("unknown", [])``."""
    m = cp_model.CpModel()
    nd = len(tasks)
    x = [{d: m.new_bool_var("") for d in feas} for feas in feasible]
    for t, row in enumerate(x):
        m.add_exactly_one(row.values())
        if hint[t] in row:
            m.add_hint(row[hint[t]], 1)
    for d in range(nd):
        if math.isfinite(tasks[d]):
            m.add(sum(row[d] for row in x if d in row) <= int(tasks[d]))
        if math.isfinite(inbound[d]):
            ys = []
            for pins in nets:
                consumers = [x[c][d] for c in pins[1:] if d in x[c]]
                if consumers:
                    y = m.new_bool_var("")
                    own = x[pins[0]].get(d)
                    for c in consumers:
                        m.add(y >= c - own) if own is not None else m.add(y >= c)
                    ys.append(y)
            m.add(sum(ys) <= int(inbound[d]))
    solver = _solver("default", seed)
    solver.parameters.max_time_in_seconds = max(0.1, seconds)
    status = solver.Solve(m)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return "feasible", [next(d for d, v in row.items() if solver.Value(v)) for row in x]
    return ("infeasible", []) if status == cp_model.INFEASIBLE else ("unknown", [])
