"""Exact mapping by mixed-integer linear programming (the only PuLP user).

The model is the delay model of DESIGN.md section 3, written as a MILP in the
style of Venugopalan & Sinnen, "ILP formulations for optimal task scheduling
with communication delays on parallel systems", IEEE TPDS 26(1), 2015, with the
device-load (bottleneck) throughput model of Wilhelm et al., arXiv 2208.06321.

Variables and constraints (``F(t)`` = devices where task ``t`` has a finite
time and its placement allows it):

* ``x[t,d]`` binary for ``d in F(t)`` only; ``sum_d x[t,d] = 1``.
* ``s[t] >= 0`` start time; duration ``p[t] = sum_d time[t][d] x[t,d]``.
* Edge ``e = u->v``: placement products ``z[e,a,b] = x[u,a] x[v,b]`` in
  ``[0, 1]`` for every pair with finite transfer time, linearised by the
  aggregated (transportation) equalities ``sum_b z[e,a,b] = x[u,a]`` and
  ``sum_a z[e,a,b] = x[v,b]``. With binary ``x`` these force ``z`` to the exact
  product, with no big-M; a pair without a route has no ``z`` and so is
  forbidden. ``comm[e] = sum_{a != b} comm(e,a,b) z[e,a,b]`` and
  ``s[v] >= s[u] + p[u] + comm[e]``.
* Non-overlap: ``o[i,j]`` binary only for pairs that the transitive closure of
  the graph leaves unordered and that share a feasible device. For each
  shared device ``d``::

      s[j] >= s[i] + time[i][d] - M (1 - o[i,j]) - M (2 - x[i,d] - x[j,d])
      s[i] >= s[j] + time[j][d] - M o[i,j]       - M (2 - x[i,d] - x[j,d])

  so the disjunction binds only when both tasks are on ``d``. ``U`` is an
  upper bound on the makespan (the best heuristic's makespan, or a serial
  bound) and ``Cmax <= U`` is a constraint, so every kept solution has
  ``head[t] <= s[t] <= L[t] = U - minp[t] - tail[t]`` (``head``/``tail``:
  longest paths of minimum times before/after ``t``); these are the bounds of
  ``s``, and each row's ``M = L[i] + time[i][d] - head[j]`` (resp. with
  ``i``, ``j`` swapped). This is exact: a relaxed row then never cuts off a
  kept solution, and an optimal schedule has makespan ``<= U``, so it stays
  in the model.
* Makespan: ``Cmax >= s[t] + p[t]`` for sinks, and the valid device-load
  cuts ``Cmax >= h + q + sum_{t: head[t] >= h, tail[t] >= q} time[t][d] x[t,d]``
  for every device ``d`` and ``(h, q)`` in ``{(0, 0)} U {(head[t], 0)} U
  {(0, tail[t])}`` (those tasks all run on ``d`` after ``h`` and end at least
  ``q`` before ``Cmax``).
* Symmetry breaking among interchangeable devices only (equal time, energy,
  area columns, capacities, device data, and route data invariant under the
  swap): within a class ``c1 < c2 < ...`` a task may use ``c_k`` only if a
  lower-indexed task uses ``c_{k-1}`` (classes are ordered by their lowest
  task index), which keeps one representative of each permutation.
* ``memory``/``area`` options: ``sum_t footprint[t] x[t,d] <= memory[d]`` and
  ``sum_t area[t][d] x[t,d] <= area_capacity[d]``.

Times enter the model scaled so that ``U`` is :data:`TIME_SCALE` (and energy
so that the worst assignment is), so HiGHS's absolute tolerances mean the
same for microsecond kernels and hour-long jobs.

Energy and throughput objectives follow :mod:`mapper.mapping.objectives`.
When neither the objective nor a makespan bound involves time, the model
drops the time variables (the assignment alone decides the value).

The solution is re-timed by :func:`mapper.schedule.build_schedule` with each
device's order sorted by MILP start time, and validated. HiGHS runs with one
thread, a fixed seed, a warm start from the best heuristic (checked: the
solver reports it as its first incumbent), and the time limit; PuLP's
bundled CBC only when HiGHS is unavailable. Status ``optimal`` when the
solver proves it (and the options are ones the model covers: contention and
streaming are applied only when re-timing), else ``feasible``; ``heuristic``
when the solver gave nothing better than the best heuristic's schedule.
Above :data:`LNS_FIRST_TASKS` tasks, MILP-window LNS (:mod:`.lns`) first
improves the warm start for half the time limit. Graphs above
:data:`EXACT_MAX_TASKS` tasks or :data:`EXACT_MAX_PAIRS` ordering binaries go
to :func:`mapper.mapping.lns.map_large` instead (no exact model).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pulp

from mapper.cost import INF, CostTable
from mapper.errors import InfeasibleError, MapperError, OptionsError
from mapper.mapping.base import OBJECTIVES, Mapper, MapOptions, MapResult, Progress
from mapper.mapping.orders import (
    allowed_devices,
    canonical_devices,
    chain_arcs,
    closure,
    count_order_pairs,
    dag_arcs,
    head_tail,
    identical_device_classes,
    order_from_starts,
)
from mapper.schedule import Assignment, Schedule, ScheduleOptions

#: Above this many tasks the exact model is not attempted (LNS instead).
EXACT_MAX_TASKS = 60
#: Above this many ordering binaries the exact model is not attempted.
EXACT_MAX_PAIRS = 1500
#: Above this many tasks, LNS first improves the warm start for
#: :data:`LNS_SHARE` of the time limit (benchmarks/mapping.py: at 30-50 tasks
#: 10 s of LNS beat 20 s of the full model on most graphs).
LNS_FIRST_TASKS = 20
LNS_SHARE = 0.5
#: HiGHS relative gap at which a solve counts as optimal.
MIP_REL_GAP = 1e-6
#: Up to this many binaries HiGHS runs without its RINS/RENS sub-MIP
#: heuristics: on small models branching alone proves optimality sooner
#: (HEFT paper example: about 2x faster, measured).
SMALL_MODEL_BINARIES = 100
NO_SUB_MIPS = {"mip_heuristic_run_rins": False, "mip_heuristic_run_rens": False}
#: The makespan bound maps to this many model time units (see ``_Model``).
TIME_SCALE = 1000.0
#: Relative tolerance when comparing objective values.
REL_TOL = 1e-6


def _is_fpga(cost: CostTable, d: int) -> bool:
    """Area capacity applies to FPGAs only (as in the schedule builder)."""
    return cost.platform.devices[d].kind == "fpga"


# -- objectives as linear terms --------------------------------------------
def objective_needs_time(objective: str, makespan_bound: float | None) -> bool:
    return objective == "makespan" or makespan_bound is not None


# -- the subproblem ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Subproblem:
    """A (possibly partial) mapping problem for :func:`solve`.

    Tasks in ``free`` get new devices and orders; every other task keeps
    ``device[t]`` and its relative order from ``start`` on that device.
    ``device``/``start`` also form the warm start (``None``: no incumbent,
    only allowed when ``free`` is every task); ``start_value`` is its
    objective value. ``upper`` bounds the makespan of the solutions sought
    (the big-M): the incumbent's makespan for the makespan objective, the
    makespan bound otherwise (unused by time-free models). ``flow_weight``
    (makespan objective only) adds that multiple of the sum of all finish
    times, a tie-breaker LNS uses to pull work earlier. Fixed tasks that end
    by ``frozen_before`` keep their start times, free tasks must end by
    ``horizon`` and fixed tasks that start after it stay after it (smaller
    neighbourhoods for LNS; the start solution must satisfy them).
    """

    cost: CostTable
    objective: str
    free: tuple[int, ...]
    device: tuple[int, ...] | None
    start: tuple[float, ...] | None
    upper: float
    time_limit: float
    seed: int = 0
    memory: bool = False
    area: bool = False
    makespan_bound: float | None = None
    symmetry: bool = True
    start_value: float | None = None
    flow_weight: float = 0.0
    frozen_before: float | None = None
    horizon: float | None = None
    stop: Callable[[], bool] | None = field(default=None, compare=False)  # polled; True ends the search


@dataclass(frozen=True, slots=True)
class Solved:
    """What a MILP solve produced. ``status``: optimal | feasible | none | infeasible."""

    status: str
    device: tuple[int, ...] | None
    start: tuple[float, ...] | None
    order: tuple[tuple[int, ...], ...] | None
    objective: float | None
    bound: float | None
    warm_start_taken: bool
    solve_time: float
    n_binaries: int
    n_constraints: int


class _HighsWarm(pulp.HiGHS):
    """PuLP's in-process HiGHS plus a MIP start (``setSolution``) and
    callbacks for progress; PuLP 3.3's own ``HiGHS`` ignores warm starts."""

    def __init__(self, start: dict[str, float] | None, on_event, periodic: bool, stop=None, **kwargs):
        super().__init__(**kwargs)
        self.start = start
        self.on_event = on_event
        self.periodic = periodic
        self.stop = stop
        self.first_incumbent: float | None = None

    def actualSolve(self, lp):  # noqa: N802 - PuLP's name
        self.createAndConfigureSolver(lp)
        self.buildSolverModel(lp)
        model = lp.solverModel
        if self.start:
            cols = [(v.index, self.start[v.name]) for v in lp.variables() if v.name in self.start]
            idx = np.array([c for c, _ in cols], dtype=np.int32)
            val = np.array([x for _, x in cols], dtype=np.float64)
            model.setSolution(len(cols), idx, val)

        def improving(event) -> None:
            out = event.data_out
            if self.first_incumbent is None:
                self.first_incumbent = float(out.objective_function_value)
            self.on_event(out.running_time, out.objective_function_value, out.mip_dual_bound, True)

        def interrupt(event) -> None:
            if self.stop is not None and self.stop():
                event.data_in.user_interrupt = True  # HiGHS ends the search, keeping its incumbent
            if self.periodic:
                out = event.data_out
                self.on_event(out.running_time, out.mip_primal_bound, out.mip_dual_bound, False)

        model.cbMipImprovingSolution.subscribe(improving)
        if self.periodic or self.stop is not None:
            model.cbMipInterrupt.subscribe(interrupt)
        self.callSolver(lp)
        status, sol_status = self.findSolutionValues(lp)
        lp.assignStatus(status, sol_status)
        return status


