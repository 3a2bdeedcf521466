"""What the exact engine is asked (:class:`Subproblem`) and what it answers
(:class:`Solved`): the whole mapping problem for the exact MILP, or a window
of it for large-neighbourhood search (:mod:`mapper.mapping.lns`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mapper.costing.cost import CostTable

#: The makespan bound maps to this many model time units (see
#: :class:`~mapper.mapping.exact.formulation.Formulation`).
TIME_SCALE = 1000.0
#: Relative tolerance when comparing objective values.
REL_TOL = 1e-6


def objective_needs_time(objective: str, makespan_bound: float | None) -> bool:
    """Whether the model needs start times (else the assignment alone decides)."""
    return objective == "makespan" or makespan_bound is not None


@dataclass(frozen=True, slots=True)
class Subproblem:
    """A (possibly partial) mapping problem for :func:`~mapper.mapping.exact.solve.solve`.

    Tasks in ``free`` get new devices and orders; every other task keeps
    ``device[t]`` and its relative order from ``start`` on that device.
    ``device``/``start`` also form the warm start (``None``: no incumbent,
    only allowed when ``free`` is every task); ``start_value`` is its
    objective value. ``upper`` bounds the makespan of the solutions sought
    (the big-M): the incumbent's makespan for the makespan objective, the
    makespan bound otherwise (unused by time-free models). ``flow_weight``
    (makespan objective only) adds that multiple of the sum of all finish
    times, a tie-breaker LNS uses to pull work earlier. Fixed tasks that end
    by ``frozen_before`` keep their start times, free tasks must end by
    ``horizon`` and fixed tasks that start after it stay after it (smaller
    neighbourhoods for LNS; the start solution must satisfy them).
    """

    cost: CostTable
    objective: str
    free: tuple[int, ...]
    device: tuple[int, ...] | None
    start: tuple[float, ...] | None
    upper: float
    time_limit: float
    seed: int = 0
    memory: bool = False
    area: bool = False
    makespan_bound: float | None = None
    symmetry: bool = True
    start_value: float | None = None
    flow_weight: float = 0.0
    frozen_before: float | None = None
    horizon: float | None = None
    stop: Callable[[], bool] | None = field(default=None, compare=False)  # polled; True ends the search


@dataclass(frozen=True, slots=True)
class Solved:
    """What a MILP solve produced. ``status``: optimal | feasible | none | infeasible."""

    status: str
    device: tuple[int, ...] | None
    start: tuple[float, ...] | None
    order: tuple[tuple[int, ...], ...] | None
    objective: float | None
    bound: float | None
    warm_start_taken: bool
    solve_time: float
    n_binaries: int
    n_constraints: int
