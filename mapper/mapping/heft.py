"""HEFT: Heterogeneous Earliest Finish Time.

Topcuoglu, Hariri, Wu, "Performance-effective and low-complexity task
scheduling for heterogeneous computing", IEEE TPDS 13(3):260-274, 2002.
"""

from __future__ import annotations

import time

from mapper.cost import CostTable
from mapper.mapping.base import MapOptions, Mapper, MapResult
from mapper.mapping.placer import Placer, heuristic_result
from mapper.mapping.ranks import mean_comm, mean_times, priority_order, upward_rank


class HeftMapper(Mapper):
    """HEFT (Topcuoglu, Hariri, Wu, IEEE TPDS 13(3), 2002).

    Tasks in decreasing upward rank (mean computation over feasible devices,
    mean communication over feasible device pairs; ties by index), each on
    the device giving the earliest finish time with the insertion policy
    (ties to the lowest device index).
    """

    name = "heft"
    summary = "HEFT list scheduling: upward rank, insertion-based earliest finish time (Topcuoglu et al. 2002)"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        started = time.perf_counter()
        cost.require_feasible()
        order = priority_order(cost, upward_rank(cost, mean_times(cost), mean_comm(cost)))
        placer = Placer(cost, options.schedule)
        for t in order:
            placer.place_best(t)
        return heuristic_result(self.name, placer.schedule(), options, started)
