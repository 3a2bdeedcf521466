"""Several inference jobs on the slices of a GPU (MIG instances or MPS shares): which job runs
on which slice, for the most throughput (docs/platforms.md, Jobs on slices).

Each job ``j`` (a model of a ``jobs.json``, requested at ``rate_j`` per second) runs whole on one
slice ``s``, one request at a time; one request takes ``t_js`` there, the sum of its tasks' times
on that device (a GPU runs one stream's kernels in order). The slices a platform lists run side
by side; jobs sharing a slice take turns, so the slice's load is ``U_s = sum_j rate_j * t_js``.
The plan minimises the largest load ``U = max_s U_s`` (minimum makespan on unrelated machines,
``R||Cmax``; Lenstra, Shmoys and Tardos, Math. Programming 1990), with each slice's memory
holding the footprints of its jobs' tasks (what ``--memory`` sums per device), and of the plans
with that ``U`` uses the most slices (fewer jobs taking turns). Every job can then
be served at ``rate_j / U`` requests per second and at ``rate_j / U_s`` with its slice's other
jobs scaled alike (``throughput`` below); ``U <= 1`` means every rate is met. The assignment is
exact: a MILP through the shared solver (:mod:`mapper.mapping.exact.solver`), started from the
largest-first greedy and reporting its bound; :func:`brute_force` checks it on small cases.

Interference: MIG instances own their SMs, L2 banks and memory controllers (NVIDIA MIG User
Guide, "Partitioning"), so jobs on different instances do not slow each other and none is
modelled. MPS clients are limited in SMs only and share the L2 cache and memory bandwidth
(NVIDIA MPS guide); the slowdown they cause each other is not modelled (no published model
of it was adopted), so MPS figures are upper bounds, and the plan says so.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mapper.core.graph import Placement, TaskGraph
from mapper.costing.cost import CostTable
from mapper.errors import InfeasibleError
from mapper.frontend.workload import App, app_tasks
from mapper.mapping.exact.solver import Problem, Terms, Var, level, run
from mapper.platform.devices import Device, Platform

#: Seconds the MILP may take (it starts from the greedy plan and keeps the better one).
TIME_LIMIT_S = 10.0
#: Jobs x slices past which :func:`brute_force` refuses (it tries every assignment).
BRUTE_FORCE_MAX = 200_000

MIG_NOTE = "MIG slices are isolated (own SMs, L2 and memory): no interference between them"
MPS_NOTE = ("MPS shares contend for L2 and memory bandwidth; that interference is not modelled, "
            "so their throughputs are upper bounds")


@dataclass(frozen=True, slots=True)
class Jobs:
    """The placement problem: per job its rate and per slice its request time (``inf``: cannot
    run there) and memory; per slice its memory (bytes, ``inf`` unknown)."""

    rates: tuple[float, ...]
    times: tuple[tuple[float, ...], ...]  # [job][slice] seconds a request
    memory: tuple[float, ...]  # [job] bytes
    capacity: tuple[float, ...]  # [slice] bytes

    def loads(self, assign: Sequence[int]) -> tuple[float, ...]:
        out = [0.0] * len(self.capacity)
        for j, s in enumerate(assign):
            out[s] += self.rates[j] * self.times[j][s]
        return tuple(out)

    def fits(self, assign: Sequence[int]) -> bool:
        used = [0.0] * len(self.capacity)
        for j, s in enumerate(assign):
            if self.times[j][s] == math.inf:
                return False
            used[s] += self.memory[j]
        return all(u <= c for u, c in zip(used, self.capacity))


@dataclass(frozen=True, slots=True)
class SharePlan:
    """Each job's slice (an index into ``slices``), the largest load, and how it was proven."""

    assign: tuple[int, ...]
    load: float
    status: str  # optimal | feasible | heuristic
    bound: float


def slice_devices(platform: Platform) -> tuple[int, ...]:
    """The GPUs the jobs may use when ``platform`` has a MIG slice or an MPS share; else ()."""
    devs = platform.devices
    if not any(d.mig or d.mps_percent is not None for d in devs):
        return ()
    return tuple(d.index for d in devs if d.kind == "gpu")


def problem(cost: CostTable, apps: Sequence[App], slices: Sequence[int]) -> Jobs:
    """The placement problem of ``apps`` on devices ``slices`` from the merged graph's costs."""
    members = app_tasks(cost.graph, apps)
    times = tuple(tuple(sum(cost.time[t][d] for t in ts) for d in slices) for ts in members)
    memory = tuple(sum(cost.footprint[t] for t in ts) for ts in members)
    return Jobs(tuple(1.0 / a.period for a in apps), times, memory,
                tuple(cost.memory_capacity[d] for d in slices))


