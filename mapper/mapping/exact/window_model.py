"""The model of one LNS window, in size proportional to the window, not the graph.

A window (:mod:`mapper.mapping.lns`) frees a few tasks inside the time slab
``[T0, T1]`` they occupy; every other task keeps its device and its order on
it. :class:`~mapper.mapping.exact.formulation.Formulation` gives every task
a start variable and every edge a row, so on thousands of tasks one window
took over a second, nearly all of it on tasks the window cannot move. This
model splits the fixed tasks in three:

* **frozen**: they end by ``T0`` and keep their start times, which enter the
  rows as constants;
* **after**: they start at ``T1`` or later (and end after it). Every
  successor of one, by an edge or on its device, is one too, so their
  schedule is a fixed tail: task ``a`` starts at latest ``Cmax - L(a)``,
  ``L(a)`` its longest path (fixed durations, transfers and device orders) to
  the end of the current schedule, and an arc ``u -> a`` becomes
  ``Cmax >= end(u) + comm + L(a)``. These are the critical-path method's
  latest starts (Kelley and Walker, "Critical-path planning and scheduling",
  1959): any makespan the rest allows, the tail meets, so nothing is lost;
* **middle**: the rest, the tasks that overlap the slab, with start
  variables like the free tasks.

So variables, rows and disjunctions exist for the free and middle tasks and
the frozen tasks beside them only; what every window of one schedule shares
(device orders, ``L``, per-arc constants) is computed once
(:func:`current`). The model has the optimum :class:`Formulation` has for the
same window (same neighbourhood); in the sum of finish times that LNS adds
as a tie-breaker, the frozen and after tasks count at their current times.
"""

from __future__ import annotations

import numpy as np

from mapper.costing.cost import CostTable
from mapper.mapping.exact.formulation import Formulation, _add
from mapper.mapping.exact.solver import level, value
from mapper.mapping.exact.subproblem import REL_TOL, Solved, Subproblem, objective_needs_time
from mapper.mapping.orders import chain_arcs, closure, start_sequence, topo_arcs

#: An arc ``(u, v, edge index)``; ``-1`` for a device-order arc (no transfer).
Arc = tuple[int, int, int]


def is_window(sub: Subproblem) -> bool:
    """Whether ``sub`` is an LNS window this model handles (timed, partial, with a slab)."""
    return (
        objective_needs_time(sub.objective, sub.makespan_bound)
        and sub.frozen_before is not None and sub.horizon is not None
        and sub.device is not None and sub.start is not None and len(sub.free) < sub.cost.n_tasks
    )


class Current:
    """One schedule (``device``, ``start``, delay model) as every window of it sees it, unscaled."""

    def __init__(self, cost: CostTable, device: tuple[int, ...], start: tuple[float, ...]) -> None:
        n, graph = cost.n_tasks, cost.graph
        self.cost, self.device, self.start = cost, device, start
        dur = [cost.time[t][device[t]] for t in range(n)]
        seq = start_sequence(cost, device, start)  # topological for the edges and the device orders
        per: list[list[int]] = [[] for _ in range(cost.n_devices)]
        for t in seq:
            per[device[t]].append(t)
        self.order = tuple(tuple(p) for p in per)
        self.pos = [0] * n
        self.prev, self.next = [-1] * n, [-1] * n
        for p in per:
            for i, t in enumerate(p):
                self.pos[t] = i
                if i:
                    self.prev[t], self.next[p[i - 1]] = p[i - 1], t
        edges = graph.edges
        comm = [cost.comm(e.index, device[e.src], device[e.dst]) for e in edges]
        tail = [0.0] * n
        for t in reversed(seq):
            best = dur[t] + (tail[self.next[t]] if self.next[t] >= 0 else 0.0)
            for ei in graph.succs[t]:
                best = max(best, dur[t] + comm[ei] + tail[edges[ei].dst])
            tail[t] = best
        self.tail = np.array(tail)  # L: longest path from each task's start to the end
        self.starts = np.array(start, dtype=float)
        self.ends = self.starts + np.array(dur)
        self.makespan = float(self.ends.max(initial=0.0))
        src = np.array([e.src for e in edges], dtype=np.int64)
        dst = np.array([e.dst for e in edges], dtype=np.int64)
        chain = np.array(chain_arcs(self.order, frozenset(range(n))), dtype=np.int64).reshape(-1, 2)
        self.arc_src = np.concatenate([src, chain[:, 0]])
        self.arc_dst = np.concatenate([dst, chain[:, 1]])
        # the latest an arc's tail end lets the makespan be: end(u) + comm + L(v)
        self.arc_floor = self.ends[self.arc_src] + np.concatenate([np.array(comm), np.zeros(len(chain))])
        self.arc_floor += self.tail[self.arc_dst]
        self.loads = np.bincount(np.array(device, dtype=np.int64), weights=np.array(dur),
                                 minlength=cost.n_devices)


