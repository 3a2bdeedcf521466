"""Objective values of a schedule: makespan, energy, throughput.

Definitions (the MILP encodes the same ones):

``makespan``
    ``schedule.makespan``, the latest task end (seconds).
``energy``
    Active energy only: ``sum_t cost.energy[t][dev(t)]`` (joules). Idle
    power and transfer energy are not counted.
``throughput``
    Reported and minimised as the *period* of pipelined execution of
    successive graph instances, the device-based model after Wilhelm et al.
    (arXiv:2208.06321)::

        period = max_d ( sum_{t : dev(t) = d} time[t][d]
                         + sum_{e = u -> v : dev(v) = d != dev(u)} comm(e, dev(u), d) )

    i.e. each device, per instance, computes its tasks and receives its
    cross-device inputs one after the other. Throughput is ``1 / period``
    instances per second; ``objective_value`` returns the period (seconds,
    lower is better). Times are ``cost.time`` (no streaming overlap).
"""

from __future__ import annotations

from mapper.errors import OptionsError
from mapper.schedule import Schedule

OBJECTIVE_NAMES = ("makespan", "energy", "throughput")


def energy(schedule: Schedule) -> float:
    """Active energy in joules (see the module docstring)."""
    cost = schedule.cost
    return float(sum(cost.energy[s.task][s.device] for s in schedule.slots))


def device_loads(schedule: Schedule) -> tuple[float, ...]:
    """Per device: busy time plus incoming cross-device transfer time."""
    cost = schedule.cost
    load = [0.0] * cost.n_devices
    for s in schedule.slots:
        load[s.device] += cost.time[s.task][s.device]
    dev = schedule.device_of
    for e in cost.graph.edges:
        a, b = dev[e.src], dev[e.dst]
        if a != b:
            load[b] += cost.comm(e.index, a, b)
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