def greedy(jobs: Jobs) -> SharePlan | None:
    """Largest job first (by its best load), each on the slice where the largest load grows least."""
    n, m = len(jobs.rates), len(jobs.capacity)
    order = sorted(range(n), key=lambda j: -min(jobs.rates[j] * t for t in jobs.times[j]))
    load, held = [0.0] * m, [0.0] * m
    assign = [-1] * n
    for j in order:
        ok = [s for s in range(m) if jobs.times[j][s] < math.inf and held[s] + jobs.memory[j] <= jobs.capacity[s]]
        if not ok:
            return None
        s = min(ok, key=lambda s: (max(load[s] + jobs.rates[j] * jobs.times[j][s], *load), s))
        assign[j] = s
        load[s] += jobs.rates[j] * jobs.times[j][s]
        held[s] += jobs.memory[j]
    return SharePlan(tuple(assign), max(load), "heuristic", 0.0)


def brute_force(jobs: Jobs) -> SharePlan | None:
    """The best assignment by trying all of them (small cases; a check of :func:`solve`): the
    least largest load, then the most slices used."""
    n, m = len(jobs.rates), len(jobs.capacity)
    if m ** n > BRUTE_FORCE_MAX:
        raise ValueError(f"{m}^{n} assignments is too many to try")
    best: SharePlan | None = None
    for assign in itertools.product(range(m), repeat=n):
        if jobs.fits(assign):
            u = max(jobs.loads(assign))
            if best is None or u < best.load * (1 - 1e-9) or (u <= best.load * (1 + 1e-9)
                                                                and used(assign) > used(best.assign)):
                best = SharePlan(assign, u, "optimal", u)
    return best


def _model(jobs: Jobs, cap: float | None) -> tuple[Problem, dict[tuple[int, int], Var], Var]:
    """The assignment MILP: ``x[j, s]`` job ``j`` on slice ``s``, each slice's load ``<= z`` (and
    ``z <= cap`` when given), each slice's memory within its capacity."""
    n, m = len(jobs.rates), len(jobs.capacity)
    p = Problem("slices")
    z = p.continuous("z", 0.0, cap)
    x = {(j, s): p.binary(f"x_{j}_{s}") for j in range(n) for s in range(m) if jobs.times[j][s] < math.inf}
    for j in range(n):
        p.add_row({x[j, s]: 1.0 for s in range(m) if (j, s) in x}, 0.0, "==", 1.0)
    for s in range(m):
        load: Terms = {z: -1.0}
        mem: Terms = {}
        for j in range(n):
            if (j, s) in x:
                load[x[j, s]] = jobs.rates[j] * jobs.times[j][s]
                if jobs.memory[j]:
                    mem[x[j, s]] = jobs.memory[j]
        p.add_row(load, 0.0, "<=", 0.0)
        if mem and jobs.capacity[s] < math.inf:
            p.add_row(mem, 0.0, "<=", jobs.capacity[s])
    return p, x, z


def _solved(jobs: Jobs, x: dict[tuple[int, int], Var]) -> tuple[int, ...]:
    m = len(jobs.capacity)
    return tuple(max((s for s in range(m) if (j, s) in x), key=lambda s: level(x[j, s]))
                 for j in range(len(jobs.rates)))


def used(assign: Sequence[int]) -> int:
    """The slices an assignment uses."""
    return len(set(assign))


def solve(jobs: Jobs, time_limit: float = TIME_LIMIT_S) -> SharePlan | None:
    """The assignment of least largest load (module docstring), and of those one that uses the
    most slices (the fewest jobs taking turns: shorter waits, the same throughput); None when no
    assignment fits. Two MILPs, the first started from :func:`greedy`."""
    start = greedy(jobs)
    p, x, z = _model(jobs, None)
    p.minimise({z: 1.0})
    begin = None
    if start is not None:
        begin = {"z": start.load, **{f"x_{j}_{s}": float(start.assign[j] == s) for j, s in x}}
    out = run(p, begin, time_limit, 0, len(x), lambda *_: None, False)
    if not out.has_solution:
        return start if start is not None and out.status != "kInfeasible" else None
    assign = _solved(jobs, x)
    if not jobs.fits(assign) or (start is not None and start.load <= max(jobs.loads(assign))):
        if start is None:
            return None
        assign = start.assign
    best = max(jobs.loads(assign))
    bound = min(out.bound if out.bound is not None else 0.0, best)
    assign = _spread(jobs, assign, best, time_limit)
    status = "optimal" if best <= bound * (1 + 1e-6) else "feasible"
    return SharePlan(assign, max(jobs.loads(assign)), status, bound)


