"""Memory over time: the peak bytes each device holds during a schedule.

A device holds, at time ``x``:

* every weight read by a task on it, for the whole schedule (each weight once);
* the ``memory`` of each task on it that declares one (kernel-less tasks,
  imported instances), for the whole schedule, in place of its data;
* each task's output on the task's device from the task's start until the
  last of its consumers there ends and its last transfer out has arrived
  (a graph output, or a task nobody reads, until the end of the schedule);
* a copy of it (the largest of its edges' bytes there) on each other device
  that reads it, from the start of the first transfer there until the last
  consumer there ends.

So the activations a training step stashes for its backward pass
(:mod:`mapper.costing.training`) are held from their forward task to their last
backward use, and optimizer state and weights all the time. Allocations at
the same instant as releases come after them.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mapper.engine.schedule import Schedule


@dataclass(frozen=True, slots=True)
class DevicePeak:
    """One device's peak: bytes, when it is first reached, and the resident part."""

    bytes: float
    at: float
    resident: float


#: The last schedule asked about (weakly: the cache never keeps a schedule alive) and its peaks: a
#: compile asks for the same schedule's peaks when it checks that they fit and again when it writes
#: the report.
_last: list[tuple[weakref.ref[Schedule], tuple[DevicePeak, ...]]] = []


def peak_memory(schedule: Schedule) -> tuple[DevicePeak, ...]:
    """Per device, the most bytes held at once (module docstring); kept for the last schedule."""
    if _last and _last[0][0]() is schedule:
        return _last[0][1]
    peaks = _peak_memory(schedule)
    _last[:] = [(weakref.ref(schedule), peaks)]
    return peaks


def _peak_memory(schedule: Schedule) -> tuple[DevicePeak, ...]:
    cost = schedule.cost
    g = cost.graph
    nd = cost.n_devices
    slots = schedule.slots
    end_all = schedule.makespan
    resident = [0.0] * nd
    weights: list[set[str]] = [set() for _ in range(nd)]
    events: list[list[tuple[float, float]]] = [[] for _ in range(nd)]
    outputs = set(g.outputs)
    arrivals = {tr.edge: tr for tr in schedule.transfers}
    for t, task in enumerate(g.tasks):
        d = slots[t].device
        if task.memory is not None:
            resident[d] += task.memory
            continue
        for op in task.operands:
            if op.kind == "weight" and op.name not in weights[d]:
                weights[d].add(op.name)
                resident[d] += op.type.nbytes
        size = float(task.output.nbytes) if task.output is not None else float(task.bytes_written)
        if size <= 0:
            continue
        home_end = slots[t].end
        copies: dict[int, list[float]] = {}  # device -> [first transfer start, last consumer end, bytes]
        for e in g.succs[t]:
            edge = g.edges[e]
            v = edge.dst
            dv = slots[v].device
            if dv == d:
                home_end = max(home_end, slots[v].end)
                continue
            tr = arrivals.get(e)
            start, arrive = (tr.start, tr.end) if tr is not None else (slots[t].end, slots[v].start)
            home_end = max(home_end, arrive)
            if edge.bytes > 0 and g.tasks[v].memory is None:
                span = copies.setdefault(dv, [start, slots[v].end, edge.bytes])
                span[0] = min(span[0], start)
                span[1] = max(span[1], slots[v].end)
                span[2] = max(span[2], edge.bytes)
        if task.name in outputs or not g.succs[t]:
            home_end = max(home_end, end_all if task.name in outputs else slots[t].end)
        events[d].append((slots[t].start, size))
        events[d].append((home_end, -size))
        for dv, (start, stop, nbytes) in copies.items():
            events[dv].append((start, nbytes))
            events[dv].append((stop, -nbytes))
    peaks = []
    for d in range(nd):
        live = best = resident[d]
        at = 0.0
        for x, delta in sorted(events[d]):
            live += delta
            if live > best * (1 + 1e-12):
                best, at = live, x
        peaks.append(DevicePeak(best, at, resident[d]))
    return tuple(peaks)
