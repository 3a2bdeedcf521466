"""The ``cpsat`` mapper: the exact engine's second backend, OR-Tools CP-SAT.

The same strategy as :mod:`mapper.mapping.milp` with the model of
:mod:`mapper.mapping.exact.cpsat_model` in place of the MILP: every
heuristic runs first; when the best meets the lower bound it is optimal
without a search; otherwise CP-SAT searches from it (a solution hint) for
the time limit, with a fixed seed (two one-worker searches side by side
where there are two cores; the answer does not depend on which proves
first). Its answer is re-timed with the exact times by
:func:`mapper.engine.schedule.build_schedule` (each device's order by CP-SAT
start) and validated; the result is ``optimal``
when CP-SAT proves its (rounded-down, so relaxed) model optimal and the
re-timed value is within the rounding of that bound. The max-load
throughput model goes to the max-load strategy of the ``milp`` mapper.
"""

from __future__ import annotations

import time
from dataclasses import replace

from mapper.core.units import fmt_objective
from mapper.costing.cost import CostTable
from mapper.engine.validate import validate
from mapper.errors import InfeasibleError, MapperError
from mapper.mapping.base import MapOptions, Mapper, MapResult, check_options
from mapper.mapping.exact.cpsat_model import SCALE, solve_cpsat
from mapper.mapping.exact.feasibility import check_feasible
from mapper.mapping.exact.incumbent import (
    Incumbent,
    best_heuristic,
    delay_options,
    retime,
    schedule_order,
    serial_upper_bound,
    value_of,
)
from mapper.mapping.exact.result import (
    inexact_note,
    inexact_options,
    lower_bound_for,
    make_result,
    progress_reporter,
    proven_by_bound,
    solve_outcome,
)
from mapper.mapping.exact.subproblem import REL_TOL
from mapper.mapping.maxload_search import map_max_load
from mapper.mapping.orders import order_from_starts

NAME = "cpsat"


class CpSatMapper(Mapper):
    """Exact mapping with OR-Tools CP-SAT (interval variables, optional per
    device, no-overlap per device; Laborie et al., Constraints 2018),
    warm-started from the best heuristic."""

    name = NAME
    summary = "exact CP-SAT model (OR-Tools) warm-started from the best heuristic"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        t0 = time.perf_counter()
        check_options(options)
        check_feasible(cost, options.schedule)
        best, notes_ = best_heuristic(cost, options)
        notes = list(notes_)
        objective = options.objective
        if objective == "throughput" and cost.platform.throughput_model == "max-load":
            result = map_max_load(cost, options, best, notes, t0)
            return replace(result, mapper=NAME, notes=(*result.notes, "max-load: solved by the max-load MILP"))
        bound = lower_bound_for(cost, objective, options.schedule, None)
        proven = proven_by_bound(cost, options, best, bound, notes, t0)
        if proven is not None:
            return self._done(proven)
        return self._done(search(cost, options, best, notes, t0, options.time_limit - (time.perf_counter() - t0),
                                 bound))

    @staticmethod
    def _done(result: MapResult) -> MapResult:
        return replace(result, mapper=NAME)


