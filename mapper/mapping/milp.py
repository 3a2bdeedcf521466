"""The ``milp`` mapper: the strategy that drives the exact engine.

It runs every heuristic (:mod:`.exact.incumbent`); when the best meets the
lower bound (:func:`~mapper.mapping.exact.result.lower_bound_for`) that
proves it optimal and nothing is searched. Otherwise two exact engines take
turns, a sequential portfolio (they prove different instances:
benchmarks/exact_backends.py, benchmarks/stg.py): CP-SAT
(:func:`.cpsat.search`) for :data:`CPSAT_SHARE` of the time left, warm-started
from the best heuristic; then, unless CP-SAT proved its answer, the exact
MILP (:mod:`.exact.formulation`, solved by :mod:`.exact.solve`) from the
better schedule. HiGHS runs with one thread, a fixed seed, the warm start
(checked: the solver reports it as its first incumbent) and the rest of the
time limit; PuLP's bundled CBC only when HiGHS is unavailable. The solution
is re-timed by :func:`mapper.engine.schedule.build_schedule` with each device's
order sorted by MILP start time, and validated. Status ``optimal`` when a
solver proves it (and the options are ones the models cover: contention and
streaming are applied only when re-timing), else ``feasible``; ``heuristic``
when nothing better than the best heuristic's schedule was found. The lower
bound is the higher of the two engines'.

Above :data:`LNS_FIRST_TASKS` tasks, MILP-window LNS (:mod:`.lns`) improves
the warm start for :data:`LNS_SHARE` of the time left before the MILP.
Graphs above :data:`EXACT_MAX_TASKS` tasks or :data:`EXACT_MAX_PAIRS`
ordering binaries skip the MILP: CP-SAT takes :data:`CPSAT_LARGE_SHARE` of
the time while its model has at most :data:`CPSAT_MAX_TERMS` terms, then
:func:`mapper.mapping.lns.map_large` (no exact model).
"""

from __future__ import annotations

import time
from dataclasses import replace

from mapper.core.units import fmt_objective
from mapper.costing.cost import CostTable
from mapper.engine.validate import validate
from mapper.errors import InfeasibleError, MapperError
from mapper.mapping import cpsat, hypergraph
from mapper.mapping.base import MULTILEVEL_MIN_TASKS, MapOptions, Mapper, MapResult, check_options
from mapper.mapping.exact import solver
from mapper.mapping.exact.cpsat_model import model_terms
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
    NAME,
    inexact_note,
    inexact_options,
    lower_bound_for,
    make_result,
    progress_reporter,
    proven_by_bound,
    solve_outcome,
)
from mapper.mapping.exact.solve import solve
from mapper.mapping.exact.subproblem import REL_TOL, Subproblem, objective_needs_time
from mapper.mapping.lns import MIN_GAIN, WINDOW, describe_change, improve, map_large, near_enough, stall_note
from mapper.mapping.maxload_search import map_max_load
from mapper.mapping.orders import count_order_pairs

#: Above this many tasks the exact model is not attempted (LNS instead).
EXACT_MAX_TASKS = 60
#: Above this many ordering binaries the exact model is not attempted.
EXACT_MAX_PAIRS = 1500
#: Above this many tasks, LNS first improves the warm start for
#: :data:`LNS_SHARE` of the time limit (benchmarks/mapping.py: at 30-50 tasks
#: 10 s of LNS beat 20 s of the full model on most graphs).
LNS_FIRST_TASKS = 20
LNS_SHARE = 0.5
#: Share of the time left that CP-SAT gets before LNS and the MILP (a
#: sequential portfolio; CP-SAT stops early when it proves its answer). The
#: larger share: on random DAGs, the examples and the STG set CP-SAT proves
#: more and finds as good or better schedules in the same time
#: (benchmarks/exact_backends.py, benchmarks/stg.py).
CPSAT_SHARE = 0.75
#: Above this many model terms (placement literals plus conditional
#: transfer constraints) a large graph skips CP-SAT and goes to LNS only.
CPSAT_MAX_TERMS = 30_000
#: CP-SAT's share on graphs above the MILP's size limit, where LNS finds the
#: better schedules on random DAGs (benchmarks/mapping.py --lns) and CP-SAT
#: proves the Standard Task Graph optima (benchmarks/stg.py, 15 s: all 360
#: of the 100-task ones, each within 5.2 s).
CPSAT_LARGE_SHARE = 0.5
#: ... and there it stops after this share of its turn when no search has
#: found a solution: on 500 and more tasks with transfers even the hint's
#: takes CP-SAT longer than its turn, and LNS then has the time.
CPSAT_LARGE_PATIENCE = 0.25


