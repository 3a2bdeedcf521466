"""Solve one :class:`~mapper.mapping.exact.subproblem.Subproblem` exactly:
build its :class:`~mapper.mapping.exact.formulation.Formulation`, run the
solver from the warm start, and read the answer back in task terms."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from mapper.mapping.exact import solver
from mapper.mapping.exact.formulation import Formulation, Infeasible
from mapper.mapping.exact.subproblem import REL_TOL, Solved, Subproblem
from mapper.mapping.exact.window_model import WindowFormulation, is_window

#: ``progress(elapsed, incumbent, bound)`` in the caller's units.
SolveProgress = Callable[[float, "float | None", "float | None"], None]


def solve(sub: Subproblem, progress: SolveProgress | None = None) -> Solved:
    """Build and solve ``sub`` (HiGHS, else CBC); never raises for solver trouble.

    ``progress(elapsed, incumbent, bound)`` is called on improving solutions
    and about once a second during the search.
    """
    t0 = time.perf_counter()
    model = WindowFormulation(sub) if is_window(sub) else Formulation(sub)
    try:
        model.build()
    except Infeasible:
        return Solved("infeasible", None, None, None, None, None, False, time.perf_counter() - t0, 0, 0)
    start_vals = model.warm_start()
    last = [0.0]

    def on_event(run_time: float, incumbent: float, bound: float, improving: bool) -> None:
        if progress is None:
            return
        now = time.perf_counter()
        if not improving and now - last[0] < 1.0:
            return
        last[0] = now
        inc = None if not math.isfinite(incumbent) else model.unscale(float(incumbent))
        bnd = None if not math.isfinite(bound) else model.unscale(float(bound))
        progress(now - t0, inc, bnd)

    limit = max(0.01, sub.time_limit - (time.perf_counter() - t0))
    n_bin, n_rows = model.n_binaries(), model.prob.n_rows()
    out = solver.run(model.prob, start_vals, limit, sub.seed, n_bin, on_event, progress is not None, sub.stop)
    if out.status.startswith("none: "):
        return Solved(out.status, None, None, None, None, None, False, time.perf_counter() - t0, n_bin, n_rows)
    bound = model.unscale(out.bound) if out.bound is not None else None
    warm = (
        sub.start_value is not None
        and out.first_incumbent is not None
        and abs(model.unscale(out.first_incumbent) - sub.start_value) <= REL_TOL * max(abs(sub.start_value), 1e-300)
    )
    elapsed = time.perf_counter() - t0
    if out.status in ("kInfeasible", "kUnboundedOrInfeasible"):
        return Solved("infeasible", None, None, None, None, bound, warm, elapsed, n_bin, n_rows)
    if not out.has_solution:
        return Solved("none", None, None, None, None, bound, warm, elapsed, n_bin, n_rows)
    return model.extract(out.status, bound, warm, elapsed)
