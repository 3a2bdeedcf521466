"""The cost table: what each task costs on each device, and each edge between
each pair of devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.graph import TaskGraph
from mapper.platform import Platform

INF = math.inf


@dataclass(frozen=True, slots=True)
class CostTable:
    """Per-task, per-device times and per-pair route data. ``inf`` = infeasible.

    All matrices are tuples of tuples: ``time[t][d]``, ``route_latency[a][b]``.
    """

    graph: TaskGraph
    platform: Platform
    time: tuple[tuple[float, ...], ...]  # [task][device] seconds
    energy: tuple[tuple[float, ...], ...]  # [task][device] joules
    bound: tuple[tuple[str, ...], ...]  # [task][device] compute|memory|launch|serial|explicit|infeasible
    reasons: tuple[tuple[int, int, str], ...]  # (task, device, why) per infeasible entry
    route_latency: tuple[tuple[float, ...], ...]  # [a][b] seconds along the route, 0 on the diagonal
    route_sec_per_byte: tuple[tuple[float, ...], ...]  # [a][b] sum of 1/bandwidth along the route
    routes: tuple[tuple[tuple[int, ...], ...], ...]  # [a][b] link indices along the route
    footprint: tuple[float, ...]  # [task] bytes resident on its device while it runs
    memory_capacity: tuple[float, ...]  # [device] bytes, inf when unknown
    area: tuple[tuple[float, ...], ...]  # [task][device] FPGA area units, 0 off-FPGA
    area_capacity: tuple[float, ...]  # [device] area units, inf off-FPGA

    @property
    def n_tasks(self) -> int:
        return len(self.time)

    @property
    def n_devices(self) -> int:
        return len(self.platform.devices)

    def comm(self, e: int, a: int, b: int) -> float:
        """Transfer time of edge ``e`` from device ``a`` to device ``b`` (0 if same)."""
        if a == b:
            return 0.0
        edge = self.graph.edges[e]
        if edge.comm is not None:
            return edge.comm
        lat = self.route_latency[a][b]
        if lat == INF:
            return INF
        return lat + edge.bytes * self.route_sec_per_byte[a][b]

    def feasible_devices(self, t: int) -> tuple[int, ...]:
        return tuple(d for d, x in enumerate(self.time[t]) if x < INF)