def search(cost: CostTable, options: MapOptions, best: Incumbent | None, notes: list[str], t0: float,
           time_limit: float, bound: float | None, patience: float | None = None) -> MapResult:
    """CP-SAT from the best heuristic ``best`` for ``time_limit`` seconds,
    stopping at ``bound`` (a known lower bound), or after ``patience`` seconds
    when it has found no solution by then; the re-timed, validated
    schedule, ``optimal`` when CP-SAT proves it, else the heuristic's when
    CP-SAT finds nothing better (status ``heuristic``). ``notes`` grows."""
    objective = options.objective
    sopts = options.schedule
    inexact = inexact_options(sopts)
    if inexact:
        note = inexact_note(inexact)
        if note not in notes:
            notes.append(note)
    # the warm start in CP-SAT's own (delay) model: under streaming or contention the heuristic's
    # re-timed makespan is not a makespan of that model, and bounding by it would leave nothing
    warm = (retime(cost, best.schedule.device_of, schedule_order(best.schedule), delay_options(sopts))
            if best is not None and inexact else best.schedule if best is not None else None)
    upper = warm.makespan * (1 + 1e-9) if warm is not None and objective == "makespan" else serial_upper_bound(cost)
    hint = (warm.device_of, tuple(s.start for s in warm.slots)) if warm is not None else None
    mb = options.makespan_bound if objective != "makespan" else None
    pipelined = objective == "throughput" and cost.platform.throughput_model == "1f1b"
    report = progress_reporter(options, t0, "CP-SAT")
    solved = solve_cpsat(cost, objective, upper, memory=sopts.memory, area=sopts.area, makespan_bound=mb,
                         hint=hint, time_limit=max(0.01, time_limit),
                         seed=options.seed, micro_batches=cost.platform.micro_batches if pipelined else 1,
                         progress=lambda el, inc, bnd: report(inc, bnd), stop=options.stop, target=bound,
                         patience=patience)
    names = [d.name for d in cost.platform.devices]
    notes.append(f"CP-SAT: {_outcome(solved.status, best, objective)}"
                 + (f"; started from {best.name}'s schedule" if best is not None else "")
                 + f"; its model has {solved.n_literals:,} placement choices and {solved.n_constraints:,} constraints"
                 + "".join(f"; {', '.join(names[d] for d in pool)} pooled (interchangeable, no transfers "
                           "between them)" for pool in solved.pools)
                 + (f"; it stopped after {patience:.1f} s without finding a schedule"
                    if solved.gave_up and patience is not None else ""))
    if solved.device is None:
        if best is None:
            raise InfeasibleError("no mapping satisfies the constraints" if solved.status == "infeasible"
                                  else f"no mapping found within the time limit of {options.time_limit:g} s",
                                  obj=cost.graph.name)
        return make_result(cost, options, best.schedule, best.value, "heuristic", solved.bound, t0, notes)
    try:
        order = order_from_starts(cost, solved.device, solved.start) if solved.start is not None else None
        sched = retime(cost, solved.device, order, sopts)
        bad = [v.message for v in validate(sched)]
    except MapperError as err:
        bad = [err.message]
    if not bad and mb is not None and sched.makespan > mb * (1 + REL_TOL):
        bad = [f"makespan {sched.makespan:.6g} s over the bound"]
    if bad:
        notes.append(f"CP-SAT's schedule was not kept: {bad[0]}")
        if best is None:
            raise InfeasibleError("the CP-SAT schedule does not validate and no heuristic succeeded",
                                  obj=cost.graph.name)
        return make_result(cost, options, best.schedule, best.value, "heuristic", solved.bound, t0, notes)
    value = value_of(sched, objective)
    status = "feasible"
    slack = 2 * (cost.n_tasks + len(cost.graph.edges)) / SCALE  # the rounding, relative to the horizon
    if solved.status == "optimal" and not inexact and solved.bound is not None \
            and value <= solved.bound * (1 + REL_TOL) + slack * upper:
        status = "optimal"
    if best is not None and best.value < value * (1 - REL_TOL):
        notes.append(f"CP-SAT's schedule ({fmt_objective(value, objective)}) is worse than {best.name}'s once "
                     f"re-timed; {best.name}'s is kept")
        sched, value, status = best.schedule, best.value, "heuristic"
    return make_result(cost, options, sched, value, status, solved.bound, t0, notes)


def _outcome(status: str, best: Incumbent | None, objective: str) -> str:
    """What a CP-SAT search established, in words: bounded by ``best``'s value, "infeasible" means
    that nothing beats it."""
    if status == "infeasible" and best is not None:
        return f"proved that no schedule beats {best.name}'s ({fmt_objective(best.value, objective)})"
    return solve_outcome(status)
