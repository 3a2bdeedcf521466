"""Lower bounds on the objectives, for the gap every mapper reports."""

from __future__ import annotations

import math

from mapper.cost import CostTable
from mapper.schedule import ScheduleOptions

INF = math.inf


def min_times(cost: CostTable) -> tuple[float, ...]:
    """Each task's smallest time over devices (raises if a task has none)."""
    cost.require_feasible()
    return tuple(min(row) for row in cost.time)


def makespan_lower_bound(cost: CostTable) -> float:
    """A lower bound on the makespan under the delay model: the largest of

    - the critical path with every task at its minimum time and zero
      communication,
    - the total minimum work divided by the number of devices,
    - the largest single minimum time.
    """
    w = min_times(cost)
    if not w:
        return 0.0
    g = cost.graph
    finish = [0.0] * cost.n_tasks
    for t in g.topo_order:
        finish[t] = w[t] + max((finish[p] for p in g.pred_tasks(t)), default=0.0)
    return max(max(finish), sum(w) / cost.n_devices, max(w))


def integral_times(cost: CostTable) -> bool:
    """Whether every task time and transfer time is a whole number (of seconds, or of
    the time units an explicit-cost graph reads as seconds). Then some optimal
    schedule under the delay model starts every task at a whole number (each
    start is an end, or an end plus a transfer, in a left-justified schedule),
    so the optimal makespan is whole and a bound may be rounded up."""
    if any(x != math.floor(x) for row in cost.time for x in row if x < INF):
        return False
    for e in cost.graph.edges:
        if e.comm is not None:
            if e.comm != math.floor(e.comm):
                return False
        elif e.bytes > 0:
            return False
    return True


def lower_bound(cost: CostTable, objective: str, options: ScheduleOptions = ScheduleOptions()) -> float | None:
    """A lower bound on ``objective`` (see :mod:`mapper.mapping.objectives`).

    makespan: :func:`makespan_lower_bound`, rounded up when the times are
    whole (:func:`integral_times`); with streaming on and streamable
    tasks in the graph, chains overlap, so only the largest single minimum
    time (a streamed chain lasts at least as long as its slowest stage). energy: the sum of each task's minimum
    energy. throughput (period): the larger of the largest minimum time and
    the total minimum work over the devices (under ``1f1b``, with the total
    minimum work as the fill and drain).
    """
    w = min_times(cost)
    if not w:
        return 0.0
    if objective == "makespan":
        streams = options.streaming and any(t.streamable > 0 for t in cost.graph.tasks)
        if streams:
            return max(w)
        bound = makespan_lower_bound(cost)
        return math.ceil(bound * (1 - 1e-12)) if integral_times(cost) else bound
    if objective == "energy":
        return float(sum(min(e for e, x in zip(erow, trow) if x < INF) for erow, trow in zip(cost.energy, cost.time)))
    if objective == "throughput":
        busiest = max(max(w), sum(w) / cost.n_devices)
        if cost.platform.throughput_model == "1f1b":
            m = cost.platform.micro_batches
            return (sum(w) + (m - 1) * busiest) / m
        return busiest
    return None
