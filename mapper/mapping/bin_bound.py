"""A bin-packing lower bound on the makespan on identical processors.

Each of ``m`` identical processors runs tasks whose times add up to at most the
makespan ``C``, whatever the precedence and transfers: a schedule of length
``C`` packs the task times into ``m`` bins of capacity ``C``. So ``C`` is
infeasible when a lower bound on the bins needed exceeds ``m``; Martello and
Toth's ``L2`` ("Lower bounds and reduction procedures for the bin packing
problem", Discrete Applied Mathematics 28, 1990) sees what the load bound
(total work over ``m``) cannot, for example that four tasks of 10 and three of 9
cannot share bins of 12 with anything larger than 2 or 3. With whole task
times some optimal makespan is whole, so the bound tries whole ``C`` upwards
from a known bound until ``L2`` no longer rules them out.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence

#: Whole makespans tried above the known bound, and tasks at most (L2 costs
#: ``log n`` per distinct task time, after a sort).
MAX_STEPS = 64
MAX_TASKS = 20_000


def bins_needed(sizes: Sequence[int], capacity: int) -> int:
    """Martello and Toth's ``L2``: at least this many bins of ``capacity`` hold
    ``sizes`` (more than any count when an item does not fit at all)."""
    if not sizes:
        return 0
    order = sorted(sizes)
    if order[-1] > capacity:
        return len(order) + 1
    if capacity <= 0:
        return 1  # items of size 0 (any larger one does not fit, above) share one bin
    prefix = list(itertools.accumulate(order, initial=0))
    n = len(order)
    half = bisect.bisect_right(order, capacity // 2)  # items up to C/2 (whole sizes: 2s <= C)
    best = math.ceil(prefix[n] / capacity)
    for alpha in {0, *order[:half]}:
        top = bisect.bisect_right(order, capacity - alpha)
        big = n - top  # J1: no item of J3 fits beside them
        mid_count = top - half  # J2: C - alpha >= s > C/2, one bin each
        mid_sum = prefix[top] - prefix[half]
        low = bisect.bisect_left(order, alpha)
        small = prefix[half] - prefix[low]  # J3: alpha <= s <= C/2
        spill = small - (mid_count * capacity - mid_sum)
        best = max(best, big + mid_count + max(0, math.ceil(spill / capacity)))
    return best


def bin_packing_bound(times: Sequence[float], processors: int, known: float) -> float:
    """The least whole ``C >= known`` whose bins suffice by :func:`bins_needed`
    (``times`` whole, the task times on any of ``processors`` identical ones);
    ``known`` itself when the sizes are out of reach (:data:`MAX_TASKS`) or the
    steps run out."""
    if processors < 1 or not times or len(times) > MAX_TASKS:
        return known
    sizes = sorted(int(t) for t in times)
    start = math.ceil(known)
    for c in range(start, start + MAX_STEPS):
        if bins_needed(sizes, c) <= processors:
            return float(c)
    return known
