"""Related-machines instances as explicit-cost graphs and platforms.

The model of the HEFT paper's experiments and of SAGA (Coleman and
Krishnamachari, "Scheduling Algorithms Gauntlet", arXiv:2403.07120): each
node has a speed, each node pair a link strength, each task a cost and each
edge a data size; a task runs ``cost / speed`` seconds on a node and an edge
between different nodes takes ``size / strength`` seconds. In mapper terms
that is a platform of rate-less devices joined by zero-latency links of
bandwidth ``strength`` bytes/s, tasks with an explicit cost per device, and
edges with ``bytes = size``: the cost table then gives the same times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mapper.core.graph import Edge, Task, TaskGraph
from mapper.errors import InputError
from mapper.frontend.importers.dsl_writer import is_name
from mapper.platform.loader import DEVICE_KINDS, Device, Link, Platform


@dataclass(frozen=True, slots=True)
class RelatedNetwork:
    """Nodes with speeds and symmetric link strengths.

    ``strength[a][b]`` (bytes per second; ``a != b``) must equal
    ``strength[b][a]``; 0 means no link. The diagonal is ignored (a transfer
    within a node is free).
    """

    names: tuple[str, ...]
    speeds: tuple[float, ...]
    strength: tuple[tuple[float, ...], ...]
    kind: str = "cpu"

    def __post_init__(self) -> None:
        n = len(self.names)
        if n == 0 or len(self.speeds) != n or len(self.strength) != n or any(len(r) != n for r in self.strength):
            raise InputError("a related network needs one speed and one strength row per node", obj="network")
        if self.kind not in DEVICE_KINDS:
            raise InputError(f"unknown device kind {self.kind!r}", obj="network")
        for i, (name, s) in enumerate(zip(self.names, self.speeds)):
            if not is_name(name) or name in DEVICE_KINDS:
                raise InputError(f"node name {name!r} is not a device name", obj="network")
            if not (s > 0 and math.isfinite(s)):
                raise InputError(f"node {name} needs a finite speed > 0, got {s}", obj="network")
            for j in range(n):
                x = self.strength[i][j]
                if i != j and not (x >= 0 and x == self.strength[j][i] and math.isfinite(x)):
                    raise InputError(f"strength {name} <-> {self.names[j]} must be finite, >= 0 and symmetric",
                                     obj="network")

    @classmethod
    def uniform(cls, speeds: Sequence[float], strength: float, prefix: str = "p") -> RelatedNetwork:
        """Nodes ``p1, p2, ...`` with ``speeds`` and one strength for every pair."""
        n = len(speeds)
        return cls(tuple(f"{prefix}{i + 1}" for i in range(n)), tuple(float(s) for s in speeds),
                   tuple(tuple(0.0 if i == j else float(strength) for j in range(n)) for i in range(n)))

    def platform(self, name: str = "related") -> Platform:
        """Rate-less devices and, per linked pair, a link of ``strength / 1e9`` GB/s
        each way with no latency; no host, so unlinked pairs have no route."""
        devices = tuple(Device(index=i, name=nm, kind=self.kind) for i, nm in enumerate(self.names))
        links: list[Link] = []
        for a in range(len(self.names)):
            for b in range(len(self.names)):
                if a != b and self.strength[a][b] > 0:
                    links.append(Link(len(links), self.names[a], self.names[b], self.strength[a][b] / 1e9, 0.0))
        return Platform(name=name, devices=devices, links=tuple(links), host=None,
                        description="related machines: time = cost / speed, comm = size / strength")


def related_instance(name: str, task_names: Sequence[str], costs: Sequence[float],
                     edges: Sequence[tuple[int, int, float]], network: RelatedNetwork) -> tuple[TaskGraph, Platform]:
    """The graph and platform of a related-machines instance.

    Parameters
    ----------
    name : graph name.
    task_names : one DSL identifier per task.
    costs : task costs (seconds on a node of speed 1).
    edges : ``(src, dst, size)`` with task indices and sizes in bytes.
    network : the nodes and links.

    Returns
    -------
    (TaskGraph, Platform)
        Task ``i`` costs ``costs[i] / speed[d]`` on device ``d`` (explicit);
        edges keep their sizes as bytes, ordered by (dst, src) as the lowerer
        orders them.
    """
    if len(task_names) != len(costs):
        raise InputError("one cost per task is needed", obj=name)
    tasks = []
    for i, (tn, c) in enumerate(zip(task_names, costs)):
        if not (c >= 0 and math.isfinite(c)):
            raise InputError(f"task {tn} needs a finite cost >= 0, got {c}", obj=tn)
        tasks.append(Task(i, tn, "task", explicit_cost=tuple(sorted(
            (dn, float(c) / s) for dn, s in zip(network.names, network.speeds)))))
    order = sorted(edges, key=lambda e: (e[1], e[0]))
    graph = TaskGraph(name, tuple(tasks), tuple(Edge(k, s, d, float(b)) for k, (s, d, b) in enumerate(order)))
    return graph, network.platform(f"{name}_net")
