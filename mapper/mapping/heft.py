"""HEFT: Heterogeneous Earliest Finish Time.

Topcuoglu, Hariri, Wu, "Performance-effective and low-complexity task
scheduling for heterogeneous computing", IEEE TPDS 13(3):260-274, 2002.
"""

from __future__ import annotations

import time
import weakref

from mapper.costing.cost import CostTable
from mapper.engine.schedule import Schedule
from mapper.mapping.base import MapOptions, Mapper, MapResult
from mapper.mapping.placer import Placer, heuristic_result
from mapper.mapping.ranks import edf_order, mean_comm, mean_times, priority_order, upward_rank

#: The last HEFT schedule: ``(cost, key, the schedule's fields after its cost)``, the cost held weakly
#: and the entry dropped with it, so the cache never keeps a graph alive. ``--parallel`` scores its plans
#: with HEFT and the default mapper starts from HEFT on the plan it keeps: the same table, so the same
#: schedule.
_last: list[tuple[weakref.ref[CostTable], tuple, tuple]] = []


def _drop(ref: weakref.ref[CostTable]) -> None:
    """Drop the kept schedule when its cost table goes."""
    if _last and _last[0][0] is ref:
        _last.clear()


def _kept(cost: CostTable, key: tuple) -> Schedule | None:
    if _last and _last[0][0]() is cost and _last[0][1] == key:
        return Schedule(cost, *_last[0][2])
    return None


def _keep(cost: CostTable, key: tuple, s: Schedule) -> None:
    _last[:] = [(weakref.ref(cost, _drop), key, (s.options, s.slots, s.transfers, s.makespan, s.order, s.streamed))]


class HeftMapper(Mapper):
    """HEFT (Topcuoglu, Hariri, Wu, IEEE TPDS 13(3), 2002).

    Tasks in decreasing upward rank (mean computation over feasible devices,
    mean communication over feasible device pairs; ties by index), each on
    the device giving the earliest finish time with the insertion policy
    (ties to the lowest device index). Under ``--objective deadline`` the task
    list is earliest effective deadline first (:func:`~mapper.mapping.ranks.edf_order`).
    """

    name = "heft"
    summary = "HEFT list scheduling: upward rank, insertion-based earliest finish time (Topcuoglu et al. 2002)"
    #: Whether the communication mean counts same-device pairs (at no cost).
    same_device = False

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        started = time.perf_counter()
        key = (type(self), options.objective == "deadline", options.schedule)
        kept = _kept(cost, key)
        if kept is not None:
            return heuristic_result(self.name, kept, options, started)
        cost.require_feasible()
        w = mean_times(cost)
        rank = upward_rank(cost, w, mean_comm(cost, self.same_device))
        # under --objective deadline: earliest effective deadline first, ties by upward rank
        order = edf_order(cost, w, rank) if options.objective == "deadline" else priority_order(cost, rank)
        placer = Placer(cost, options.schedule)
        for t in order:
            placer.place_best(t)
        schedule = placer.schedule()
        _keep(cost, key, schedule)
        return heuristic_result(self.name, schedule, options, started)


class HeftSameDeviceMapper(HeftMapper):
    """HEFT with the upward rank's communication mean over every device pair, the
    same device included at no cost (SAGA's definition, Coleman and Krishnamachari,
    arXiv:2403.07120; see :func:`~mapper.mapping.ranks.mean_comm`): transfers weigh
    less in the rank. On related-machines instances it gives SAGA's HEFT schedule.
    Neither definition wins everywhere; the ``milp`` mapper starts from the better."""

    name = "heft-samedev"
    summary = "HEFT with the rank's transfer mean over all device pairs, the same device included (as SAGA's)"
    same_device = True
