"""PEFT: Predict Earliest Finish Time.

Arabnejad, Barbosa, "List scheduling algorithm for heterogeneous systems by
an optimistic cost table", IEEE TPDS 25(3):682-694, 2014.
"""

from __future__ import annotations

import math
import time

from mapper.costing.cost import CostTable
from mapper.mapping.base import MapOptions, Mapper, MapResult
from mapper.mapping.placer import Placer, heuristic_result
from mapper.mapping.ranks import mean_comm, priority_order

INF = math.inf


def optimistic_cost_table(cost: CostTable) -> tuple[tuple[float, ...], ...]:
    """``OCT[t][p] = max_{s in succ(t)} min_{w} (OCT[s][w] + time[s][w] + c̄_ts [w != p])``
    over the devices ``w`` where ``s`` can run; 0 for exit tasks (eq. 1)."""
    g = cost.graph
    c = mean_comm(cost)
    nd = cost.n_devices
    oct_: list[tuple[float, ...]] = [()] * cost.n_tasks
    for t in reversed(g.topo_order):
        row = [0.0] * nd
        for e in g.succs[t]:
            s = g.edges[e].dst
            feas = [(oct_[s][w] + cost.time[s][w], w) for w in cost.feasible_devices(s)]
            for p in range(nd):
                row[p] = max(row[p], min(v + (c[e] if w != p else 0.0) for v, w in feas))
        oct_[t] = tuple(row)
    return tuple(oct_)


class PeftMapper(Mapper):
    """PEFT (Arabnejad and Barbosa, IEEE TPDS 25(3), 2014).

    Ready tasks by decreasing ``rank_oct`` (the mean of the task's OCT row
    over the devices where it can run; ties by index); each on the device
    minimising ``O_EFT = EFT + OCT`` (insertion policy; ties to the lowest
    device index).
    """

    name = "peft"
    summary = "PEFT: optimistic cost table lookahead, minimises EFT + OCT (Arabnejad & Barbosa 2014)"

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        started = time.perf_counter()
        cost.require_feasible()
        table = optimistic_cost_table(cost)
        rank = []
        for t in range(cost.n_tasks):
            feas = cost.feasible_devices(t)
            rank.append(sum(table[t][d] for d in feas) / len(feas))
        placer = Placer(cost, options.schedule)
        for t in priority_order(cost, rank):
            placer.place_best(t, extra=table[t])
        return heuristic_result(self.name, placer.schedule(), options, started)
