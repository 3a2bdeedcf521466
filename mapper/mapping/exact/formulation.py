"""The exact mapping model: the delay model as a mixed-integer linear program.

The model is the delay model of docs/architecture.md (timing semantics), as a MILP in the
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

Energy and throughput objectives follow :mod:`mapper.mapping.objectives`;
under ``1f1b`` the objective is ``((M - 1) period + sum_d load(d)) / M``.
When neither the objective nor a makespan bound involves time, the model
drops the time variables (the assignment alone decides the value).

:class:`Formulation` builds the model of one
:class:`~mapper.mapping.exact.subproblem.Subproblem` (a whole problem, or an
LNS window whose other tasks enter as constants) through
:mod:`mapper.mapping.exact.solver`, and reads a solution back in task terms.
LNS windows are solved with the smaller model of
:mod:`mapper.mapping.exact.window_model`, which has the same optimum; this
one stays their reference in the tests.
"""

from __future__ import annotations

from mapper.costing.cost import INF, CostTable
from mapper.mapping.exact.solver import Problem, Var, level, value
from mapper.mapping.exact.subproblem import REL_TOL, TIME_SCALE, Solved, Subproblem, objective_needs_time
from mapper.mapping.objectives import loads
from mapper.mapping.orders import (
    allowed_devices,
    canonical_devices,
    chain_arcs,
    closure,
    dag_arcs,
    head_tail,
    identical_device_classes,
    order_from_starts,
)


def is_fpga(cost: CostTable, d: int) -> bool:
    """Area capacity applies to FPGAs only (as in the schedule builder)."""
    return cost.platform.devices[d].kind == "fpga"

def _add(terms: dict, var, coef: float) -> None:
    if coef:
        terms[var] = terms.get(var, 0.0) + coef


class Infeasible(Exception):
    """The subproblem is infeasible before solving (no device, full capacity)."""