_last: list[Current] = []


def current(cost: CostTable, device: tuple[int, ...], start: tuple[float, ...]) -> Current:
    """The :class:`Current` of ``(device, start)``; the last one is kept, as LNS
    tries window after window of the same schedule."""
    if _last and _last[0].cost is cost and _last[0].device == device and _last[0].start == start:
        return _last[0]
    cur = Current(cost, device, start)
    _last[:] = [cur]
    return cur


class WindowFormulation(Formulation):
    """The MILP of an LNS window (see the module docstring)."""

    def __init__(self, sub: Subproblem) -> None:
        super().__init__(sub)
        assert sub.start is not None and sub.device is not None
        self.cur = current(sub.cost, sub.device, sub.start)
        self.frozen_mask = self.after_mask = np.zeros(self.n, dtype=bool)

    # -- constants of the fixed tasks ---------------------------------------------
    def transfers(self) -> None:
        """Transfer terms of the edges with a free end; the others are constants."""
        graph = self.cost.graph
        seen: set[int] = set()
        for w in sorted(self.free):
            for ei in graph.preds[w] + graph.succs[w]:
                if ei not in seen:
                    seen.add(ei)
                    e = graph.edges[ei]
                    self.edge_transfer(ei, e.src, e.dst)

    def arc_comm(self, arc: Arc) -> tuple[dict, float]:
        """Scaled transfer time of an arc: terms over the free ends' placements, constant."""
        u, v, ei = arc
        if ei < 0:
            return {}, 0.0
        if ei in self.comm_terms:
            return self.comm_terms[ei]
        return {}, self.comm(ei, self.fixed_dev[u], self.fixed_dev[v])

    def fixed_end(self, t: int) -> float:
        return float(self.cur.ends[t]) * self.k

    def tail_of(self, t: int) -> float:
        """Scaled ``L(t)`` of an after task."""
        return float(self.cur.tail[t]) * self.k

    def start_of(self, terms: dict, t: int, coef: float) -> float:
        """Add ``coef * start[t]`` (a variable, or a fixed constant) to ``terms``; returns its constant."""
        if t in self.s:
            _add(terms, self.s[t], coef)
            return 0.0
        return coef * self.cur.start[t] * self.k

    # -- the window ----------------------------------------------------------------
    def split(self) -> np.ndarray:
        """Set the frozen and after masks; returns the variable tasks (free and middle)."""
        sub, cur = self.sub, self.cur
        assert sub.frozen_before is not None and sub.horizon is not None
        free = np.zeros(self.n, dtype=bool)
        free[list(self.free)] = True
        self.frozen_mask = ~free & (cur.ends <= sub.frozen_before * (1 + 1e-12))
        # zero-duration tasks at T1 may precede a free one: they stay variables
        t1 = sub.horizon
        self.after_mask = ~free & ~self.frozen_mask & (cur.starts >= t1) & ((cur.ends > t1) | (cur.starts > t1))
        return np.flatnonzero(~self.frozen_mask & ~self.after_mask)

    def fixed_next(self, t: int, step: list[int]) -> int:
        """The next (``step = cur.next``) or previous fixed task on ``t``'s device, -1 if none."""
        t = step[t]
        while t >= 0 and t in self.free:
            t = step[t]
        return t

    def local_arcs(self, var: list[int], is_var: set[int]) -> tuple[list[Arc], float]:
        """Arcs with a variable end, and the makespan floor from the arcs
        between frozen and after tasks that the free tasks no longer separate."""
        graph, cur, frozen, after = self.cost.graph, self.cur, self.frozen_mask, self.after_mask
        arcs: list[Arc] = []
        for t in var:
            arcs += [(t, graph.edges[ei].dst, ei) for ei in graph.succs[t]]
            arcs += [(graph.edges[ei].src, t, ei) for ei in graph.preds[t] if graph.edges[ei].src not in is_var]
            if t not in self.free:
                nxt, prv = self.fixed_next(t, cur.next), self.fixed_next(t, cur.prev)
                if nxt >= 0:
                    arcs.append((t, nxt, -1))
                if prv >= 0 and prv not in is_var:
                    arcs.append((prv, t, -1))
        floor = 0.0
        for w in self.free:  # device-order arcs that skip free tasks
            p, q = self.fixed_next(w, cur.prev), self.fixed_next(w, cur.next)
            if p >= 0 and q >= 0 and frozen[p] and after[q]:
                floor = max(floor, float(cur.ends[p] + cur.tail[q]))
        mask = frozen[cur.arc_src] & after[cur.arc_dst]
        if mask.any():
            floor = max(floor, float(cur.arc_floor[mask].max()))
        if frozen.any():
            floor = max(floor, float(cur.ends[frozen].max()))
        if after.any():
            assert self.sub.horizon is not None
            floor = max(floor, self.sub.horizon + float(cur.tail[after].max()))
        return arcs, floor * self.k

    def timing(self) -> None:
        """Starts of the free and middle tasks, their arcs, disjunctions and the makespan rows."""
        sub, prob, tt = self.sub, self.prob, self.tt
        assert sub.horizon is not None
        hk = sub.horizon * self.k
        var = [int(t) for t in self.split()]
        is_var = set(var)
        arcs, floor = self.local_arcs(var, is_var)
        self.fixed_chain = tuple((u, v) for u, v, ei in arcs if ei < 0)
        devs = {t: self.devices(t) for t in var}
        mint = {t: min(tt[t][d] for d in devs[t]) for t in var}
        head, tail = self.bounds(var, arcs, mint, sub.horizon)
        latest = {t: max(head[t], self.upper - mint[t] - tail[t]) for t in var}
        for t in self.free:
            latest[t] = max(head[t], min(latest[t], hk - mint[t]))
        s = self.s
        for t in var:
            s[t] = prob.continuous(f"s_{t}", head[t], latest[t])
        ends: list[tuple[dict, float]] = []  # rows: terms + const <= Cmax
        for arc in arcs:
            u, v, _ = arc
            terms: dict = {}
            const = self.start_of(terms, u, 1.0) + self.duration(terms, u, 1.0)
            cterms, cconst = self.arc_comm(arc)
            for x, c in cterms.items():
                _add(terms, x, c)
            const += cconst
            if self.after_mask[v]:
                ends.append((terms, const + self.tail_of(v)))
            else:  # end(u) + comm <= start(v)
                const += self.start_of(terms, v, -1.0)
                prob.add_row(terms, const, "<=")
        for t in sorted(self.free):
            terms = {s[t]: 1.0}
            prob.add_row(terms, self.duration(terms, t, 1.0), "<=", hk)
        for t in var:
            terms = {s[t]: 1.0}
            ends.append((terms, self.duration(terms, t, 1.0)))
        self.disjunctions_near(var, arcs, devs, head, latest)
        if sub.objective != "makespan":
            for terms, const in ends:
                prob.add_row(terms, const, "<=", self.upper)
            return
        cmax = self.cmax = prob.continuous("cmax", min(floor, self.upper), self.upper)
        for terms, const in ends:
            row = {cmax: -1.0}
            for x, c in terms.items():
                _add(row, x, c)
            prob.add_row(row, const, "<=")
        for d in range(self.nd):  # every task on d runs before Cmax
            load = float(self.cur.loads[d]) * self.k
            terms = {cmax: 1.0}
            for t in self.free:
                if self.cur.device[t] == d:
                    load -= tt[t][d]
                self.add_place(terms, t, d, -tt[t][d])
            prob.add_row(terms, -load, ">=")

    def bounds(self, var: list[int], arcs: list[Arc], mint: dict[int, float],
               horizon: float) -> tuple[dict[int, float], dict[int, float]]:
        """Head (earliest start) and tail (least time from end to makespan) of
        the variable tasks, from their frozen predecessors and after successors;
        fixed tasks that start at ``horizon`` or later stay after it."""
        index = {t: i for i, t in enumerate(var)}
        hk = horizon * self.k
        head = {t: hk if t not in self.free and self.cur.start[t] >= horizon else 0.0 for t in var}
        tail = dict.fromkeys(var, 0.0)
        inner: list[tuple[int, int]] = []
        for u, v, _ in arcs:
            if u in index and v in index:
                inner.append((index[u], index[v]))
            elif v in index and self.frozen_mask[u]:
                head[v] = max(head[v], self.fixed_end(u))
            elif u in index and self.after_mask[v]:
                tail[u] = max(tail[u], self.tail_of(v))
        topo, succ, pred = topo_arcs(len(var), inner)
        for i in topo:
            t = var[i]
            head[t] = max([head[t]] + [head[var[p]] + mint[var[p]] for p in pred[i]])
        for i in reversed(topo):
            t = var[i]
            tail[t] = max([tail[t]] + [mint[var[q]] + tail[var[q]] for q in succ[i]])
        return head, tail

    def disjunctions_near(self, var: list[int], arcs: list[Arc], devs: dict, head: dict, latest: dict) -> None:
        """Non-overlap of a free task with each variable or frozen task that
        may share its device and is not ordered with it by the arcs."""
        tt, free, k, cur = self.tt, self.free, self.k, self.cur
        index = {t: i for i, t in enumerate(var)}
        reach = closure(len(var), tuple((index[u], index[v]) for u, v, _ in arcs if u in index and v in index))
        low = min((head[w] for w in free), default=0.0) / k
        near = [int(t) for t in np.flatnonzero(self.frozen_mask & (cur.ends > low))]
        pairs: set[tuple[int, int]] = set()
        for w in free:
            for t in var:
                if t != w and not (reach[index[w]] >> index[t]) & 1 and not (reach[index[t]] >> index[w]) & 1:
                    pairs.add((min(w, t), max(w, t)))
            for t in near:
                if self.fixed_end(t) > head[w] and self.fixed_dev[t] in devs[w]:
                    pairs.add((min(w, t), max(w, t)))
        lo, hi = dict(head), dict(latest)
        for t in near:
            lo[t] = hi[t] = cur.start[t] * k
        for i, j in sorted(pairs):
            shared = sorted(self.devices(i) & self.devices(j))
            if not shared:
                continue
            oij = self.o[i, j] = self.prob.binary(f"o_{i}_{j}")
            for d in shared:
                self.pair_rows(i, j, oij, d, max(0.0, hi[i] + tt[i][d] - lo[j]), max(0.0, hi[j] + tt[j][d] - lo[i]))

    # -- objective, start and answer ---------------------------------------------
    def flow(self, terms: dict, weight: float) -> None:
        """The sum of finish times: variable tasks as terms, the others at their current ends."""
        fixed = self.frozen_mask | self.after_mask
        self.obj_const += weight * float(self.cur.ends[fixed].sum()) * self.k
        for t in self.s:
            _add(terms, self.s[t], weight)
            self.obj_const += self.duration(terms, t, weight)

    def start_positions(self, dev0: tuple[int, ...], start: tuple[float, ...]) -> tuple[list[int], float]:
        return self.cur.pos, self.cur.makespan * self.k

    def starts(self) -> tuple[float, ...]:
        """Solved starts of the variable tasks; the others keep theirs."""
        return tuple(value(self.s[t]) / self.k if t in self.s else self.cur.start[t] for t in range(self.n))

    def extract(self, name: str, bound: float | None, warm: bool, elapsed: float) -> Solved:
        """The solution in task terms; the start solution itself when the solver found nothing better."""
        sub = self.sub
        objective = self.unscale(sum(c * level(var) for var, c in self.obj_terms.items()))
        if sub.start_value is not None and objective >= sub.start_value - REL_TOL * 1e-3 * abs(sub.start_value):
            status = "optimal" if name == "kOptimal" else "feasible"
            return Solved(status, sub.device, sub.start, self.cur.order, min(objective, sub.start_value),
                          bound, warm, elapsed, self.n_binaries(), self.prob.n_rows())
        # the new order keeps every fixed task's place: all device-order arcs between fixed tasks
        self.fixed_chain = chain_arcs(self.cur.order, frozenset(range(self.n)) - self.free)
        return super().extract(name, bound, warm, elapsed)