#: Whether PuLP's in-process HiGHS (highspy) can be used; else bundled CBC.
HIGHS_AVAILABLE = bool(pulp.HiGHS().available())


def _highs_outcome(model, first_incumbent):
    """``(status name, has solution, dual bound, first incumbent)`` from highspy."""
    info = model.getInfo()
    name = str(model.getModelStatus()).rsplit(".", 1)[-1]
    bound = float(info.mip_dual_bound) if math.isfinite(info.mip_dual_bound) else None
    first = None if first_incumbent is None else float(first_incumbent)
    return name, info.primal_solution_status == 2, bound, first


def _cbc(prob, start_vals: dict[str, float] | None, limit: float, seed: int):
    """PuLP's bundled CBC through ``COIN_CMD`` (used only without HiGHS)."""
    if start_vals:
        for var in prob.variables():
            if var.name in start_vals:
                var.setInitialValue(start_vals[var.name])
    return pulp.COIN_CMD(
        path=pulp.PULP_CBC_CMD.pulp_cbc_path,
        msg=False,
        threads=1,
        timeLimit=limit,
        gapRel=MIP_REL_GAP,
        warmStart=bool(start_vals),
        options=[f"randomCbcSeed {int(seed) % 2147483647 + 1}"],
    )


def _value(var) -> float:
    return float(var.varValue) if var.varValue is not None else float(var.lowBound or 0.0)


