"""Greedy earliest-finish-time mapping, in topological order, without insertion."""

from __future__ import annotations

import time

from mapper.costing.cost import CostTable
from mapper.mapping.base import MapOptions, Mapper, MapResult
from mapper.mapping.placer import Placer, heuristic_result


class GreedyMapper(Mapper):
    """Greedy EFT: the baseline list scheduler of Topcuoglu, Hariri and Wu
    (IEEE TPDS 13(3), 2002) without ranks or insertion.

    Tasks in the graph's topological order (Kahn, smallest index first); each
    goes after the last task of the device where it finishes earliest (ties
    to the lowest device index). Never inserts into idle gaps.
    """

    name = "greedy"
    summary = "greedy: topological order, each task appended where it finishes earliest (no insertion)"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        started = time.perf_counter()
        cost.require_feasible()
        placer = Placer(cost, options.schedule, insertion=False)
        for t in cost.graph.topo_order:
            placer.place_best(t)
        return heuristic_result(self.name, placer.schedule(), options, started)
