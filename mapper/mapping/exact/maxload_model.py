"""The max-load throughput model as a MILP over task groups.

Tarnawski et al. (NeurIPS 2020, Section 4 and their ``throughput-ip``)
minimise the largest device load; here (``g`` a group of
:func:`mapper.mapping.maxload.task_groups`, ``u`` a task with consumers in
other groups ``H(u)``, ``d`` a device that pays transfers, i.e. not a CPU):

* ``x[g,d]`` binary, ``sum_d x[g,d] = 1``; ``x[g,d]`` only where every task of
  ``g`` may run on ``d`` (and, with ``memory``, the group fits);
* ``out[u,d] >= x[g(u),d] - x[h,d]`` and ``in[u,d] >= x[h,d] - x[g(u),d]``
  for ``h`` in ``H(u)``, both in ``[0, 1]``: ``u`` on ``d`` sends its output
  once if any consumer is elsewhere; ``d`` receives it once if any consumer
  is on ``d`` and ``u`` is not;
* ``period >= sum_g time[g][d] x[g,d] + sum_u c(u) (out[u,d] + in[u,d])`` for
  a paying device, ``period >= sum_g time[g][d] x[g,d]`` for a CPU;
* where ``u``'s edges have different times, ``c(u)`` is paid in levels: with
  ``c_1 > c_2 > ...`` the distinct times of its edges into each consumer
  group (the slowest edge into it), level ``l`` has its own ``out`` and
  ``in`` over the groups whose time is at least ``c_l``, priced
  ``c_l - c_{l+1}``; their sum is the slowest crossing edge, as the load
  counts it;
* with ``memory``: ``sum_g memory[g] x[g,d] <= capacity[d]``;
* interchangeable devices used in order of their lowest group index;
* with ``contiguous``, the contiguity rows of :func:`_contiguity`.

An edge's time is its slowest transfer between two devices
(:func:`~mapper.mapping.maxload.edge_transfer`), which is the model's
time when, as in the paper, a transfer takes the same time between any two
devices; otherwise the model prices every transfer at its slowest
route and its optimum is an upper bound (the caller re-evaluates exactly).
Minimising ``period`` pushes ``out`` and ``in`` to their exact values on the
bottleneck device. Times are scaled so the warm start's period is
:data:`~mapper.mapping.exact.subproblem.TIME_SCALE`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mapper.costing.cost import INF, CostTable
from mapper.mapping.exact import solver
from mapper.mapping.exact.solver import Problem, Var, level
from mapper.mapping.exact.subproblem import TIME_SCALE
from mapper.mapping.maxload import Groups, edge_transfer, pays_transfers
from mapper.mapping.orders import canonical_devices, identical_device_classes


@dataclass(frozen=True, slots=True)
class MaxLoadSolved:
    """The solver's answer in task terms (``device`` None when it found none)."""

    status: str  # optimal | feasible | none | infeasible
    device: tuple[int, ...] | None
    value: float | None  # the model's period, seconds
    bound: float | None  # the solver's lower bound, seconds
    n_binaries: int
    n_rows: int