def _lin(terms: dict, const: float = 0.0) -> pulp.LpAffineExpression:
    return pulp.LpAffineExpression(terms, constant=const)


def _add(terms: dict, var, coef: float) -> None:
    if coef:
        terms[var] = terms.get(var, 0.0) + coef


class _Infeasible(Exception):
    """The subproblem is infeasible before solving (no device, full capacity)."""


class _Model:
    """The MILP of one :class:`Subproblem`, built family by family (see the
    module docstring); fixed tasks enter as constants."""

    def __init__(self, sub: Subproblem) -> None:
        self.sub = sub
        self.cost = cost = sub.cost
        self.n, self.nd = cost.n_tasks, cost.n_devices
        self.free = frozenset(sub.free)
        self.all_free = len(self.free) == self.n
        self.fixed_dev = {t: sub.device[t] for t in range(self.n) if t not in self.free} if sub.device else {}
        self.timed = objective_needs_time(sub.objective, sub.makespan_bound)
        upper = sub.upper if sub.makespan_bound is None else min(sub.upper, sub.makespan_bound)
        # times are scaled so the makespan bound is TIME_SCALE: HiGHS's absolute
        # tolerances (1e-7 .. 1e-6) then mean the same for microseconds and hours
        self.k = TIME_SCALE / upper if 0 < upper < INF else 1.0
        self.upper = upper * self.k
        self.tt = tuple(tuple(x * self.k for x in row) for row in cost.time)
        if sub.objective == "energy":
            ref = sum(max((e for e, x in zip(er, tr) if x < INF), default=0.0) for er, tr in zip(cost.energy, cost.time))
            self.k_obj = TIME_SCALE / ref if 0 < ref < INF else 1.0
        else:
            self.k_obj = self.k
        self.prob = pulp.LpProblem("mapping", pulp.LpMinimize)
        self.x: dict[tuple[int, int], pulp.LpVariable] = {}
        self.z: dict[tuple[int, int, int], pulp.LpVariable] = {}
        self.s: dict[int, pulp.LpVariable] = {}
        self.o: dict[tuple[int, int], pulp.LpVariable] = {}
        self.cmax = self.period = None
        self.comm_terms: dict[int, tuple[dict, float]] = {}
        self.fixed_chain: tuple[tuple[int, int], ...] = ()
        self.classes: tuple[tuple[int, ...], ...] = ()
        self.obj_terms: dict = {}
        self.obj_const = 0.0

    def build(self) -> None:
        """All constraint families and the objective; raises :class:`_Infeasible`."""
        self.assignment()
        self.capacities()
        self.symmetry()
        self.transfers()
        if self.timed:
            self.timing()
        self.objective()

    # -- helpers ---------------------------------------------------------------
    def comm(self, e: int, a: int, b: int) -> float:
        """Scaled transfer time of edge ``e`` from ``a`` to ``b``."""
        c = self.cost.comm(e, a, b)
        return c * self.k if c < INF else INF

    def add_place(self, terms: dict, t: int, d: int, coef: float) -> float:
        """Add ``coef * [t on d]`` to ``terms``; returns its constant part."""
        if t in self.free:
            var = self.x.get((t, d))
            if var is not None:
                _add(terms, var, coef)
            return 0.0
        return coef if self.fixed_dev[t] == d else 0.0

    def duration(self, terms: dict, t: int, coef: float) -> float:
        """Add ``coef * p[t]`` to ``terms``; returns its constant part."""
        if t in self.free:
            for d in range(self.nd):
                if (t, d) in self.x:
                    _add(terms, self.x[t, d], coef * self.tt[t][d])
            return 0.0
        return coef * self.tt[t][self.fixed_dev[t]]

    def devices(self, t: int) -> frozenset[int]:
        if t in self.free:
            return frozenset(d for d in range(self.nd) if (t, d) in self.x)
        return frozenset((self.fixed_dev[t],))

    # -- families --------------------------------------------------------------
    def assignment(self) -> None:
        cost, sub = self.cost, self.sub
        for t in sorted(self.free):
            feas = allowed_devices(cost, t)
            if sub.memory:
                feas = tuple(d for d in feas if cost.footprint[t] <= cost.memory_capacity[d])
            if sub.area:
                feas = tuple(d for d in feas if not _is_fpga(cost, d) or cost.area[t][d] <= cost.area_capacity[d])
            if not feas:
                raise _Infeasible
            for d in feas:
                self.x[t, d] = self.prob.add_variable(f"x_{t}_{d}", 0, 1, pulp.LpBinary)
            self.prob += _lin({self.x[t, d]: 1.0 for d in feas}) == 1

    def capacities(self) -> None:
        cost, sub = self.cost, self.sub
        for enabled, weight, cap in (
            (sub.memory, lambda t, d: cost.footprint[t], cost.memory_capacity),
            (sub.area, lambda t, d: cost.area[t][d], cost.area_capacity),
        ):
            if not enabled:
                continue
            for d in range(self.nd):
                if cap[d] == INF or (cap is cost.area_capacity and not _is_fpga(cost, d)):
                    continue
                terms: dict = {}
                const = sum(self.add_place(terms, t, d, weight(t, d)) for t in range(self.n))
                if terms:
                    self.prob += _lin(terms, const) <= cap[d]
                elif const > cap[d] * (1 + REL_TOL):
                    raise _Infeasible

    def symmetry(self) -> None:
        """Interchangeable devices used in order of their lowest task index."""
        if not (self.all_free and self.sub.symmetry):
            return
        self.classes = identical_device_classes(self.cost)
        x = self.x
        for cls in self.classes:
            for prev, d in zip(cls, cls[1:]):
                for t in range(self.n):
                    if (t, d) in x:
                        terms = {x[t, d]: 1.0}
                        for u in range(t):
                            if (u, prev) in x:
                                _add(terms, x[u, prev], -1.0)
                        self.prob += _lin(terms) <= 0

    def transfers(self) -> None:
        """Transfer-time terms per edge; no-route pairs forbidden."""
        cost, x, nd = self.cost, self.x, self.nd
        for e in cost.graph.edges:
            u, v = e.src, e.dst
            if u not in self.free and v not in self.free:
                if self.timed:
                    self.comm_terms[e.index] = ({}, self.comm(e.index, self.fixed_dev[u], self.fixed_dev[v]))
                continue
            terms: dict = {}
            if u in self.free and v in self.free:
                self.products(e.index, u, v, terms)
            else:
                mover, anchor, outgoing = (u, self.fixed_dev[v], True) if u in self.free else (v, self.fixed_dev[u], False)
                for d in range(nd):
                    if (mover, d) in x:
                        c = self.comm(e.index, d, anchor) if outgoing else self.comm(e.index, anchor, d)
                        if c == INF:
                            self.prob += _lin({x[mover, d]: 1.0}) == 0
                        else:
                            _add(terms, x[mover, d], c)
            self.comm_terms[e.index] = (terms, 0.0)

    def products(self, ei: int, u: int, v: int, terms: dict) -> None:
        """``z[e,a,b] = x[u,a] x[v,b]`` by the aggregated linearisation."""
        cost, x, z = self.cost, self.x, self.z
        du, dv = sorted(self.devices(u)), sorted(self.devices(v))
        pairs = [(a, b) for a in du for b in dv if self.comm(ei, a, b) < INF]
        if not any(self.comm(ei, a, b) > 0 for a, b in pairs) and len(pairs) == len(du) * len(dv):
            return  # every pair allowed and free: no product needed
        for a, b in pairs:
            z[ei, a, b] = self.prob.add_variable(f"z_{ei}_{a}_{b}", 0, 1)
            if a != b:
                _add(terms, z[ei, a, b], self.comm(ei, a, b))
        for d in du:
            row = {z[ei, d, b]: 1.0 for a, b in pairs if a == d}
            _add(row, x[u, d], -1.0)
            self.prob += _lin(row) == 0
        for d in dv:
            row = {z[ei, a, d]: 1.0 for a, b in pairs if b == d}
            _add(row, x[v, d], -1.0)
            self.prob += _lin(row) == 0

    def timing(self) -> None:
        """Starts with head/tail bounds, precedence, fixed orders, disjunctions,
        and the makespan rows."""
        cost, sub, n, prob, k = self.cost, self.sub, self.n, self.prob, self.k
        frozen = self.frozen()
        after = self.after_horizon()
        hk = sub.horizon * k if sub.horizon is not None else INF
        if not self.all_free:
            fixed_order = order_from_starts(cost, sub.device, sub.start)
            self.fixed_chain = chain_arcs(fixed_order, frozenset(range(n)) - self.free)
        arcs = dag_arcs(cost) + self.fixed_chain
        devs = [self.devices(t) for t in range(n)]
        mint = [min(self.tt[t][d] for d in devs[t]) for t in range(n)]
        release = [sub.start[t] * k if t in frozen else hk if t in after else 0.0 for t in range(n)]
        head, tail = head_tail(n, arcs, mint, release)
        latest = [head[t] if t in frozen else max(head[t], self.upper - mint[t] - tail[t]) for t in range(n)]
        if hk < INF:
            for t in self.free:
                latest[t] = max(head[t], min(latest[t], hk - mint[t]))
        s = self.s
        for t in range(n):
            s[t] = prob.add_variable(f"s_{t}", head[t], latest[t])
        for e in cost.graph.edges:
            if e.src in frozen and e.dst in frozen:
                continue  # both at their current times, which satisfy it
            terms = {s[e.dst]: 1.0}
            _add(terms, s[e.src], -1.0)
            const = self.duration(terms, e.src, -1.0)
            cterms, cconst = self.comm_terms[e.index]
            for var, c in cterms.items():
                _add(terms, var, -c)
            prob += _lin(terms, const - cconst) >= 0
        for a, b in self.fixed_chain:
            if not (a in frozen and b in frozen):
                prob += _lin({s[b]: 1.0, s[a]: -1.0}, -self.tt[a][self.fixed_dev[a]]) >= 0
        if hk < INF:
            for t in sorted(self.free):
                terms = {s[t]: 1.0}
                prob += _lin(terms, self.duration(terms, t, 1.0)) <= hk
        self.disjunctions(closure(n, arcs), devs, head, latest, frozen, after)
        sinks = [t for t in range(n) if not cost.graph.succs[t]]
        if sub.objective != "makespan":
            for t in sinks:
                terms = {s[t]: 1.0}
                prob += _lin(terms, self.duration(terms, t, 1.0)) <= self.upper
            return
        cmax = self.cmax = prob.add_variable("cmax", 0, self.upper)
        for t in sinks:
            terms = {cmax: 1.0, s[t]: -1.0}
            prob += _lin(terms, self.duration(terms, t, -1.0)) >= 0
        # load cuts: the tasks on d with head >= h (tail >= q) run after h and end by Cmax - q
        # (every threshold for the exact model; the plain load for windows)
        for d in range(self.nd):
            on_d = [t for t in range(n) if d in devs[t]]
            cuts = {(0.0, 0.0)}
            if self.all_free:
                cuts |= {(head[t], 0.0) for t in on_d} | {(0.0, tail[t]) for t in on_d}
            for h, q in sorted(cuts):
                terms = {cmax: 1.0}
                const = -h - q
                for t in on_d:
                    if head[t] >= h and tail[t] >= q:
                        const += self.add_place(terms, t, d, -self.tt[t][d])
                prob += _lin(terms, const) >= 0

    def frozen(self) -> frozenset[int]:
        """Fixed tasks that end before ``sub.frozen_before``: kept at their times."""
        sub = self.sub
        if sub.frozen_before is None or sub.start is None:
            return frozenset()
        limit = sub.frozen_before * (1 + 1e-12)
        return frozenset(
            t for t in range(self.n)
            if t not in self.free and sub.start[t] + self.cost.time[t][self.fixed_dev[t]] <= limit
        )

    def after_horizon(self) -> frozenset[int]:
        """Fixed tasks that start at or after ``sub.horizon``: kept after it."""
        sub = self.sub
        if sub.horizon is None or sub.start is None:
            return frozenset()
        return frozenset(t for t in range(self.n) if t not in self.free and sub.start[t] >= sub.horizon)

    def disjunctions(self, reach, devs, head, latest, frozen, after) -> None:
        """Non-overlap of unordered pairs (one of them free) that may share a
        device; none where bounds already separate the two: a frozen task that
        ends before the other can start, or a free task (it ends by the
        horizon) and a task kept after the horizon."""
        time_, s = self.tt, self.s
        pairs = sorted({(min(w, t), max(w, t)) for w in self.free for t in range(self.n) if t != w})
        for i, j in pairs:
            if (reach[i] >> j) & 1 or (reach[j] >> i) & 1 or i in after or j in after:
                continue
            if (i in frozen and latest[i] + time_[i][self.fixed_dev[i]] <= head[j]) or (
                j in frozen and latest[j] + time_[j][self.fixed_dev[j]] <= head[i]
            ):
                continue
            shared = sorted(devs[i] & devs[j])
            if not shared:
                continue
            oij = self.o[i, j] = self.prob.add_variable(f"o_{i}_{j}", 0, 1, pulp.LpBinary)
            for d in shared:
                both: dict = {}
                bconst = self.add_place(both, i, d, 1.0) + self.add_place(both, j, d, 1.0)
                # i before j: s[j] >= s[i] + time[i][d] - M (1 - o) - M (2 - x_i - x_j)
                m = max(0.0, latest[i] + time_[i][d] - head[j])
                row = {s[j]: 1.0, s[i]: -1.0, oij: -m}
                for var, c in both.items():
                    _add(row, var, -m * c)
                self.prob += _lin(row, -time_[i][d] - m * bconst + 3 * m) >= 0
                # j before i: s[i] >= s[j] + time[j][d] - M o - M (2 - x_i - x_j)
                m = max(0.0, latest[j] + time_[j][d] - head[i])
                row = {s[i]: 1.0, s[j]: -1.0, oij: m}
                for var, c in both.items():
                    _add(row, var, -m * c)
                self.prob += _lin(row, -time_[j][d] - m * bconst + 2 * m) >= 0

    def objective(self) -> None:
        cost, sub, n, nd = self.cost, self.sub, self.n, self.nd
        terms = self.obj_terms
        if sub.objective == "makespan":
            terms[self.cmax] = 1.0
            if sub.flow_weight:
                for t in range(n):
                    _add(terms, self.s[t], sub.flow_weight)
                    self.obj_const += self.duration(terms, t, sub.flow_weight)
        elif sub.objective == "energy":
            for t in range(n):
                for d in range(nd):
                    if self.tt[t][d] < INF:
                        self.obj_const += self.add_place(terms, t, d, cost.energy[t][d] * self.k_obj)
        else:
            self.period = self.prob.add_variable("period", 0)
            terms[self.period] = 1.0
            for d in range(nd):
                self.period_row(d)
        self.prob += _lin(terms, 0.0)

    def period_row(self, d: int) -> None:
        """Throughput: period >= compute load of ``d`` + its incoming transfers."""
        cost, x, z, fixed = self.cost, self.x, self.z, self.fixed_dev
        row: dict = {self.period: -1.0}
        const = sum(self.add_place(row, t, d, self.tt[t][d]) for t in range(self.n) if self.tt[t][d] < INF)
        for e in cost.graph.edges:
            u, v, ei = e.src, e.dst, e.index
            if u in self.free and v in self.free:
                for a in range(self.nd):
                    if a != d and (ei, a, d) in z:
                        _add(row, z[ei, a, d], self.comm(ei, a, d))
            elif u in self.free:
                if fixed[v] == d:
                    for a in range(self.nd):
                        if a != d and (u, a) in x and self.comm(ei, a, d) < INF:
                            _add(row, x[u, a], self.comm(ei, a, d))
            elif v in self.free:
                a = fixed[u]
                if a != d and (v, d) in x and self.comm(ei, a, d) < INF:
                    _add(row, x[v, d], self.comm(ei, a, d))
            elif fixed[v] == d != fixed[u]:
                const += self.comm(ei, fixed[u], d)
        self.prob += _lin(row, const) <= 0

    def warm_start(self) -> dict[str, float] | None:
        """Column values of the start solution (devices relabelled for the symmetry cuts)."""
        sub, cost = self.sub, self.cost
        if sub.device is None:
            return None
        dev0 = canonical_devices(sub.device, self.classes) if self.classes else sub.device
        vals = {var.name: 1.0 if dev0[t] == d else 0.0 for (t, d), var in self.x.items()}
        for (ei, a, b), var in self.z.items():
            e = cost.graph.edges[ei]
            vals[var.name] = 1.0 if (dev0[e.src], dev0[e.dst]) == (a, b) else 0.0
        if self.timed and sub.start is not None:
            order0 = order_from_starts(cost, dev0, sub.start, self.fixed_chain)
            pos = {t: k for seq in order0 for k, t in enumerate(seq)}
            for t, var in self.s.items():
                vals[var.name] = sub.start[t] * self.k
            for (i, j), var in self.o.items():
                before = pos[i] < pos[j] if dev0[i] == dev0[j] else (sub.start[i], i) <= (sub.start[j], j)
                vals[var.name] = 1.0 if before else 0.0
            if self.cmax is not None:
                ends = (sub.start[t] * self.k + self.tt[t][dev0[t]] for t in range(self.n))
                vals[self.cmax.name] = min(self.upper, max(ends, default=0.0))
        if self.period is not None and sub.start_value is not None:
            vals[self.period.name] = sub.start_value * self.k_obj
        return vals

    def unscale(self, value: float) -> float:
        """A solver objective value (without the constant) in the caller's units."""
        return (value + self.obj_const) / self.k_obj

    def n_binaries(self) -> int:
        return len(self.x) + len(self.o)

    def extract(self, name: str, bound: float | None, warm: bool, elapsed: float) -> Solved:
        """The solution in task terms."""
        x, n, nd = self.x, self.n, self.nd
        device = tuple(
            self.fixed_dev[t] if t not in self.free
            else max((d for d in range(nd) if (t, d) in x), key=lambda d: (x[t, d].varValue, -d))
            for t in range(n)
        )
        start = order = None
        if self.timed:
            # a start in no row (a frozen task) is not sent to the solver: its bound is its value
            start = tuple(_value(self.s[t]) / self.k for t in range(n))
            order = order_from_starts(self.cost, device, start, self.fixed_chain)
        value = self.unscale(sum(c * float(var.varValue or 0.0) for var, c in self.obj_terms.items()))
        status = "optimal" if name == "kOptimal" else "feasible"
        if status == "optimal" and bound is None:
            bound = value
        return Solved(status, device, start, order, value, bound, warm, elapsed, self.n_binaries(),
                      len(self.prob.constraints()))


