"""Choosing one sharding per table: TorchRec's greedy plan and the exact MILP
(:mod:`mapper.parallel.embedding_plan` defines the options, the loads and the rating)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mapper.mapping.exact.solver import Problem, Terms, level, run
from mapper.parallel.embedding_plan import Option, fits, rating

#: Seconds the MILP may take (it starts from the greedy plan and keeps the better one).
TIME_LIMIT_S = 20.0


@dataclass(frozen=True, slots=True)
class Solved:
    """A plan (one option per table, None when none fits), its rating and how it was proven."""

    plan: tuple[Option, ...] | None
    rating: float
    status: str  # optimal | feasible | heuristic | infeasible
    bound: float


def greedy_plan(choices: Sequence[Sequence[Option]], caps: Sequence[float], host_cap: float, gpus: int) -> Solved:
    """TorchRec's ``GreedyProposer`` (each table's cheapest sharding type and tier by perf, the
    next one when it cannot be placed) with its ``GreedyPerfPartitioner`` (tables by perf,
    heaviest first; a table-wise table on the least loaded GPU that holds it)."""
    kinds: list[list[list[Option]]] = []
    for opts in choices:
        by_kind: dict[tuple[str, str], list[Option]] = {}
        for o in opts:
            by_kind.setdefault((o.sharding, o.tier), []).append(o)
        kinds.append(sorted(by_kind.values(), key=lambda group: (min(o.perf for o in group), group[0].sharding)))
    order = sorted(range(len(choices)), key=lambda t: -min(o.perf for o in choices[t]))
    used = [0.0] * gpus
    host_used = 0.0
    load = [0.0] * gpus
    plan: list[Option | None] = [None] * len(choices)
    for t in order:
        for group in kinds[t]:
            ok = [o for o in group if fits(o, used, host_used, caps, host_cap)]
            if ok:
                pick = min(ok, key=lambda o: (max(load[d] + x for d, x in enumerate(o.load) if x > 0), o.devices))
                break
        else:
            return Solved(None, float("inf"), "infeasible", 0.0)
        plan[t] = pick
        host_used += pick.host
        for d in range(gpus):
            used[d] += pick.memory[d]
            load[d] += pick.load[d]
    done = tuple(o for o in plan if o is not None)
    return Solved(done, rating(done, gpus), "heuristic", 0.0)


def exact_plan(choices: Sequence[Sequence[Option]], caps: Sequence[float], host_cap: float, gpus: int,
               start: Solved, time_limit: float = TIME_LIMIT_S) -> Solved:
    """The plan of least rating under the memories: ``min z`` subject to one option per table,
    each GPU's load ``<= z`` and each memory within its capacity; started from ``start``, and
    ``start`` kept when the solver does not beat it."""
    p = Problem("embedding_plan")
    z = p.continuous("z", 0.0)
    x = [[p.binary(f"x_{t}_{i}") for i in range(len(opts))] for t, opts in enumerate(choices)]
    for row in x:
        p.add_row({v: 1.0 for v in row}, 0.0, "==", 1.0)
    for d in range(gpus):
        load: Terms = {z: -1.0}
        mem: Terms = {}
        for t, opts in enumerate(choices):
            for i, o in enumerate(opts):
                if o.load[d]:
                    load[x[t][i]] = o.load[d]
                if o.memory[d]:
                    mem[x[t][i]] = o.memory[d]
        p.add_row(load, 0.0, "<=", 0.0)
        if mem:
            p.add_row(mem, 0.0, "<=", caps[d])
    host: Terms = {x[t][i]: o.host for t, opts in enumerate(choices) for i, o in enumerate(opts) if o.host}
    if host:
        p.add_row(host, 0.0, "<=", host_cap)
    p.minimise({z: 1.0})
    begin: dict[str, float] | None = None
    if start.plan is not None:
        begin = {"z": start.rating}
        for t, opts in enumerate(choices):
            for i, o in enumerate(opts):
                begin[f"x_{t}_{i}"] = 1.0 if o is start.plan[t] else 0.0
    n = sum(len(v) for v in x)
    out = run(p, begin, time_limit, 0, n, lambda *_: None, False)
    if not out.has_solution:
        return start if start.plan is not None else Solved(None, float("inf"), "infeasible", 0.0)
    plan = tuple(opts[max(range(len(opts)), key=lambda i: level(x[t][i]))] for t, opts in enumerate(choices))
    value = rating(plan, gpus)
    bound = out.bound if out.bound is not None else 0.0
    status = "optimal" if out.status == "kOptimal" else "feasible"
    if start.plan is not None and start.rating <= value:
        return Solved(start.plan, start.rating, status if start.rating <= bound * (1 + 1e-6) else "feasible", bound)
    return Solved(plan, value, status, bound)
