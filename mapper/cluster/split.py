"""The layer split of a pipeline whose stages sit on GPUs of different kinds, exact under the model.

A 1F1B step of ``m`` micro-batches over stages of ``T_s`` seconds each (per
micro-batch, forward and backward, the send to the next stage included) takes
``m max T + (sum T - max T)`` (:func:`mapper.cluster.schedule.step_time`). With
``m`` large the bottleneck decides, and the bisection of
:func:`mapper.mapping.pipeline.stage_partition` is exact; with few micro-batches
the sum weighs as much, and on stages of different kinds the sum depends on
which layers each kind holds. So the split minimises
``(m - 1) max T + sum T`` over every contiguous split whose stages fit their
GPUs' memory, by dynamic programming over (stage, end block) at a bottleneck
limit that falls from one optimal split's bottleneck to the next
(parametric search: the least sum at a limit never falls as the limit falls,
so the search stops once ``(m - 1) B* + S`` reaches the best found, ``B*``
the least bottleneck of a fitting split). The bound it returns covers every
split: the least over splits of :func:`mapper.cluster.model.lower_bound`'s
``max_r (sum_{c<r} T_c + m T_r)`` (rank ``r`` waits for the first
micro-batch to pass the stages before it, then runs ``m``), by bisection on a
limit with a dynamic program that keeps the least prefix.

Stage costs come in as one matrix per stage, ``cost[s][a, e]`` the seconds of
blocks ``a .. e-1`` as stage ``s`` (``inf`` where they do not fit); the
gradient synchronisation after the pipeline is priced for the split chosen.
"""

from __future__ import annotations

import numpy as np

from mapper.mapping.pipeline import pipelined

INF = float("inf")


def _min_max(cost: list[np.ndarray]) -> float:
    """The least bottleneck of any split into ``len(cost)`` stages (``inf``: none fits)."""
    n = cost[0].shape[0] - 1
    best = np.full(n + 1, INF)
    best[0] = 0.0
    for c in cost:
        best = np.min(np.maximum(best[:, None], c), axis=0)
    return float(best[n])


def _min_sum(cost: list[np.ndarray], below: float) -> tuple[float, tuple[int, ...]] | None:
    """The least ``sum T`` of a split whose stages all cost less than ``below``, and its starts."""
    n = cost[0].shape[0] - 1
    best = np.full(n + 1, INF)
    best[0] = 0.0
    back = []
    for c in cost:
        total = best[:, None] + np.where(c < below, c, INF)
        arg = np.argmin(total, axis=0)
        best = total[arg, np.arange(n + 1)]
        back.append(arg)
    if not best[n] < INF:
        return None
    starts, e = [], n
    for arg in reversed(back):
        e = int(arg[e])
        starts.append(e)
    return float(best[n]), tuple(reversed(starts))


def exact_split(cost: list[np.ndarray], micro_batches: int, cap: float = INF) -> tuple[tuple[int, ...], float] | None:
    """Starts of the split that minimises ``(m - 1) max T + sum T`` (module docstring), and a bound
    on the step of every fitting split; None when no split fits. ``cap``: a step known elsewhere
    (the search skips the splits that cannot beat it, and then answers the best it saw)."""
    floor_ = _min_max(cost)
    if not floor_ < INF:
        return None
    weight = micro_batches - 1
    n = cost[0].shape[0] - 1

    def value(found: tuple[float, tuple[int, ...]]) -> tuple[float, float]:
        total, starts = found
        top = max(float(c[a, e]) for c, a, e in zip(cost, starts, (*starts[1:], n)))
        return pipelined(total, top, micro_batches), top

    least = _min_sum(cost, INF)
    at_floor = _min_sum(cost, np.nextafter(floor_, INF))
    assert least is not None and at_floor is not None
    best, best_starts = min((value(least)[0], least[1]), (value(at_floor)[0], at_floor[1]))
    if weight == 0:
        return best_starts, _least_bound(cost, micro_batches, least[0], best_starts)
    # a better split has max T < (best - least sum) / (m - 1); its bottleneck falls from there
    below = (min(best, cap) - least[0]) / weight
    while below > floor_:
        found = _min_sum(cost, below)
        if found is None or weight * floor_ + found[0] >= min(best, cap):
            break
        v, top = value(found)
        if v < best:
            best, best_starts = v, found[1]
        below = min(top, (min(best, cap) - least[0]) / weight)
    return best_starts, _least_bound(cost, micro_batches, micro_batches * floor_, best_starts)


def _fits_under(cost: list[np.ndarray], m: int, limit: float) -> bool:
    """Whether some split has ``sum_{c<r} T_c + m T_r <= limit`` for every stage ``r``: the least
    prefix at each end block, stage by stage (a smaller prefix never hurts the stages after)."""
    n = cost[0].shape[0] - 1
    best = np.full(n + 1, INF)
    best[0] = 0.0
    for c in cost:
        reach = best[:, None] + c
        best = np.min(np.where(best[:, None] + m * c <= limit, reach, INF), axis=0)
    return bool(best[n] < INF)


def _least_bound(cost: list[np.ndarray], m: int, low: float, starts: tuple[int, ...]) -> float:
    """A bound on :func:`mapper.cluster.model.lower_bound` over every split (its sync aside):
    ``max_r (sum_{c<r} T_c + m T_r)`` is at least ``low`` for every split, and at most its value
    for ``starts``; bisection to a millionth keeps the largest limit no split meets."""
    n = cost[0].shape[0] - 1
    times = [float(c[a, e]) for c, a, e in zip(cost, starts, (*starts[1:], n))]
    high = max(sum(times[:r]) + m * t for r, t in enumerate(times))
    low = min(low, high) * (1 - 1e-12)
    while high - low > 1e-6 * high:
        mid = 0.5 * (low + high)
        if _fits_under(cost, m, mid):
            high = mid
        else:
            low = mid
    return low