def solve(sub: Subproblem, progress=None) -> Solved:
    """Build and solve ``sub`` (HiGHS, else CBC); never raises for solver trouble.

    ``progress(elapsed, incumbent, bound)`` is called on improving solutions
    and about once a second during the search.
    """
    t0 = time.perf_counter()
    model = _Model(sub)
    try:
        model.build()
    except _Infeasible:
        return Solved("infeasible", None, None, None, None, None, False, time.perf_counter() - t0, 0, 0)
    prob = model.prob
    start_vals = model.warm_start()
    last = [0.0]

    def on_event(run_time: float, incumbent: float, bound: float, improving: bool) -> None:
        if progress is None:
            return
        now = time.perf_counter()
        if not improving and now - last[0] < 1.0:
            return
        last[0] = now
        inc = None if not math.isfinite(incumbent) else model.unscale(float(incumbent))
        bnd = None if not math.isfinite(bound) else model.unscale(float(bound))
        progress(now - t0, inc, bnd)

    limit = max(0.01, sub.time_limit - (time.perf_counter() - t0))
    n_bin, n_rows = model.n_binaries(), len(prob.constraints())
    if HIGHS_AVAILABLE:
        solver = _HighsWarm(
            start_vals,
            on_event,
            progress is not None,
            stop=sub.stop,
            msg=False,
            threads=1,
            timeLimit=limit,
            gapRel=MIP_REL_GAP,
            random_seed=int(sub.seed) % 2147483647,
            **(NO_SUB_MIPS if n_bin <= SMALL_MODEL_BINARIES else {}),
        )
    else:
        solver = _cbc(prob, start_vals, limit, sub.seed)
    try:
        prob.solve(solver)
    except Exception as err:  # solver trouble is reported, never raised  # noqa: BLE001
        return Solved(f"none: {err}", None, None, None, None, None, False, time.perf_counter() - t0, n_bin, n_rows)
    if HIGHS_AVAILABLE:
        name, has_sol, bound, first = _highs_outcome(prob.solverModel, solver.first_incumbent)
    else:  # CBC: no dual bound through PuLP, no callbacks
        optimal = prob.status == pulp.LpStatusOptimal and prob.sol_status == pulp.LpSolutionOptimal
        name = "kOptimal" if optimal else "kInfeasible" if prob.status == pulp.LpStatusInfeasible else "other"
        has_sol = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
        bound = first = None
    if bound is not None:
        bound = model.unscale(bound)
    warm = (
        sub.start_value is not None
        and first is not None
        and abs(model.unscale(first) - sub.start_value) <= REL_TOL * max(abs(sub.start_value), 1e-300)
    )
    elapsed = time.perf_counter() - t0
    if name in ("kInfeasible", "kUnboundedOrInfeasible"):
        return Solved("infeasible", None, None, None, None, bound, warm, elapsed, n_bin, n_rows)
    if not has_sol:
        return Solved("none", None, None, None, None, bound, warm, elapsed, n_bin, n_rows)
    return model.extract(name, bound, warm, elapsed)


