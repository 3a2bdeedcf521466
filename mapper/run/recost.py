"""The same schedule priced on another platform.

:func:`with_cpu_model` gives a platform its CPU devices' model numbers from
another platform (typically a calibration of this machine,
:func:`mapper.run.calibration.writer.calibrated_platform`), keeping everything else;
:func:`reprice` re-times a mapped schedule, with its assignment and
per-device order unchanged, on the cost table of such a platform (the delay
model of :mod:`mapper.engine.schedule`), and checks the result with the independent
validator. ``mapper run --calibrate`` uses both to predict a run with a
calibration made during it.
"""

from __future__ import annotations

import dataclasses

from mapper.costing.cost import build_cost_table
from mapper.engine.schedule import Assignment, Schedule, build_schedule
from mapper.engine.validate import require_valid
from mapper.errors import OptionsError
from mapper.mapping.base import MapResult
from mapper.mapping.objectives import objective_value
from mapper.platform.loader import Device, Platform

#: Fields of a :class:`~mapper.platform.loader.Device` that :func:`with_cpu_model`
#: keeps from the target platform: identity, memory, power, and the
#: FPGA-only keys. Every other field is a model number (rates, bandwidths,
#: launch, efficiencies, overheads, the ``gemm_*`` keys, ``im2col_gbs``,
#: the cache), so a field added to ``Device`` later is a model number unless
#: it is listed here.
KEPT_FIELDS: tuple[str, ...] = (
    "index", "name", "kind", "memory_gib", "power_active_w", "power_idle_w",
    "area", "clock_mhz", "reconfig_ms", "streaming", "mig", "mps_percent",
)

#: The model numbers :func:`with_cpu_model` copies, in ``Device`` field order.
MODEL_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Device) if f.name not in KEPT_FIELDS
)


def first_cpu(platform: Platform) -> Device:
    """The first device of ``kind = "cpu"`` in ``platform``.

    Raises
    ------
    OptionsError
        ``platform`` has no CPU device (named as ``obj``).
    """
    for dev in platform.devices:
        if dev.kind == "cpu":
            return dev
    raise OptionsError(
        f"platform {platform.name!r} has no CPU device ({platform.summary()}): there is no CPU model to calibrate",
        obj=platform.name,
    )


def with_cpu_model(platform: Platform, calibrated: Platform) -> Platform:
    """``platform`` with every CPU device's model numbers taken from ``calibrated``.

    Parameters
    ----------
    platform : the platform a graph was mapped on.
    calibrated : a platform whose first CPU device carries the model to use
        (a calibration's platform has exactly one).

    Returns
    -------
    Platform
        Equal to ``platform`` except that each ``kind = "cpu"`` device has the
        :data:`MODEL_FIELDS` of ``calibrated``'s first CPU device (absent keys
        included: a model is taken whole); names, indices, memory, power,
        links, the host and every GPU and FPGA are ``platform``'s.

    Raises
    ------
    OptionsError
        Either platform has no CPU device.
    """
    first_cpu(platform)
    model = first_cpu(calibrated)
    numbers = {name: getattr(model, name) for name in MODEL_FIELDS}
    devices = tuple(dataclasses.replace(d, **numbers) if d.kind == "cpu" else d for d in platform.devices)
    return dataclasses.replace(platform, devices=devices)


def device_order(schedule: Schedule) -> tuple[tuple[int, ...], ...]:
    """Each device's tasks in run order: ``schedule.order``, or, for a
    schedule made without one, its slots by start, end and task index."""
    if schedule.order:
        return schedule.order
    n_dev = len(schedule.cost.platform.devices)
    slots = sorted(schedule.slots, key=lambda s: (s.start, s.end, s.task))
    return tuple(tuple(s.task for s in slots if s.device == d) for d in range(n_dev))


def _same_devices(a: Platform, b: Platform) -> bool:
    return [(d.name, d.kind) for d in a.devices] == [(d.name, d.kind) for d in b.devices]


def reprice(result: MapResult, platform: Platform) -> MapResult:
    """``result``'s schedule re-timed on ``platform``'s cost table.

    The assignment and per-device order stay as they are; every task's time
    and every transfer come from ``build_cost_table(graph, platform)`` and
    :func:`mapper.engine.schedule.build_schedule` times them with the schedule's own
    options. The new schedule is checked with the independent validator
    (:func:`mapper.engine.validate.require_valid`). The result keeps the mapper's
    name and objective, with the objective's value on the new table; its
    lower bound and gap, which were for the old table, are dropped, and an
    ``optimal`` status becomes ``feasible``.

    Parameters
    ----------
    result : a mapped schedule.
    platform : the same devices (names and kinds, in order) with other
        numbers, e.g. :func:`with_cpu_model` of the mapping's platform.

    Raises
    ------
    OptionsError
        ``platform``'s devices differ from the mapping platform's.
    InfeasibleError
        A task cannot run on its device on ``platform``, or a transfer has no route.
    """

    old = result.schedule
    if not _same_devices(old.cost.platform, platform):
        raise OptionsError(
            f"platform {platform.name!r} does not have the devices of {old.cost.platform.name!r} "
            "(names and kinds, in order): the schedule can't be re-priced on it",
            obj=platform.name,
        )
    cost = build_cost_table(old.cost.graph, platform)
    schedule = build_schedule(cost, Assignment(old.device_of, device_order(old)), old.options)
    repriced = dataclasses.replace(
        result,
        schedule=schedule,
        status="feasible" if result.status == "optimal" else result.status,
        objective_value=objective_value(schedule, result.objective),
        lower_bound=None,
        gap=None,
        notes=(*result.notes, f"re-priced on platform {platform.name!r} (same assignment and order)"),
    )
    return require_valid(repriced)
