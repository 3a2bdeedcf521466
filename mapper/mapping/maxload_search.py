"""The ``milp`` mapper's strategy for the max-load throughput model.

Tarnawski et al. (NeurIPS 2020) give an optimal DP over contiguous splits
and an integer program for arbitrary ones. Here the contiguous-split DP of
:func:`mapper.mapping.maxload.split_dp` and the list-scheduling heuristics
give the warm start, and the exact model of
:mod:`mapper.mapping.exact.maxload_model` searches every split (contiguous
or not; only contiguous ones with ``MapOptions.contiguous``) for the rest
of the time limit. The answer says whether its split is contiguous, and is
``optimal`` only when the solver proves it and the
model prices transfers exactly (one transfer time per edge, as in the paper).
The memory knapsack of the model always applies.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from mapper.core.units import fmt_objective
from mapper.costing.cost import CostTable
from mapper.engine.schedule import Schedule
from mapper.errors import InfeasibleError
from mapper.mapping.base import MapOptions, MapResult
from mapper.mapping.exact.incumbent import Incumbent, checked
from mapper.mapping.exact.maxload_model import solve_max_load
from mapper.mapping.exact.result import make_result, progress_reporter, solve_outcome
from mapper.mapping.exact.subproblem import REL_TOL
from mapper.mapping.maxload import non_contiguous, split_dp, task_groups, uniform_transfers
from mapper.mapping.objectives import objective_value


def map_max_load(cost: CostTable, options: MapOptions, best: Incumbent | None, notes: Sequence[str],
                 t0: float) -> MapResult:
    """Minimise the max-load period (module docstring); ``best`` is the best heuristic's schedule."""
    notes = list(notes)
    memory = True  # the model's knapsack (the pipeline turns --memory on for it, so the validator checks it)
    groups = task_groups(cost, fuse_cycles=options.contiguous)
    dp = split_dp(cost, groups, memory)
    incumbent = best
    if options.contiguous and best is not None and non_contiguous(cost, best.schedule.device_of):
        incumbent = None  # the heuristic's split is not contiguous
    if dp is not None:
        sched = checked(cost, dp[0], None, options.schedule)
        if sched is not None and not (options.contiguous and non_contiguous(cost, dp[0])):
            value = objective_value(sched, "throughput")
            notes.append(f"contiguous-split DP over {groups.n} groups: period {fmt_objective(value, 'throughput')}")
            if incumbent is None or value < incumbent.value * (1 - REL_TOL):
                incumbent = Incumbent("the contiguous-split DP", sched, value)
    if incumbent is None:  # everything on one device is a contiguous split, when it fits
        for d in range(cost.n_devices):
            sched = checked(cost, [d] * cost.n_tasks, None, options.schedule)
            if sched is not None and sum(cost.footprint) <= cost.memory_capacity[d]:
                value = objective_value(sched, "throughput")
                if incumbent is None or value < incumbent.value * (1 - REL_TOL):
                    incumbent = Incumbent(f"everything on {cost.platform.devices[d].name}", sched, value)
    exact_prices = uniform_transfers(cost)
    if not exact_prices:
        notes.append("transfer times differ between device pairs: the model prices each at its slowest route, "
                     "and the schedule is re-evaluated exactly")
    report = progress_reporter(options, t0, "exact MILP")
    solved = solve_max_load(cost, groups, incumbent.schedule.device_of if incumbent else None,
                            incumbent.value if incumbent else None, memory,
                            max(0.01, options.time_limit - (time.perf_counter() - t0)), options.seed,
                            progress=report, stop=options.stop, contiguous=options.contiguous)
    start = (f"started from {incumbent.name}'s assignment (period {fmt_objective(incumbent.value, 'throughput')})"
             if incumbent else "no heuristic assignment to start from")
    notes.append(f"max-load MILP: {solve_outcome(solved.status)}; {start}; its model has {solved.n_binaries:,} "
                 f"yes/no choices and {solved.n_rows:,} constraints")
    found: tuple[Schedule, float, str] | None = None
    if incumbent is not None:
        found = (incumbent.schedule, incumbent.value, "heuristic")
    if solved.device is not None:
        sched = checked(cost, solved.device, None, options.schedule)
        if sched is None:
            notes.append("the MILP's assignment was not kept: it does not validate")
        else:
            got = objective_value(sched, "throughput")
            if found is None or got <= found[1] * (1 + REL_TOL):
                found = (sched, got, solved.status if exact_prices else "feasible")
    if found is None:
        what = "contiguous split" if options.contiguous else "assignment"
        raise InfeasibleError(f"no {what} fits the devices and their memory"
                              + (" within the time limit" if solved.status == "none" else ""), obj=cost.graph.name)
    schedule, value, status = found
    bound = solved.bound if exact_prices else None
    if bound is not None and value <= bound * (1 + REL_TOL):
        status = "optimal"
    bad = non_contiguous(cost, schedule.device_of)
    names = cost.platform.devices
    notes.append(("the split is contiguous" + (" (as asked)" if options.contiguous else "")) if not bad else
                 "the split is not contiguous on " + ", ".join(names[d].name for d in bad))
    return make_result(cost, options, schedule, value, status, bound, t0, notes)