# -- the mapper -------------------------------------------------------------
#: Heuristics whose best result seeds the MILP: (module, class) under mapper.mapping.
HEURISTICS = (
    ("heft", "HeftMapper"),
    ("cpop", "CpopMapper"),
    ("peft", "PeftMapper"),
    ("greedy", "GreedyMapper"),
    ("single", "SingleDeviceMapper"),
)


@dataclass(frozen=True, slots=True)
class Incumbent:
    """The best heuristic result: its mapper name, schedule and objective value."""

    name: str
    schedule: Schedule
    value: float


def check_options(options: MapOptions) -> None:
    if options.objective not in OBJECTIVES:
        raise OptionsError(
            f"unknown objective {options.objective!r}; choose one of {', '.join(OBJECTIVES)}", obj="objective"
        )
    if not (options.time_limit > 0 and math.isfinite(options.time_limit)):
        raise OptionsError(f"time limit must be a positive number of seconds, got {options.time_limit}", obj="time_limit")
    if options.makespan_bound is not None and not options.makespan_bound > 0:
        raise OptionsError(f"makespan bound must be positive, got {options.makespan_bound}", obj="makespan_bound")


def check_feasible(cost: CostTable, options: ScheduleOptions) -> None:
    """Raise :class:`InfeasibleError` naming a task that fits no device, and why."""
    cost.require_feasible()  # names each device's reason (placement, memory, dtype, ...)
    for t in range(cost.n_tasks):
        name = cost.graph.tasks[t].name
        feas = allowed_devices(cost, t)
        if not feas:
            raise InfeasibleError(f"task {name!r} cannot run on any device of {cost.platform.name}", obj=name)
        if options.memory and not any(cost.footprint[t] <= cost.memory_capacity[d] for d in feas):
            raise InfeasibleError(
                f"task {name!r} needs {cost.footprint[t]:.6g} bytes, more than the memory of every device it can use",
                obj=name,
            )
        if options.area and not any(not _is_fpga(cost, d) or cost.area[t][d] <= cost.area_capacity[d] for d in feas):
            raise InfeasibleError(f"task {name!r} does not fit the area of any FPGA it is restricted to", obj=name)


