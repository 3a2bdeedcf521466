"""CPOP: Critical Path On a Processor.

Topcuoglu, Hariri, Wu, "Performance-effective and low-complexity task
scheduling for heterogeneous computing", IEEE TPDS 13(3):260-274, 2002.
"""

from __future__ import annotations

import time

from mapper.costing.cost import CostTable
from mapper.mapping.base import MapOptions, Mapper, MapResult
from mapper.mapping.placer import Placer, heuristic_result
from mapper.mapping.ranks import downward_rank, mean_comm, mean_times, priority_order, rank_key, upward_rank


def critical_path(cost: CostTable, priority: tuple[float, ...]) -> tuple[int, ...]:
    """The tasks of priority ``|CP|``: from the entry task of highest priority,
    repeatedly the successor whose priority equals it (lowest index first)."""
    g = cost.graph
    entries = [t for t in range(cost.n_tasks) if not g.preds[t]]
    if not entries:
        return ()
    t = min(entries, key=lambda i: (-rank_key(priority[i]), i))
    cp_len = rank_key(priority[t])
    path = [t]
    while True:
        nxt = [v for v in sorted(set(g.succ_tasks(t))) if rank_key(priority[v]) == cp_len]
        if not nxt:
            return tuple(path)
        t = nxt[0]
        path.append(t)


def critical_device(cost: CostTable, path: tuple[int, ...]) -> int | None:
    """The device minimising the path's total time (ties: lowest index);
    ``None`` when no device can run every task of the path."""
    best = None
    for d in range(cost.n_devices):
        total = sum(cost.time[t][d] for t in path)
        if total < float("inf") and (best is None or rank_key(total) < best[0]):
            best = (rank_key(total), d)
    return best[1] if best is not None else None


class CpopMapper(Mapper):
    """CPOP (Topcuoglu, Hariri, Wu, IEEE TPDS 13(3), 2002).

    Priority = upward + downward rank; the critical path (tasks whose
    priority equals the entry's) goes on the device minimising its total
    time; the other tasks, taken from the ready queue by highest priority
    (ties by index), go to the device of earliest finish time (insertion
    policy). If no device can run the whole critical path, or it is full
    under the memory/area options, its tasks are placed like the others.
    """

    name = "cpop"
    summary = "CPOP: critical path on its best device, the rest by earliest finish time (Topcuoglu et al. 2002)"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        started = time.perf_counter()
        cost.require_feasible()
        w, c = mean_times(cost), mean_comm(cost)
        up, down = upward_rank(cost, w, c), downward_rank(cost, w, c)
        priority = tuple(a + b for a, b in zip(up, down))
        path = critical_path(cost, priority)
        cp_dev = critical_device(cost, path)
        on_path = set(path) if cp_dev is not None else set()
        placer = Placer(cost, options.schedule)
        for t in priority_order(cost, priority):
            on_cp_dev = cp_dev is not None and t in on_path and placer.fits(t, cp_dev)
            placer.place_best(t, devices=(cp_dev,) if on_cp_dev and cp_dev is not None else None)
        notes = () if cp_dev is not None else ("no device can run the whole critical path",)
        return heuristic_result(self.name, placer.schedule(), options, started, notes)
