"""How the exact engine reports: a valid lower bound and the gap of every
result, and progress to the caller's live line."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from mapper.core.units import fmt_objective
from mapper.costing.cost import CostTable
from mapper.engine.schedule import Schedule, ScheduleOptions
from mapper.mapping.base import MapOptions, MapResult, Progress
from mapper.mapping.bounds import lower_bound
from mapper.mapping.exact.incumbent import Incumbent
from mapper.mapping.exact.subproblem import REL_TOL
from mapper.mapping.objectives import pipeline_notes

#: The name results of the exact engine carry (``mapper compile --mapper milp``).
NAME = "milp"

#: ``report(incumbent, bound=None)``: a progress report in the caller's units.
Reporter = Callable[..., None]


def lower_bound_for(cost: CostTable, objective: str, options: ScheduleOptions,
                    solver_bound: float | None) -> float | None:
    """A valid lower bound on the objective: the larger of the solver's
    (dropped under streaming, which the MILP does not model) and
    :func:`mapper.mapping.bounds.lower_bound`."""
    bounds = [b for b in (lower_bound(cost, objective, options),) if b is not None]
    if solver_bound is not None and not options.streaming:
        bounds.append(solver_bound)
    return max(bounds) if bounds else None


def gap_of(value: float, bound: float | None) -> float | None:
    """``(value - bound) / value``, or None without a bound."""
    if bound is None:
        return None
    if value <= 0:
        return 0.0
    return max(0.0, (value - bound) / value)


def make_result(cost: CostTable, options: MapOptions, schedule: Schedule, value: float, status: str,
                solver_bound: float | None, t0: float, notes: Sequence[str]) -> MapResult:
    """The exact engine's result, with a valid lower bound and the gap; a
    value that meets the bound is ``optimal`` whatever the search said."""
    bound = lower_bound_for(cost, options.objective, options.schedule, solver_bound)
    if status != "optimal" and bound is not None and value <= bound * (1 + REL_TOL):
        status = "optimal"
        notes = (*notes, f"the schedule reaches the lower bound {fmt_objective(bound, options.objective)}, which "
                         "proves it optimal")
    if options.should_stop():
        notes = (*notes, "interrupted: the search was stopped early; this is the best schedule found by then")
    notes = (*notes, *pipeline_notes(schedule, options.objective))
    return MapResult(
        schedule=schedule,
        mapper=NAME,
        status=status,
        objective=options.objective,
        objective_value=value,
        lower_bound=bound,
        gap=gap_of(value, bound),
        solve_time=time.perf_counter() - t0,
        notes=tuple(notes),
    )


def inexact_options(options: ScheduleOptions) -> list[str]:
    """The schedule options the exact models do not model (applied when their schedule is re-timed)."""
    return [o for o in ("contention", "streaming") if getattr(options, o)]


def inexact_note(inexact: Sequence[str]) -> str:
    """What ``inexact`` options mean for an exact search's answer, in words."""
    what = " and ".join(inexact)
    return (f"{what}: the exact searches place tasks as if each transfer and task waited for the one before "
            f"(the delay model), and {what} is applied to their schedule afterwards; so the schedule is not "
            f"proven optimal with {what}, and its gap is to a lower bound that allows it")


def solve_outcome(status: str) -> str:
    """What an exact solve established (its status), in words."""
    if status == "optimal":
        return "proved its schedule the best in its model"
    if status == "feasible":
        return "found schedules but did not prove the best within its time"
    if status == "infeasible":
        return "no schedule satisfies its constraints"
    return "found no schedule within its time"


def proven_by_bound(cost: CostTable, options: MapOptions, best: Incumbent | None, bound: float | None,
                    notes: Sequence[str], t0: float) -> MapResult | None:
    """The best heuristic's result as ``optimal`` when it meets ``bound`` (nothing is left
    to search), else None."""
    if best is None or bound is None or best.value > bound * (1 + REL_TOL):
        return None
    notes = (*notes, f"{best.name}'s schedule reaches the lower bound {fmt_objective(bound, options.objective)}, "
                     "so it is optimal: no search was needed")
    return make_result(cost, options, best.schedule, best.value, "optimal", None, t0, notes)


def progress_reporter(options: MapOptions, t0: float, phase: str = "") -> Reporter:
    """``report(incumbent, bound=None)`` passing a :class:`Progress` of ``phase`` to
    ``options.progress`` (elapsed from ``t0``); does nothing without one."""

    def report(incumbent: float | None, bound: float | None = None) -> None:
        if options.progress is not None:
            options.progress(Progress(time.perf_counter() - t0, incumbent, bound, phase))

    return report