class Formulation:
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
            ref = sum(max((e for e, x in zip(er, tr) if x < INF), default=0.0)
                      for er, tr in zip(cost.energy, cost.time))
            self.k_obj = TIME_SCALE / ref if 0 < ref < INF else 1.0
        else:
            self.k_obj = self.k
        self.prob = Problem("mapping")
        self.x: dict[tuple[int, int], Var] = {}
        self.z: dict[tuple[int, int, int], Var] = {}
        self.s: dict[int, Var] = {}
        self.o: dict[tuple[int, int], Var] = {}
        self.cmax = self.period = None
        self.comm_terms: dict[int, tuple[dict, float]] = {}
        self.fixed_chain: tuple[tuple[int, int], ...] = ()
        self.classes: tuple[tuple[int, ...], ...] = ()
        self.obj_terms: dict = {}
        self.obj_const = 0.0

    def build(self) -> None:
        """All constraint families and the objective; raises :class:`Infeasible`."""
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
                feas = tuple(d for d in feas if not is_fpga(cost, d) or cost.area[t][d] <= cost.area_capacity[d])
            if not feas:
                raise Infeasible
            for d in feas:
                self.x[t, d] = self.prob.binary(f"x_{t}_{d}")
            self.prob.add_row({self.x[t, d]: 1.0 for d in feas}, 0.0, "==", 1)

    def capacities(self) -> None:
        cost, sub = self.cost, self.sub
        for enabled, weight, cap in (
            (sub.memory, lambda t, d: cost.footprint[t], cost.memory_capacity),
            (sub.area, lambda t, d: cost.area[t][d], cost.area_capacity),
        ):
            if not enabled:
                continue
            for d in range(self.nd):
                if cap[d] == INF or (cap is cost.area_capacity and not is_fpga(cost, d)):
                    continue
                terms: dict = {}
                const = sum(self.add_place(terms, t, d, weight(t, d)) for t in range(self.n))
                if terms:
                    self.prob.add_row(terms, const, "<=", cap[d])
                elif const > cap[d] * (1 + REL_TOL):
                    raise Infeasible

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
                        self.prob.add_row(terms, 0.0, "<=")

    def transfers(self) -> None:
        """Transfer-time terms per edge; no-route pairs forbidden."""
        for e in self.cost.graph.edges:
            u, v = e.src, e.dst
            if u not in self.free and v not in self.free:
                if self.timed:
                    self.comm_terms[e.index] = ({}, self.comm(e.index, self.fixed_dev[u], self.fixed_dev[v]))
                continue
            self.edge_transfer(e.index, u, v)

    def edge_transfer(self, ei: int, u: int, v: int) -> None:
        """The transfer-time terms of edge ``ei = u -> v`` (one end free)."""
        x = self.x
        terms: dict = {}
        if u in self.free and v in self.free:
            self.products(ei, u, v, terms)
        else:
            if u in self.free:
                mover, anchor, outgoing = u, self.fixed_dev[v], True
            else:
                mover, anchor, outgoing = v, self.fixed_dev[u], False
            for d in range(self.nd):
                if (mover, d) in x:
                    c = self.comm(ei, d, anchor) if outgoing else self.comm(ei, anchor, d)
                    if c == INF:
                        self.prob.add_row({x[mover, d]: 1.0}, 0.0, "==")
                    else:
                        _add(terms, x[mover, d], c)
        self.comm_terms[ei] = (terms, 0.0)

    def products(self, ei: int, u: int, v: int, terms: dict) -> None:
        """``z[e,a,b] = x[u,a] x[v,b]`` by the aggregated linearisation."""
        x, z = self.x, self.z
        du, dv = sorted(self.devices(u)), sorted(self.devices(v))
        pairs = [(a, b) for a in du for b in dv if self.comm(ei, a, b) < INF]
        if not any(self.comm(ei, a, b) > 0 for a, b in pairs) and len(pairs) == len(du) * len(dv):
            return  # every pair allowed and free: no product needed
        for a, b in pairs:
            z[ei, a, b] = self.prob.continuous(f"z_{ei}_{a}_{b}", 0, 1)
            if a != b:
                _add(terms, z[ei, a, b], self.comm(ei, a, b))
        for d in du:
            row = {z[ei, d, b]: 1.0 for a, b in pairs if a == d}
            _add(row, x[u, d], -1.0)
            self.prob.add_row(row, 0.0, "==")
        for d in dv:
            row = {z[ei, a, d]: 1.0 for a, b in pairs if b == d}
            _add(row, x[v, d], -1.0)
            self.prob.add_row(row, 0.0, "==")

    def timing(self) -> None:
        """Starts with head/tail bounds, precedence, fixed orders, disjunctions,
        and the makespan rows."""
        cost, sub, n, prob, k = self.cost, self.sub, self.n, self.prob, self.k
        frozen = self.frozen()
        after = self.after_horizon()
        hk = sub.horizon * k if sub.horizon is not None else INF
        starts = sub.start or ()  # set whenever a task is fixed or frozen
        if not self.all_free:
            assert sub.device is not None and sub.start is not None  # checked: a partial problem has an incumbent
            fixed_order = order_from_starts(cost, sub.device, sub.start)
            self.fixed_chain = chain_arcs(fixed_order, frozenset(range(n)) - self.free)
        arcs = dag_arcs(cost) + self.fixed_chain
        devs = [self.devices(t) for t in range(n)]
        mint = [min(self.tt[t][d] for d in devs[t]) for t in range(n)]
        release = [starts[t] * k if t in frozen else hk if t in after else 0.0 for t in range(n)]
        head, tail = head_tail(n, arcs, mint, release)
        latest = [head[t] if t in frozen else max(head[t], self.upper - mint[t] - tail[t]) for t in range(n)]
        if hk < INF:
            for t in self.free:
                latest[t] = max(head[t], min(latest[t], hk - mint[t]))
        s = self.s
        for t in range(n):
            s[t] = prob.continuous(f"s_{t}", head[t], latest[t])
        for e in cost.graph.edges:
            if e.src in frozen and e.dst in frozen:
                continue  # both at their current times, which satisfy it
            terms = {s[e.dst]: 1.0}
            _add(terms, s[e.src], -1.0)
            const = self.duration(terms, e.src, -1.0)
            cterms, cconst = self.comm_terms[e.index]
            for var, c in cterms.items():
                _add(terms, var, -c)
            prob.add_row(terms, const - cconst, ">=")
        for a, b in self.fixed_chain:
            if not (a in frozen and b in frozen):
                prob.add_row({s[b]: 1.0, s[a]: -1.0}, -self.tt[a][self.fixed_dev[a]], ">=")
        if hk < INF:
            for t in sorted(self.free):
                terms = {s[t]: 1.0}
                prob.add_row(terms, self.duration(terms, t, 1.0), "<=", hk)
        self.disjunctions(closure(n, arcs), devs, head, latest, frozen, after)
        sinks = [t for t in range(n) if not cost.graph.succs[t]]
        if sub.objective != "makespan":
            for t in sinks:
                terms = {s[t]: 1.0}
                prob.add_row(terms, self.duration(terms, t, 1.0), "<=", self.upper)
            return
        cmax = self.cmax = prob.continuous("cmax", 0, self.upper)
        for t in sinks:
            terms = {cmax: 1.0, s[t]: -1.0}
            prob.add_row(terms, self.duration(terms, t, -1.0), ">=")
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
                prob.add_row(terms, const, ">=")

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
        time_ = self.tt
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
            oij = self.o[i, j] = self.prob.binary(f"o_{i}_{j}")
            for d in shared:
                self.pair_rows(i, j, oij, d, max(0.0, latest[i] + time_[i][d] - head[j]),
                               max(0.0, latest[j] + time_[j][d] - head[i]))

    def start_of(self, terms: dict, t: int, coef: float) -> float:
        """Add ``coef * start[t]`` to ``terms``; returns its constant part."""
        _add(terms, self.s[t], coef)
        return 0.0

    def pair_rows(self, i: int, j: int, oij: Var, d: int, m_ij: float, m_ji: float) -> None:
        """The two rows of the disjunction of ``i`` and ``j`` on ``d``, with big-Ms ``m_ij``, ``m_ji``."""
        both: dict = {}
        bconst = self.add_place(both, i, d, 1.0) + self.add_place(both, j, d, 1.0)
        # i before j: s[j] >= s[i] + time[i][d] - M (1 - o) - M (2 - x_i - x_j)
        # j before i: s[i] >= s[j] + time[j][d] - M o       - M (2 - x_i - x_j)
        for first, second, m, o_coef, slack in ((i, j, m_ij, -m_ij, 3), (j, i, m_ji, m_ji, 2)):
            row = {oij: o_coef}
            const = self.start_of(row, second, 1.0) + self.start_of(row, first, -1.0)
            for var, c in both.items():
                _add(row, var, -m * c)
            self.prob.add_row(row, const - self.tt[first][d] - m * bconst + slack * m, ">=")

    def objective(self) -> None:
        cost, sub, n, nd = self.cost, self.sub, self.n, self.nd
        terms = self.obj_terms
        if sub.objective == "makespan":
            terms[self.cmax] = 1.0
            if sub.flow_weight:
                self.flow(terms, sub.flow_weight)
        elif sub.objective == "energy":
            for t in range(n):
                for d in range(nd):
                    if self.tt[t][d] < INF:
                        self.obj_const += self.add_place(terms, t, d, cost.energy[t][d] * self.k_obj)
        else:
            self.period = self.prob.continuous("period", 0)
            pipelined = cost.platform.throughput_model == "1f1b"
            m = cost.platform.micro_batches if pipelined else 1
            terms[self.period] = (m - 1) / m if pipelined else 1.0
            for d in range(nd):
                row, const = self.period_row(d)
                if pipelined:  # the fill and drain: every stage's load once
                    for var, c in row.items():
                        if var is not self.period:
                            _add(terms, var, c / m)
                    self.obj_const += const / m
        self.prob.minimise(terms, 0.0)

    def flow(self, terms: dict, weight: float) -> None:
        """Add ``weight`` times the sum of every task's finish time."""
        for t in range(self.n):
            _add(terms, self.s[t], weight)
            self.obj_const += self.duration(terms, t, weight)

    def period_row(self, d: int) -> tuple[dict, float]:
        """Throughput: period >= compute load of ``d`` + its incoming transfers;
        returns the row's terms and constant (the load, with ``-period``)."""
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
        self.prob.add_row(row, const, "<=")
        return row, const

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
            pos, makespan = self.start_positions(dev0, sub.start)
            for t, var in self.s.items():
                vals[var.name] = sub.start[t] * self.k
            for (i, j), var in self.o.items():
                before = pos[i] < pos[j] if dev0[i] == dev0[j] else (sub.start[i], i) <= (sub.start[j], j)
                vals[var.name] = 1.0 if before else 0.0
            if self.cmax is not None:
                vals[self.cmax.name] = min(self.upper, makespan)
        if self.period is not None:
            vals[self.period.name] = max(loads(cost, dev0), default=0.0) * self.k_obj
        return vals

    def start_positions(self, dev0: tuple[int, ...], start: tuple[float, ...]) -> tuple[list[int], float]:
        """Each task's place on its device in the start solution, and its (scaled) makespan."""
        pos = [0] * self.n
        for seq in order_from_starts(self.cost, dev0, start, self.fixed_chain):
            for k, t in enumerate(seq):
                pos[t] = k
        ends = (start[t] * self.k + self.tt[t][dev0[t]] for t in range(self.n))
        return pos, max(ends, default=0.0)

    def unscale(self, value: float) -> float:
        """A solver objective value (without the constant) in the caller's units."""
        return (value + self.obj_const) / self.k_obj

    def n_binaries(self) -> int:
        return len(self.x) + len(self.o)

    def starts(self) -> tuple[float, ...]:
        """Every task's start in the solution, in the caller's units."""
        # a start in no row (a frozen task) is not sent to the solver: its bound is its value
        return tuple(value(self.s[t]) / self.k for t in range(self.n))

    def extract(self, name: str, bound: float | None, warm: bool, elapsed: float) -> Solved:
        """The solution in task terms."""
        x, n, nd = self.x, self.n, self.nd
        device = tuple(
            self.fixed_dev[t] if t not in self.free
            else max((d for d in range(nd) if (t, d) in x), key=lambda d: (level(x[t, d]), -d))
            for t in range(n)
        )
        start = order = None
        if self.timed:
            start = self.starts()
            order = order_from_starts(self.cost, device, start, self.fixed_chain)
        objective = self.unscale(sum(c * level(var) for var, c in self.obj_terms.items()))
        status = "optimal" if name == "kOptimal" else "feasible"
        if status == "optimal" and bound is None:
            bound = objective
        return Solved(status, device, start, order, objective, bound, warm, elapsed, self.n_binaries(),
                      self.prob.n_rows())