def multilevel_wanted(cost: CostTable, options: MapOptions) -> bool:
    """``--coarsen multilevel``, or ``auto`` past :data:`MULTILEVEL_MIN_TASKS` tasks (minimising the
    makespan or the energy) or on a platform with task or fan-in limits (:mod:`.limits`), when
    Mt-KaHyPar is installed."""
    if options.coarsen == "chains":
        return False
    if options.coarsen == "multilevel":
        return True
    limited = any(d.max_tasks is not None or d.max_inbound is not None for d in cost.platform.devices)
    big = cost.n_tasks > MULTILEVEL_MIN_TASKS and options.objective in ("makespan", "energy")
    return (limited or big) and hypergraph.available()


class MilpMapper(Mapper):
    """Exact communication-aware MILP (Venugopalan & Sinnen, IEEE TPDS 2015;
    throughput after Wilhelm et al., arXiv 2208.06321), warm-started from the
    best heuristic; LNS over a coarsened graph above :data:`EXACT_MAX_TASKS`
    tasks or :data:`EXACT_MAX_PAIRS` ordering binaries (see :mod:`.lns`)."""

    name = NAME
    summary = "exact MILP (HiGHS) warm-started from the best heuristic; LNS for large graphs"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        t0 = time.perf_counter()
        check_options(options)
        check_feasible(cost, options.schedule)
        if multilevel_wanted(cost, options):
            from mapper.mapping.multilevel import map_multilevel

            return map_multilevel(cost, options, t0)
        heuristics = progress_reporter(options, t0, "heuristics")
        heuristics(None, None)
        bound = lower_bound_for(cost, options.objective, options.schedule, None)
        large = cost.n_tasks > EXACT_MAX_TASKS or count_order_pairs(cost) > EXACT_MAX_PAIRS
        keeps_near = large and options.objective != "deadline" and not (
            options.objective == "throughput" and cost.platform.throughput_model == "max-load")
        # past the exact sizes a heuristic within MIN_GAIN of the bound is kept (lns.near_enough):
        # the heuristics after it could not be kept for more
        best, notes = best_heuristic(cost, options, bound * (1 + MIN_GAIN) if keeps_near and bound is not None
                                     else None)
        heuristics_s = time.perf_counter() - t0
        if best is not None:
            heuristics(best.value, None)
        done = progress_reporter(options, t0, "done")
        if options.objective == "throughput" and cost.platform.throughput_model == "max-load":
            result = map_max_load(cost, options, best, notes, t0)
            done(result.objective_value, result.lower_bound)
            return result
        proven = proven_by_bound(cost, options, best, bound, notes, t0)
        if proven is not None:
            done(proven.objective_value, proven.lower_bound)
            return proven
        if options.objective == "deadline":
            result = self._deadline(cost, options, best, notes, t0, bound)
            done(result.objective_value, result.lower_bound)
            return result
        if large:
            result = self._large(cost, options, best, notes, t0, heuristics_s, bound)
            done(result.objective_value, result.lower_bound)
            return result
        result = self._exact(cost, options, best, notes, t0, progress_reporter(options, t0, "exact MILP"), bound)
        done(result.objective_value, result.lower_bound)
        return result

    @staticmethod
    def _deadline(cost: CostTable, options: MapOptions, best: Incumbent | None, notes, t0: float,
                  bound: float | None) -> MapResult:
        """Deadlines are modelled by CP-SAT (the largest tardiness, exactly on whole times);
        past the exact sizes the best heuristic (EDF-ordered HEFT among them) is kept."""
        if best is not None and (cost.n_tasks > EXACT_MAX_TASKS or count_order_pairs(cost) > EXACT_MAX_PAIRS):
            return make_result(cost, options, best.schedule, best.value, "heuristic", None, t0,
                               [*notes, f"deadline: {cost.n_tasks} tasks is past the exact sizes; "
                                        f"{best.name}'s schedule is kept"])
        result = cpsat.search(cost, options, best, list(notes), t0,
                              options.time_limit - (time.perf_counter() - t0), bound)
        return replace(result, mapper=NAME, notes=(*result.notes, "deadline: solved by the CP-SAT model"))

    def _exact(self, cost, options: MapOptions, best: Incumbent | None, notes, t0: float, report,
               bound: float | None) -> MapResult:
        objective = options.objective
        sopts = options.schedule
        notes = list(notes)
        inexact = inexact_options(sopts)
        if inexact:
            notes.append(inexact_note(inexact))
        mb = options.makespan_bound if objective != "makespan" else None
        proven, best, cp_bound = self._cpsat_turn(cost, options, best, notes, t0, CPSAT_SHARE, "the MILP", bound)
        if proven is not None:
            return proven
        if best is not None and cost.n_tasks > LNS_FIRST_TASKS and objective_needs_time(objective, mb):
            best = self._lns_first(cost, options, best, notes, t0, report)
        device = start = warm_value = None
        upper = serial_upper_bound(cost)
        if best is not None:
            warm = retime(cost, best.schedule.device_of, schedule_order(best.schedule), delay_options(sopts))
            device = warm.device_of
            start = tuple(s.start for s in warm.slots)
            upper = warm.makespan * (1 + 1e-9) + 1e-12
            warm_value = value_of(warm, objective)  # the warm start's value in the MILP's own (delay) model
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
            start_value=warm_value,
            stop=options.stop,
        )
        solved = solve(sub, progress=lambda el, inc, bnd: report(inc, bnd))
        start_note = ""
        if best is not None and solver.HIGHS_AVAILABLE:
            start_note = (f"; started from {best.name}'s schedule ({fmt_objective(warm_value, objective)} in its model)"
                          if solved.warm_start_taken else
                          f"; HiGHS did not take {best.name}'s schedule as its starting point")
        elif best is not None:
            start_note = ("; solved with CBC, as HiGHS is not installed: it was given the heuristic's schedule but "
                          "says neither whether it used it nor what bound it proved")
        notes.append(f"MILP: {solve_outcome(solved.status)}{start_note}; its model has {solved.n_binaries:,} yes/no "
                     f"choices and {solved.n_constraints:,} constraints")
        if solved.status == "infeasible":
            if best is None:
                raise InfeasibleError(_infeasible_reason(cost, options), obj=cost.graph.name)
            notes.append(f"the MILP solver called the model infeasible although {best.name}'s schedule satisfies it "
                         f"(a numerical problem of the solver); {best.name}'s is kept")
            return self._fallback(cost, options, best, notes, t0, None)
        if solved.device is None:
            if best is None:
                raise InfeasibleError(
                    f"no mapping found within the time limit of {options.time_limit:g} s", obj=cost.graph.name
                )
            notes.append(f"the MILP found no schedule within its time; {best.name}'s is kept")
            return self._fallback(cost, options, best, notes, t0, _higher(solved.bound, cp_bound))
        try:
            sched = retime(cost, solved.device, solved.order, sopts)
            bad = [v.message for v in validate(sched)]
        except MapperError as err:
            bad = [err.message]
        if bad:
            notes.append(f"the MILP's schedule was not kept: {bad[0]}")
            if best is None:
                raise InfeasibleError("the MILP schedule does not validate and no heuristic succeeded",
                                      obj=cost.graph.name)
            return self._fallback(cost, options, best, notes, t0, _higher(solved.bound, cp_bound))
        value = value_of(sched, objective)
        if inexact:
            notes.append(f"the MILP's schedule: {fmt_objective(solved.objective, objective, 9)} in its model, "
                         f"{fmt_objective(value, objective, 9)} with {' and '.join(inexact)}")
        elif solved.objective is not None and abs(value - solved.objective) > REL_TOL * max(abs(value), 1e-300):
            notes.append(f"the MILP's schedule: {fmt_objective(solved.objective, objective, 9)} in its model, "
                         f"{fmt_objective(value, objective, 9)} re-timed exactly")
        status = solved.status if not inexact else "feasible"
        if best is not None and best.value < value * (1 - REL_TOL):
            notes.append(f"the MILP's schedule ({fmt_objective(value, objective)}) is worse than {best.name}'s "
                         f"({fmt_objective(best.value, objective)}) once re-timed; {best.name}'s is kept")
            sched, value, status = best.schedule, best.value, "heuristic"
        return make_result(cost, options, sched, value, status, _higher(solved.bound, cp_bound), t0, notes)

    def _large(self, cost, options: MapOptions, best: Incumbent | None, notes, t0: float,
               heuristics_s: float, bound: float | None) -> MapResult:
        """The large-graph path: CP-SAT first where its model stays small
        (:data:`CPSAT_MAX_TERMS`), then LNS (:func:`.lns.map_large`) from the
        better schedule, with CP-SAT's lower bound. ``bound``: the lower bound
        the heuristics were checked against."""
        sopts = options.schedule
        if model_terms(cost, options.objective, sopts.memory, sopts.area) > CPSAT_MAX_TERMS:
            return map_large(cost, options, best, notes, t0, heuristics_s)  # it checks near_enough first
        near = near_enough(cost, options, best, tuple(notes), t0)
        if near is not None:
            return near
        notes = list(notes)
        proven, best, cp_bound = self._cpsat_turn(cost, options, best, notes, t0, CPSAT_LARGE_SHARE, "LNS", bound,
                                                  CPSAT_LARGE_PATIENCE)
        if proven is not None:
            return proven
        return map_large(cost, options, best, tuple(notes), t0, heuristics_s, cp_bound)

    def _cpsat_turn(self, cost, options: MapOptions, best: Incumbent | None, notes: list[str], t0: float,
                    share: float, then: str, bound: float | None,
                    patience: float | None = None) -> tuple[MapResult | None, Incumbent | None, float | None]:
        """CP-SAT's turn before ``then``, stopping at ``bound``: its result when it
        proved it optimal (else None), the better of ``best`` and its schedule,
        and its lower bound (None without one)."""
        first = self._cpsat_first(cost, options, best, notes, t0, share, bound, patience)
        if first is None:
            return None, best, None
        if first.status == "optimal":
            done = replace(first, mapper=NAME, notes=(*first.notes, f"CP-SAT proved this schedule optimal, so {then} "
                                                                   "did not run (this mapper runs CP-SAT first, "
                                                                   f"then {then} when CP-SAT has not proved it)"))
            return done, best, first.lower_bound
        if best is None or first.objective_value < best.value * (1 - REL_TOL):
            best = Incumbent("CP-SAT", first.schedule, first.objective_value)
        return None, best, first.lower_bound

    @staticmethod
    def _cpsat_first(cost, options: MapOptions, best: Incumbent | None, notes: list[str],
                     t0: float, share: float, bound: float | None, patience: float | None = None) -> MapResult | None:
        """CP-SAT (:func:`.cpsat.search`) for ``share`` of the time left,
        nothing when :data:`CPSAT_SHARE` is 0, and only ``patience`` of its
        turn when it has found no solution by then: a sequential portfolio, as the
        two engines prove different instances (benchmarks/exact_backends.py,
        benchmarks/stg.py). None when it found no schedule; the MILP then has
        its turn and its say."""
        left = options.time_limit - (time.perf_counter() - t0)
        if CPSAT_SHARE <= 0 or share <= 0:
            return None
        try:
            return cpsat.search(cost, options, best, notes, t0, share * left, bound,
                                None if patience is None else patience * share * left)
        except InfeasibleError:
            return None

    def _lns_first(self, cost, options: MapOptions, best: Incumbent, notes: list[str], t0: float,
                   report) -> Incumbent:
        """Improve the warm start by MILP-window LNS for :data:`LNS_SHARE` of
        the time limit (on mid-size graphs it finds better schedules sooner
        than the full model), then hand the rest to the exact solve."""
        now = time.perf_counter()
        deadline = now + LNS_SHARE * (options.time_limit - (now - t0))
        improved, stats = improve(cost, best.schedule, options.objective, options.schedule, deadline, seed=options.seed,
                                  makespan_bound=options.makespan_bound,
                                  progress=progress_reporter(options, t0, "LNS"),
                                  stop=options.stop)
        notes.append(f"LNS before the exact model: {stats.windows} windows of {WINDOW} tasks, {stats.accepted} "
                     f"accepted, {describe_change(stats.start_value, stats.end_value, options.objective)}"
                     f"{stall_note(stats)}")
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


def _higher(a: float | None, b: float | None) -> float | None:
    """The higher of two lower bounds, either possibly absent."""
    return b if a is None else a if b is None else max(a, b)


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
