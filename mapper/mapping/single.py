"""Single-device baselines: everything on the first CPU, or on the best device.

These are the reference points speedups are measured against (the
"CPU only" and "best single device" baselines of heterogeneous mapping
studies such as Wilhelm et al., arXiv:2208.06321).
"""

from __future__ import annotations

import time

from mapper.costing.cost import CostTable
from mapper.engine.schedule import Assignment, Schedule, ScheduleOptions, build_schedule
from mapper.errors import InfeasibleError
from mapper.mapping.base import MapOptions, Mapper, MapResult
from mapper.mapping.placer import heuristic_result
from mapper.mapping.ranks import rank_key


def on_one_device(cost: CostTable, d: int, options: ScheduleOptions) -> Schedule:
    """Every task on device ``d`` in topological order (raises if one cannot run there)."""
    order = tuple(cost.graph.topo_order if k == d else () for k in range(cost.n_devices))
    return build_schedule(cost, Assignment((d,) * cost.n_tasks, order), options)


class CpuMapper(Mapper):
    """All tasks on the platform's first CPU, in topological order."""

    name = "cpu"
    summary = "baseline: every task on the first CPU, in topological order"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        started = time.perf_counter()
        cpus = [d.index for d in cost.platform.devices if d.kind == "cpu"]
        if not cpus:
            raise InfeasibleError("the platform has no CPU for the cpu baseline", obj=cost.platform.name)
        return heuristic_result(self.name, on_one_device(cost, cpus[0], options.schedule), options, started)


class SingleDeviceMapper(Mapper):
    """The best single device: every device that can run the whole graph is
    tried (topological order), and the smallest makespan wins (ties: lowest
    index)."""

    name = "single"
    summary = "baseline: the single device with the smallest makespan running every task"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        started = time.perf_counter()
        best: Schedule | None = None
        why = []
        for d in range(cost.n_devices):
            try:
                s = on_one_device(cost, d, options.schedule)
            except InfeasibleError as err:
                why.append(f"{cost.platform.devices[d].name}: {err.message}")
                continue
            if best is None or rank_key(s.makespan) < rank_key(best.makespan):
                best = s
        if best is None:
            raise InfeasibleError("no single device can run every task (" + "; ".join(why) + ")",
                                  obj=cost.platform.name)
        return heuristic_result(self.name, best, options, started)