def _spread(jobs: Jobs, assign: tuple[int, ...], best: float, time_limit: float) -> tuple[int, ...]:
    """Of the assignments with largest load at most ``best``, one that uses the most slices."""
    m = len(jobs.capacity)
    p, x, z = _model(jobs, best * (1 + 1e-9))
    y = [p.continuous(f"y_{s}", 0.0, 1.0) for s in range(m)]
    for s in range(m):
        p.add_row({y[s]: 1.0, **{x[j, t]: -1.0 for j, t in x if t == s}}, 0.0, "<=", 0.0)
    p.minimise({v: -1.0 for v in y})
    begin = {"z": best, **{f"x_{j}_{s}": float(assign[j] == s) for j, s in x},
             **{f"y_{s}": float(s in assign) for s in range(m)}}
    out = run(p, begin, time_limit, 0, len(x), lambda *_: None, False)
    if not out.has_solution:
        return assign
    spread = _solved(jobs, x)
    if jobs.fits(spread) and max(jobs.loads(spread)) <= best * (1 + 1e-9) and used(spread) > used(assign):
        return spread
    return assign


def plan_jobs(cost: CostTable, apps: Sequence[App], slices: Sequence[int]) -> tuple[Jobs, SharePlan]:
    """The placement of ``apps`` on ``slices``; InfeasibleError (exit 3) naming a job that fits none."""
    jobs = problem(cost, apps, slices)
    devs = cost.platform.devices
    for j, app in enumerate(apps):
        if not any(t < math.inf and jobs.memory[j] <= c for t, c in zip(jobs.times[j], jobs.capacity)):
            raise InfeasibleError(f"job {app.label!r} ({jobs.memory[j] / 2**30:.2f} GiB) runs on no slice of "
                                  f"{', '.join(devs[d].name for d in slices)}", obj=app.label)
    plan = solve(jobs)
    if plan is None:
        raise InfeasibleError("the jobs do not fit the slices' memory together", obj="jobs")
    return jobs, plan


@dataclass(frozen=True, slots=True)
class OnSlices:
    """A jobs file planned on a platform's slices: the problem, the plan, the slices (device
    indices) and the merged graph with each job pinned to its slice."""

    jobs: Jobs
    plan: SharePlan
    slices: tuple[int, ...]
    graph: TaskGraph

    def to_json(self, apps: Sequence[App], platform: Platform, latencies: Sequence[float]) -> dict:
        return sharing_json(self.jobs, self.plan, apps, platform, self.slices, latencies)


def plan_on_slices(graph: TaskGraph, platform: Platform, apps: Sequence[App], fuse: str = "auto",
                   precision: str | None = None) -> OnSlices | None:
    """The jobs of the merged ``graph`` placed on ``platform``'s slices (None: it has none), priced
    as the compile pipeline prices them (the precision's formats, then fusion)."""
    from mapper.costing.cost import build_cost_table
    from mapper.costing.fusion import fuse_for
    from mapper.costing.precision import with_precision

    slices = slice_devices(platform)
    if not slices:
        return None
    priced = with_precision(graph, precision) if precision is not None else graph
    priced = fuse_for(priced, platform, fuse)
    jobs, plan = plan_jobs(build_cost_table(priced, platform), apps, slices)
    names = [platform.devices[d].name for d in slices]
    return OnSlices(jobs, plan, slices, pin_jobs(graph, apps, plan, names))


def pin_jobs(graph: TaskGraph, apps: Sequence[App], plan: SharePlan, names: Sequence[str]) -> TaskGraph:
    """``graph`` (the merged jobs) with each job's tasks allowed on its slice only."""
    where: dict[int, str] = {}
    for j, ts in enumerate(app_tasks(graph, apps)):
        for t in ts:
            where[t] = names[plan.assign[j]]
    tasks = tuple(replace(t, placement=Placement(allow=(where[t.index],))) if t.index in where else t
                  for t in graph.tasks)
    return replace(graph, tasks=tasks)


def _kind(dev: Device) -> str:
    if dev.mig:
        return f"MIG {dev.mig}"
    if dev.mps_percent is not None:
        return f"MPS {dev.mps_percent:g}%"
    return "whole GPU"


def sharing_json(jobs: Jobs, plan: SharePlan, apps: Sequence[App], platform: Platform,
                 slices: Sequence[int], latencies: Sequence[float]) -> dict:
    """The ``apps.sharing`` report: per job its slice, request time, throughput and ``latency`` (in
    the mapped schedule, every job released together); per slice its load."""
    loads = jobs.loads(plan.assign)
    devs = [platform.devices[d] for d in slices]
    rows = []
    for j, app in enumerate(apps):
        s = plan.assign[j]
        rows.append({"name": app.label, "slice": devs[s].name, "request_s": jobs.times[j][s],
                     "rate": jobs.rates[j], "throughput": jobs.rates[j] / loads[s] if loads[s] > 0 else None,
                     "latency": latencies[j]})
    notes = []
    if any(d.mig for d in devs):
        notes.append(MIG_NOTE)
    if any(d.mps_percent is not None for d in devs):
        notes.append(MPS_NOTE)
    return {"objective": "max slice load", "load": plan.load, "bound": plan.bound, "status": plan.status,
            "scale": 1.0 / plan.load if plan.load else None, "jobs": rows,
            "slices": [{"name": d.name, "kind": _kind(d), "load": u} for d, u in zip(devs, loads)],
            "interference": notes}