def solve_max_load(cost: CostTable, groups: Groups, start: Sequence[int] | None, start_value: float | None,
                   memory: bool, time_limit: float, seed: int,
                   progress: Callable[[float | None, float | None], None] | None = None,
                   stop: Callable[[], bool] | None = None, contiguous: bool = False) -> MaxLoadSolved:
    """Build and solve the model (module docstring) from the warm start ``start`` (device per task)."""
    t0 = time.perf_counter()
    nd, n = cost.n_devices, groups.n
    k = TIME_SCALE / start_value if start_value and start_value < INF else 1.0
    prob = Problem("maxload")
    x: dict[tuple[int, int], Var] = {}
    for q in range(n):
        feas = [d for d in range(nd) if groups.time[q][d] < INF
                and (not memory or groups.memory[q] <= cost.memory_capacity[d] * (1 + 1e-9))]
        if not feas:
            return MaxLoadSolved("infeasible", None, None, None, 0, 0)
        for d in feas:
            x[q, d] = prob.binary(f"x_{q}_{d}")
        prob.add_row({x[q, d]: 1.0 for d in feas}, 0.0, "==", 1)
    if memory:
        for d in range(nd):
            if cost.memory_capacity[d] < INF:
                row = {x[q, d]: groups.memory[q] for q in range(n) if (q, d) in x and groups.memory[q] > 0}
                if row:
                    prob.add_row(row, 0.0, "<=", cost.memory_capacity[d])
    for cls in identical_device_classes(cost):
        for prev, d in zip(cls, cls[1:]):
            for q in range(n):
                if (q, d) in x:
                    row = {x[q, d]: 1.0}
                    for r in range(q):
                        if (r, prev) in x:
                            row[x[r, prev]] = row.get(x[r, prev], 0.0) - 1.0
                    prob.add_row(row, 0.0, "<=")
    if contiguous:
        _contiguity(cost, groups, prob, x)
    period = prob.continuous("period", 0)
    pays = pays_transfers(cost)
    loads: list[dict[Var, float]] = [{period: -1.0} for _ in range(nd)]
    for d in range(nd):
        for q in range(n):
            if (q, d) in x and groups.time[q][d] > 0:
                loads[d][x[q, d]] = groups.time[q][d] * k
    flows: dict[str, Var] = {}
    levels = _price_levels(cost, groups, k)
    for u, steps in enumerate(levels):
        for li, (step, others) in enumerate(steps):
            for d in range(nd):
                if pays[d]:
                    _flows(prob, x, loads[d], flows, f"{u}_{d}_{li}", groups.of[u], others, d, step)
    for d in range(nd):
        prob.add_row(loads[d], 0.0, "<=")
    prob.minimise({period: 1.0})
    vals = _warm(cost, groups, start, x, flows, levels, start_value, k, contiguous) if start is not None else None

    def on_event(run_time: float, incumbent: float, bound: float, improving: bool) -> None:
        if progress is not None:
            progress(incumbent / k if incumbent < INF else None, bound / k if bound > -INF else None)

    n_bin, n_rows = len(x), prob.n_rows()
    limit = max(0.01, time_limit - (time.perf_counter() - t0))
    out_ = solver.run(prob, vals, limit, seed, n_bin, on_event, progress is not None, stop)
    bound = out_.bound / k if out_.bound is not None else None
    if out_.status in ("kInfeasible", "kUnboundedOrInfeasible"):
        return MaxLoadSolved("infeasible", None, None, bound, n_bin, n_rows)
    if not out_.has_solution:
        return MaxLoadSolved("none", None, None, bound, n_bin, n_rows)
    device = [0] * cost.n_tasks
    for q, members in enumerate(groups.members):
        d = max((d for d in range(nd) if (q, d) in x), key=lambda d: (level(x[q, d]), -d))
        for t in members:
            device[t] = d
    status = "optimal" if out_.status == "kOptimal" else "feasible"
    value = level(period) / k
    if status == "optimal" and bound is None:
        bound = value
    return MaxLoadSolved(status, tuple(device), value, bound, n_bin, n_rows)


def _contiguity(cost: CostTable, groups: Groups, prob: Problem, x: dict) -> None:
    """Every device's forward tasks contiguous (Tarnawski et al.'s ``throughput-ip``):
    ``y[v,d] >= x[v,d]``, and for a forward edge ``u -> v`` ``y[v,d] <= y[u,d]`` and
    ``y[v,d] <= x[v,d] - x[u,d] + 1``; ``y`` marks the tasks on ``d`` and those
    before them, and a path that leaves ``d`` cannot come back."""
    g = cost.graph
    forward = [t for t in range(cost.n_tasks) if not g.tasks[t].backward]
    for d in range(cost.n_devices):
        y = {t: prob.continuous(f"y_{t}_{d}", 0, 1) for t in forward}
        for t in forward:
            var = x.get((groups.of[t], d))
            if var is not None:
                prob.add_row({y[t]: 1.0, var: -1.0}, 0.0, ">=")
        for e in g.edges:
            u, v = e.src, e.dst
            if u not in y or v not in y:
                continue
            prob.add_row({y[v]: 1.0, y[u]: -1.0}, 0.0, "<=")
            xu, xv = x.get((groups.of[u], d)), x.get((groups.of[v], d))
            if xu is xv:
                continue  # one group: the row is y[v] <= 1
            row = {y[v]: 1.0}
            if xv is not None:
                row[xv] = -1.0
            if xu is not None:
                row[xu] = 1.0
            prob.add_row(row, 0.0, "<=", 1)


