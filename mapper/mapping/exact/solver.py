"""The MILP solver glue: the one module that imports PuLP.

A :class:`Problem` is a minimisation problem built row by row from
``{variable: coefficient}`` dictionaries; :func:`run` solves it with PuLP's
in-process HiGHS (highspy), with a MIP start, one thread, a fixed seed, a
time limit and callbacks for progress and early stops, or with PuLP's
bundled CBC when HiGHS is unavailable. A PuLP or HiGHS version change
touches this file only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

import numpy as np
import pulp

#: A model variable (opaque to the formulation except for its ``name``).
Var: TypeAlias = pulp.LpVariable
#: A linear expression as ``{variable: coefficient}``.
Terms: TypeAlias = dict[Var, float]
#: ``on_event(running time, incumbent, dual bound, improving)`` from the solver.
EventHook: TypeAlias = Callable[[float, float, float, bool], None]

#: HiGHS relative gap at which a solve counts as optimal.
MIP_REL_GAP = 1e-6
#: Up to this many binaries HiGHS runs without its RINS/RENS sub-MIP
#: heuristics: on small models branching alone proves optimality sooner
#: (HEFT paper example: about 2x faster, measured).
SMALL_MODEL_BINARIES = 100
NO_SUB_MIPS = {"mip_heuristic_run_rins": False, "mip_heuristic_run_rens": False}


class Problem:
    """A minimisation MILP under construction."""

    __slots__ = ("lp",)

    def __init__(self, name: str) -> None:
        self.lp = pulp.LpProblem(name, pulp.LpMinimize)

    def binary(self, name: str) -> Var:
        return self.lp.add_variable(name, 0, 1, pulp.LpBinary)

    def integer(self, name: str, low: int, up: int | None = None) -> Var:
        return self.lp.add_variable(name, low, up, pulp.LpInteger)

    def continuous(self, name: str, low: float, up: float | None = None) -> Var:
        return self.lp.add_variable(name, low, up)

    def add_row(self, terms: Terms, const: float, sense: Literal["==", "<=", ">="], rhs: float = 0) -> None:
        """Add the row ``sum(terms) + const  sense  rhs``."""
        expr = pulp.LpAffineExpression(terms, constant=const)
        if sense == "==":
            self.lp += expr == rhs
        elif sense == "<=":
            self.lp += expr <= rhs
        else:
            self.lp += expr >= rhs

    def minimise(self, terms: Terms, const: float = 0.0) -> None:
        self.lp += pulp.LpAffineExpression(terms, constant=const)

    def n_rows(self) -> int:
        return len(self.lp.constraints())


def value(var: Var) -> float:
    """A variable's solution value; its lower bound when the solver set none
    (a variable in no row is not sent to the solver)."""
    return float(var.varValue) if var.varValue is not None else float(var.lowBound or 0.0)


def level(var: Var) -> float:
    """A variable's solution value, 0 when unset."""
    return float(var.varValue or 0.0)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the solver reported.

    ``status``: HiGHS's model status name (``kOptimal``, ``kInfeasible``, ...),
    ``other`` for a CBC run that is neither optimal nor infeasible, or
    ``none: <error>`` when the solver failed. ``bound`` and
    ``first_incumbent`` are in model units (HiGHS only).
    """

    status: str
    has_solution: bool
    bound: float | None
    first_incumbent: float | None


class _HighsWarm(pulp.HiGHS):
    """PuLP's in-process HiGHS plus a MIP start (``setSolution``) and
    callbacks for progress; PuLP 3.3's own ``HiGHS`` ignores warm starts."""

    def __init__(self, start: dict[str, float] | None, on_event: EventHook, periodic: bool,
                 stop: Callable[[], bool] | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.start = start
        self.on_event = on_event
        self.periodic = periodic
        self.stop = stop
        self.first_incumbent: float | None = None

    def actualSolve(self, lp: pulp.LpProblem) -> int:
        self.createAndConfigureSolver(lp)
        self.buildSolverModel(lp)
        model = lp.solverModel
        if self.start:
            cols = [(v.index, self.start[v.name]) for v in lp.variables() if v.name in self.start]
            idx = np.array([c for c, _ in cols], dtype=np.int32)
            val = np.array([x for _, x in cols], dtype=np.float64)
            model.setSolution(len(cols), idx, val)

        def improving(event: object) -> None:
            out = event.data_out  # type: ignore[attr-defined]
            if self.first_incumbent is None:
                self.first_incumbent = float(out.objective_function_value)
            self.on_event(out.running_time, out.objective_function_value, out.mip_dual_bound, True)

        def interrupt(event: object) -> None:
            if self.stop is not None and self.stop():
                event.data_in.user_interrupt = True  # type: ignore[attr-defined]  # HiGHS keeps its incumbent
            if self.periodic:
                out = event.data_out  # type: ignore[attr-defined]
                self.on_event(out.running_time, out.mip_primal_bound, out.mip_dual_bound, False)

        model.cbMipImprovingSolution.subscribe(improving)
        if self.periodic or self.stop is not None:
            model.cbMipInterrupt.subscribe(interrupt)
        self.callSolver(lp)
        status, sol_status = self.findSolutionValues(lp)
        lp.assignStatus(status, sol_status)
        return int(status)


#: Whether PuLP's in-process HiGHS (highspy) can be used; else bundled CBC.
HIGHS_AVAILABLE = bool(pulp.HiGHS().available())


def _cbc(lp: pulp.LpProblem, start: dict[str, float] | None, limit: float, seed: int) -> pulp.LpSolver:
    """PuLP's bundled CBC through ``COIN_CMD`` (used only without HiGHS)."""
    if start:
        for var in lp.variables():
            if var.name in start:
                # a start a rounding step outside its bounds is rejected by CBC: clamp it
                value = start[var.name]
                if var.lowBound is not None:
                    value = max(value, var.lowBound)
                if var.upBound is not None:
                    value = min(value, var.upBound)
                var.setInitialValue(value)
    return pulp.COIN_CMD(
        path=pulp.PULP_CBC_CMD.pulp_cbc_path,
        msg=False,
        threads=1,
        timeLimit=limit,
        gapRel=MIP_REL_GAP,
        warmStart=bool(start),
        options=[f"randomCbcSeed {int(seed) % 2147483647 + 1}"],
    )


def run(
    problem: Problem,
    start: dict[str, float] | None,
    time_limit: float,
    seed: int,
    n_binaries: int,
    on_event: EventHook,
    periodic: bool,
    stop: Callable[[], bool] | None = None,
) -> Outcome:
    """Solve ``problem`` from the MIP start ``start`` (column values by name);
    never raises for solver trouble. ``on_event`` is called on improving
    solutions and, when ``periodic``, at HiGHS's interrupt checks; ``stop()``
    is polled there and ends the search when it returns True."""
    lp = problem.lp
    if HIGHS_AVAILABLE:
        solver: pulp.LpSolver = _HighsWarm(
            start,
            on_event,
            periodic,
            stop=stop,
            msg=False,
            threads=1,
            timeLimit=time_limit,
            gapRel=MIP_REL_GAP,
            random_seed=int(seed) % 2147483647,
            **(NO_SUB_MIPS if n_binaries <= SMALL_MODEL_BINARIES else {}),
        )
    else:
        solver = _cbc(lp, start, time_limit, seed)
    try:
        lp.solve(solver)
    except Exception as err:
        return Outcome(f"none: {err}", False, None, None)
    if isinstance(solver, _HighsWarm):
        info = lp.solverModel.getInfo()
        name = str(lp.solverModel.getModelStatus()).rsplit(".", 1)[-1]
        bound = float(info.mip_dual_bound) if math.isfinite(info.mip_dual_bound) else None
        first = None if solver.first_incumbent is None else float(solver.first_incumbent)
        return Outcome(name, info.primal_solution_status == 2, bound, first)
    # CBC: no dual bound through PuLP, no callbacks
    optimal = lp.status == pulp.LpStatusOptimal and lp.sol_status == pulp.LpSolutionOptimal
    name = "kOptimal" if optimal else "kInfeasible" if lp.status == pulp.LpStatusInfeasible else "other"
    has_sol = lp.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    return Outcome(name, has_sol, None, None)
