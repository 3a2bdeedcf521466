"""One lower bound for every mapping of a ``--compare``: the best any of them knows.

Mappers of the same cost table under the same schedule options solve the same problem, so
a lower bound one of them proves (or the value of a schedule one proves optimal) bounds
them all. Each result's gap is then measured against that best bound, so two rows with the
same schedule value show the same gap (a heuristic matching the proven optimum shows 0 %).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mapper.mapping.base import MapResult


def best_bound(results: Sequence[MapResult]) -> float | None:
    """The largest lower bound among ``results`` (a proven optimum's value counts as one)."""
    bounds = [r.lower_bound for r in results if r.lower_bound is not None]
    bounds += [r.objective_value for r in results if r.status == "optimal"]
    return max(bounds) if bounds else None


def gap_to(value: float, bound: float) -> float:
    """(value - bound) / value, at least 0 (0 when the value is 0)."""
    return max(0.0, (value - bound) / value) if value > 0 else 0.0


def share_bounds(results: Sequence[MapResult]) -> tuple[MapResult, ...]:
    """``results`` with each one's bound raised to the best known among those under the same
    objective and schedule options, its gap recomputed, and a note naming where the bound came from."""
    out = []
    for r in results:
        peers = [q for q in results if q.objective == r.objective and q.schedule.options == r.schedule.options]
        bound = best_bound(peers)
        if bound is None or (r.lower_bound is not None and bound <= r.lower_bound):
            out.append(r)
            continue
        source = next((q.mapper for q in peers if q.lower_bound == bound), None) or next(
            q.mapper for q in peers if q.status == "optimal" and q.objective_value == bound)
        note = (f"gap against the best lower bound of the mappers compared ({source}'s); "
                f"{r.mapper}'s own bound is " + ("unknown" if r.lower_bound is None else "lower"))
        out.append(replace(r, lower_bound=bound, gap=gap_to(r.objective_value, bound), notes=(*r.notes, note)))
    return tuple(out)