def value_of(schedule: Schedule, objective: str) -> float:
    from mapper.mapping.objectives import objective_value

    return float(objective_value(schedule, objective))


def best_heuristic(cost: CostTable, options: MapOptions) -> tuple[Incumbent | None, tuple[str, ...]]:
    """Run every heuristic of :data:`HEURISTICS`; the best feasible result
    (ties by list order) and notes on those that failed."""
    import importlib

    from mapper.validate import validate

    best: Incumbent | None = None
    notes: list[str] = []
    bound = options.makespan_bound if options.objective != "makespan" else None
    for module, cls in HEURISTICS:
        mapper = getattr(importlib.import_module(f"mapper.mapping.{module}"), cls)()
        try:
            res = mapper.map(cost, options)
        except MapperError as err:
            notes.append(f"{module}: {err.message.split(' (')[0]}")
            continue
        sched = res.schedule
        if validate(sched):
            notes.append(f"{module}: its schedule does not validate; ignored")
            continue
        if bound is not None and sched.makespan > bound * (1 + REL_TOL):
            notes.append(f"{module}: makespan {sched.makespan:.6g} exceeds the bound {bound:.6g}")
            continue
        value = value_of(sched, options.objective)
        if best is None or value < best.value * (1 - 1e-12) - 1e-300:
            best = Incumbent(module, sched, value)
    return best, tuple(notes)


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