def _flows(prob: Problem, x: dict, load: dict[Var, float], flows: dict[str, Var], key: str, home: int,
           others: list[int], d: int, step: float) -> None:
    """``out`` and ``in`` of one output at one price level on device ``d``: sent
    once if a consumer group in ``others`` is off ``d``, received once if one is on it."""
    here = x.get((home, d))
    there = [x[h, d] for h in others if (h, d) in x]
    if here is not None:
        out = flows[f"o_{key}"] = prob.continuous(f"o_{key}", 0, 1)
        for var in there:
            prob.add_row({out: 1.0, here: -1.0, var: 1.0}, 0.0, ">=")
        if len(there) < len(others):  # a consumer group that cannot be on d is elsewhere
            prob.add_row({out: 1.0, here: -1.0}, 0.0, ">=")
        load[out] = step
    if there:
        inn = flows[f"i_{key}"] = prob.continuous(f"i_{key}", 0, 1)
        for var in there:
            row = {inn: 1.0, var: -1.0}
            if here is not None:
                row[here] = 1.0
            prob.add_row(row, 0.0, ">=")
        load[inn] = step


def _price_levels(cost: CostTable, groups: Groups, k: float) -> list[list[tuple[float, list[int]]]]:
    """Per task ``u``: its price levels, each ``(c_l - c_{l+1}, consumer groups
    whose slowest edge from u costs at least c_l)`` (scaled by ``k``; module docstring)."""
    g = cost.graph
    out = []
    for u in range(cost.n_tasks):
        home = groups.of[u]
        price: dict[int, float] = {}  # consumer group -> the slowest edge of u into it
        for e in g.succs[u]:
            h = groups.of[g.edges[e].dst]
            if h != home:
                price[h] = max(price.get(h, 0.0), edge_transfer(cost, e) * k)
        costs = sorted({c for c in price.values() if c > 0}, reverse=True)
        out.append([(c - (costs[i + 1] if i + 1 < len(costs) else 0.0), sorted(h for h, ch in price.items() if ch >= c))
                    for i, c in enumerate(costs)])
    return out


def _warm(cost: CostTable, groups: Groups, start: Sequence[int], x: dict, flows: dict[str, Var],
          levels: list[list[tuple[float, list[int]]]], start_value: float | None, k: float,
          contiguous: bool) -> dict[str, float]:
    """Column values of the start assignment (devices relabelled for the symmetry rows)."""
    gdev = canonical_devices(tuple(start[m[0]] for m in groups.members), identical_device_classes(cost))
    vals = {var.name: 1.0 if gdev[q] == d else 0.0 for (q, d), var in x.items()}
    g = cost.graph
    for name, var in flows.items():
        kind, u_s, d_s, level_s = name.split("_")
        u, d = int(u_s), int(d_s)
        home = groups.of[u]
        cons = {gdev[h] for h in levels[u][int(level_s)][1]}
        if kind == "o":
            vals[var.name] = 1.0 if gdev[home] == d and any(c != d for c in cons) else 0.0
        else:
            vals[var.name] = 1.0 if gdev[home] != d and d in cons else 0.0
    if start_value is not None:
        vals["period"] = start_value * k
    if contiguous:
        # y[t,d]: t is on d or a forward path leads from t to a task on d
        for d in range(cost.n_devices):
            on = [False] * cost.n_tasks
            for t in reversed(g.topo_order):
                if g.tasks[t].backward:
                    continue
                on[t] = gdev[groups.of[t]] == d or any(on[v] for v in g.succ_tasks(t) if not g.tasks[v].backward)
                vals[f"y_{t}_{d}"] = 1.0 if on[t] else 0.0
    return vals
