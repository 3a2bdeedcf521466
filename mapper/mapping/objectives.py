"""Objective values of a schedule: makespan, energy, throughput.

Definitions (the MILP encodes the same ones):

``makespan``
    ``schedule.makespan``, the latest task end (seconds).
``energy``
    Active energy only: ``sum_t cost.energy[t][dev(t)]`` (joules). Idle
    power and transfer energy are not counted.
``throughput``
    Reported and minimised as the *period* of pipelined execution of
    successive graph instances: the largest per-device load of one
    instance, ``period = max_d load(d)``. Throughput is ``1 / period``
    instances per second; ``objective_value`` returns the period (seconds,
    lower is better). Times are ``cost.time`` (no streaming overlap). The
    platform's ``throughput_model`` says how a device's load is counted:

    ``device-load`` (the default), after Wilhelm et al. (arXiv:2208.06321)::

        load(d) = sum_{t : dev(t) = d} time[t][d]
                  + sum_{e = u -> v : dev(v) = d != dev(u)} comm(e, dev(u), d)

    each device computes its tasks and receives its cross-device inputs one
    after the other.

    ``max-load``, after Tarnawski, Phanishayee, Devanur, Mahajan and
    Nagarajan, "Efficient Algorithms for Device Placement of DNN Graph
    Operators", NeurIPS 2020 (Section 4)::

        load(d) = sum_{t : dev(t) = d} time[t][d]
                  + sum_{u : dev(u) = d, some consumer off d} out(u)
                  + sum_{u : dev(u) != d, some consumer on d} in(u, d)

    an accelerator sends each output once, however many devices read it,
    and receives it once, however many of its tasks read it, and does not
    overlap transfers with compute; ``out(u)`` is the slowest of ``u``'s
    crossing edges, ``in(u, d)`` the slowest of those into ``d`` (with one
    transfer time per output, as in the paper, both are that time). A CPU
    device pays its compute only. Colocation classes and the memory
    knapsack of that model are constraints of every mapping
    (``colocate``, ``--memory``).
"""

from __future__ import annotations

from collections.abc import Sequence

from mapper.cost import CostTable
from mapper.errors import OptionsError
from mapper.schedule import Schedule

OBJECTIVE_NAMES = ("makespan", "energy", "throughput")


def energy(schedule: Schedule) -> float:
    """Active energy in joules (see the module docstring)."""
    cost = schedule.cost
    return float(sum(cost.energy[s.task][s.device] for s in schedule.slots))


def device_loads(schedule: Schedule) -> tuple[float, ...]:
    """Per device: its load under the platform's throughput model (module docstring)."""
    return loads(schedule.cost, schedule.device_of)


def loads(cost: CostTable, device: Sequence[int]) -> tuple[float, ...]:
    """Per device: its load when task ``t`` runs on ``device[t]``, under
    ``cost.platform.throughput_model`` (module docstring)."""
    load = [0.0] * cost.n_devices
    for t, d in enumerate(device):
        load[d] += cost.time[t][d]
    if cost.platform.throughput_model == "max-load":
        return _max_load(cost, device, load)
    for e in cost.graph.edges:
        a, b = device[e.src], device[e.dst]
        if a != b:
            load[b] += cost.comm(e.index, a, b)
    return tuple(load)


def _max_load(cost: CostTable, device: Sequence[int], load: list[float]) -> tuple[float, ...]:
    """Tarnawski et al.'s loads: each output sent once, received once per device."""
    g = cost.graph
    pays = [cost.platform.devices[d].kind != "cpu" for d in range(cost.n_devices)]
    for u in range(cost.n_tasks):
        a = device[u]
        out = 0.0
        into: dict[int, float] = {}
        for ei in g.succs[u]:
            b = device[g.edges[ei].dst]
            if b != a:
                c = cost.comm(ei, a, b)
                out = max(out, c)
                into[b] = max(into.get(b, 0.0), c)
        if into and pays[a]:
            load[a] += out
        for b, c in into.items():
            if pays[b]:
                load[b] += c
    return tuple(load)


def period(schedule: Schedule) -> float:
    """The pipelined period in seconds: ``max(device_loads(schedule))``."""
    return max(device_loads(schedule), default=0.0)


def objective_value(schedule: Schedule, objective: str) -> float:
    """The value of ``objective`` (one of :data:`OBJECTIVE_NAMES`) for ``schedule``."""
    if objective == "makespan":
        return float(schedule.makespan)
    if objective == "energy":
        return energy(schedule)
    if objective == "throughput":
        return period(schedule)
    raise OptionsError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVE_NAMES)}",
                       obj="--objective")