def retime(cost: CostTable, device: tuple[int, ...], order, options: ScheduleOptions) -> Schedule:
    from mapper.schedule import build_schedule

    return build_schedule(cost, Assignment(tuple(device), order), options)


def schedule_order(schedule: Schedule) -> tuple[tuple[int, ...], ...]:
    """Per-device order of ``schedule`` (its own, else by start time)."""
    if schedule.order:
        return schedule.order
    return order_from_starts(schedule.cost, schedule.device_of, tuple(s.start for s in schedule.slots))


def lower_bound_for(cost: CostTable, objective: str, options: ScheduleOptions, solver_bound: float | None):
    """A valid lower bound on the objective: the larger of the solver's
    (dropped under streaming, which the MILP does not model) and
    :func:`mapper.mapping.bounds.lower_bound`."""
    from mapper.mapping.bounds import lower_bound

    bounds = [b for b in (lower_bound(cost, objective, options),) if b is not None]
    if solver_bound is not None and not options.streaming:
        bounds.append(solver_bound)
    return max(bounds) if bounds else None


def gap_of(value: float, bound: float | None) -> float | None:
    if bound is None:
        return None
    if value <= 0:
        return 0.0
    return max(0.0, (value - bound) / value)


class MilpMapper(Mapper):
    """Exact communication-aware MILP (Venugopalan & Sinnen, IEEE TPDS 2015;
    throughput after Wilhelm et al., arXiv 2208.06321), warm-started from the
    best heuristic; LNS over a coarsened graph above :data:`EXACT_MAX_TASKS`
    tasks or :data:`EXACT_MAX_PAIRS` ordering binaries (see :mod:`.lns`)."""

    name = "milp"
    summary = "exact MILP (HiGHS) warm-started from the best heuristic; LNS for large graphs"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        t0 = time.perf_counter()
        check_options(options)
        check_feasible(cost, options.schedule)
        report = _reporter(options, t0)
        report(None, None)
        best, notes = best_heuristic(cost, options)
        if best is not None:
            report(best.value, None)
        if cost.n_tasks > EXACT_MAX_TASKS or count_order_pairs(cost) > EXACT_MAX_PAIRS:
            from mapper.mapping.lns import map_large

            result = map_large(cost, options, best, notes, t0)
            report(result.objective_value, result.lower_bound)
            return result
        result = self._exact(cost, options, best, notes, t0, report)
        report(result.objective_value, result.lower_bound)
        return result

    def _exact(self, cost, options: MapOptions, best: Incumbent | None, notes, t0: float, report) -> MapResult:
        objective = options.objective
        sopts = options.schedule
        notes = list(notes)
        inexact = [o for o in ("contention", "streaming") if getattr(sopts, o)]
        if inexact:
            notes.append(f"the MILP models the delay model; {' and '.join(inexact)} applied when re-timing")
        mb = options.makespan_bound if objective != "makespan" else None
        if best is not None and cost.n_tasks > LNS_FIRST_TASKS and objective_needs_time(objective, mb):
            best = self._lns_first(cost, options, best, notes, t0, report)
        device = start = None
        upper = serial_upper_bound(cost)
        if best is not None:
            warm = retime(cost, best.schedule.device_of, schedule_order(best.schedule), delay_options(sopts))
            device = warm.device_of
            start = tuple(s.start for s in warm.slots)
            upper = warm.makespan * (1 + 1e-9) + 1e-12
            notes.append(f"warm start from {best.name} ({objective} {best.value:.6g})")
        if objective != "makespan":
            # the heuristic's makespan bounds nothing here; only the user's bound does
            upper = options.makespan_bound if options.makespan_bound is not None else upper
        sub = Subproblem(
            cost=cost,
            objective=objective,
            free=tuple(range(cost.n_tasks)),
            device=device,
            start=start,
            upper=upper,
            time_limit=max(0.01, options.time_limit - (time.perf_counter() - t0)),
            seed=options.seed,
            memory=sopts.memory,
            area=sopts.area,
            makespan_bound=options.makespan_bound if objective != "makespan" else None,
            start_value=best.value if best is not None else None,
            stop=options.stop,
        )
        solved = solve(sub, progress=lambda el, inc, bnd: report(inc, bnd))
        notes.append(
            f"MILP: {solved.n_binaries} binaries, {solved.n_constraints} rows, {solved.status} in {solved.solve_time:.3f} s"
        )
        if best is not None and HIGHS_AVAILABLE:
            notes.append("warm start taken by HiGHS" if solved.warm_start_taken else "warm start NOT taken by HiGHS")
        elif best is not None:
            notes.append("HiGHS unavailable: solved with CBC (warm start passed, not verifiable; no dual bound)")
        if solved.status == "infeasible":
            if best is None:
                raise InfeasibleError(_infeasible_reason(cost, options), obj=cost.graph.name)
            notes.append("the solver reported the model infeasible although a heuristic schedule exists")
            return self._fallback(cost, options, best, notes, t0, None)
        if solved.device is None:
            if best is None:
                raise InfeasibleError(
                    f"no mapping found within the time limit of {options.time_limit:g} s", obj=cost.graph.name
                )
            notes.append(f"the MILP found no solution ({solved.status}); returning {best.name}")
            return self._fallback(cost, options, best, notes, t0, solved.bound)
        from mapper.validate import validate

        try:
            sched = retime(cost, solved.device, solved.order, sopts)
            bad = [v.message for v in validate(sched)]
        except MapperError as err:
            bad = [err.message]
        if bad:
            notes.append(f"MILP schedule rejected ({bad[0]})")
            if best is None:
                raise InfeasibleError("the MILP schedule does not validate and no heuristic succeeded", obj=cost.graph.name)
            return self._fallback(cost, options, best, notes, t0, solved.bound)
        value = value_of(sched, objective)
        notes.append(f"MILP objective {solved.objective:.9g}, re-timed {value:.9g}")
        status = solved.status if not inexact else "feasible"
        if best is not None and best.value < value * (1 - REL_TOL):
            notes.append(f"MILP incumbent {value:.6g} is worse than {best.name}'s {best.value:.6g}; returning {best.name}")
            sched, value, status = best.schedule, best.value, "heuristic"
        return make_result(cost, options, sched, value, status, solved.bound, t0, notes)

    def _lns_first(self, cost, options: MapOptions, best: Incumbent, notes: list[str], t0: float,
                   report) -> Incumbent:
        """Improve the warm start by MILP-window LNS for :data:`LNS_SHARE` of
        the time limit (on mid-size graphs it finds better schedules sooner
        than the full model), then hand the rest to the exact solve."""
        from mapper.mapping.lns import WINDOW, improve
        from mapper.validate import validate

        improved, stats = improve(cost, best.schedule, options.objective, options.schedule,
                                  t0 + LNS_SHARE * options.time_limit, seed=options.seed,
                                  makespan_bound=options.makespan_bound, progress=lambda v: report(v, None),
                                  stop=options.stop)
        notes.append(f"LNS before the exact model: {stats.windows} windows of {WINDOW} tasks, {stats.accepted} "
                     f"accepted, {stats.start_value:.6g} -> {stats.end_value:.6g}")
        try:
            sched = retime(cost, improved.device_of, schedule_order(improved), options.schedule)
        except MapperError:
            return best
        value = value_of(sched, options.objective)
        if validate(sched) or not value < best.value * (1 - REL_TOL):
            return best
        return Incumbent(f"LNS from {best.name}", sched, value)

    def _fallback(self, cost, options, best: Incumbent, notes, t0: float, bound) -> MapResult:
        return make_result(cost, options, best.schedule, best.value, "heuristic", bound, t0, notes)


def make_result(cost, options: MapOptions, schedule: Schedule, value: float, status: str, solver_bound, t0: float,
                notes) -> MapResult:
    """The milp mapper's result, with a valid lower bound and the gap."""
    bound = lower_bound_for(cost, options.objective, options.schedule, solver_bound)
    if options.should_stop():
        notes = (*notes, "interrupted: the search was stopped early; this is the best schedule found by then")
    return MapResult(
        schedule=schedule,
        mapper=MilpMapper.name,
        status=status,
        objective=options.objective,
        objective_value=value,
        lower_bound=bound,
        gap=gap_of(value, bound),
        solve_time=time.perf_counter() - t0,
        notes=tuple(notes),
    )


def _infeasible_reason(cost: CostTable, options: MapOptions) -> str:
    parts = []
    if options.schedule.memory:
        parts.append("device memory capacities")
    if options.schedule.area:
        parts.append("FPGA area capacities")
    if options.makespan_bound is not None and options.objective != "makespan":
        parts.append(f"the makespan bound {options.makespan_bound:g}")
    parts.append("placement and routes")
    return "no mapping satisfies " + ", ".join(parts)


def _reporter(options: MapOptions, t0: float):
    def report(incumbent: float | None, bound: float | None) -> None:
        if options.progress is not None:
            options.progress(Progress(time.perf_counter() - t0, incumbent, bound))

    return report
