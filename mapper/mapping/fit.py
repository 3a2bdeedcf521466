"""Memory feasibility of a declared result: no schedule is reported that its devices cannot hold.

The delay model (docs/architecture.md) leaves memory out unless ``--memory`` is on, so a
mapper may put more on a device than it has. Before a result is declared,
:func:`fitting` measures each device's peak over time (:func:`mapper.engine.memory.peak_memory`);
when one exceeds its capacity, the mapping is made again with the memory constraint on
(each device's static footprints within its capacity, which bounds the peak). When that
finds no mapping either, :class:`~mapper.errors.InfeasibleError` (exit 3) names the device
and the bytes.
"""

from __future__ import annotations

from dataclasses import replace

from mapper.core.units import fmt_bytes_pair
from mapper.costing.cost import CostTable
from mapper.engine.memory import peak_memory
from mapper.engine.schedule import Schedule
from mapper.errors import InfeasibleError
from mapper.mapping.base import MapOptions, Mapper, MapResult

#: Relative slack on a capacity, as the validator allows (float sums of byte counts).
SLACK = 1e-9


def overflow(schedule: Schedule) -> tuple[int, float] | None:
    """The device whose peak exceeds its memory by the most (its index and peak bytes); None when all fit."""
    cap = schedule.cost.memory_capacity
    worst: tuple[float, int, float] | None = None
    for d, peak in enumerate(peak_memory(schedule)):
        if peak.bytes > cap[d] * (1 + SLACK):
            excess = peak.bytes - cap[d]
            if worst is None or excess > worst[0]:
                worst = (excess, d, peak.bytes)
    return None if worst is None else (worst[1], worst[2])


def too_big(cost: CostTable, device: int, peak: float) -> str:
    """``81.2 GiB on gpu0, which has 80 GiB``: with the digits that tell the two apart."""
    held, has = fmt_bytes_pair(peak, cost.memory_capacity[device])
    return f"{held} on {cost.platform.devices[device].name}, which has {has}"


def fitting(result: MapResult, mapper: Mapper, cost: CostTable, options: MapOptions) -> MapResult:
    """``result`` when every device holds its peak; else ``mapper``'s mapping with the memory
    constraint on (and a note saying so); :class:`InfeasibleError` when there is none."""
    over = overflow(result.schedule)
    if over is None:
        return result
    first = too_big(cost, *over)
    if options.schedule.memory:  # a mapper that ignored the constraint it was given: not a mapping
        raise InfeasibleError(f"no mapping fits the devices' memory: {result.mapper}'s puts {first}", obj="--memory")
    fitted = replace(options, schedule=replace(options.schedule, memory=True))
    try:
        remapped = mapper.map(cost, fitted)
    except InfeasibleError as err:
        raise InfeasibleError(
            f"no mapping of {cost.graph.name} fits the devices' memory: {result.mapper}'s puts {first}; "
            f"with each device's memory enforced: {err.message}", obj=err.obj,
            hint="a platform with more memory, smaller sizes (--param), or --parallel to split the ops") from None
    again = overflow(remapped.schedule)
    if again is not None:
        raise InfeasibleError(f"no mapping of {cost.graph.name} fits the devices' memory: "
                              f"{remapped.mapper}'s puts {too_big(cost, *again)}", obj="--memory")
    note = (f"memory: the delay-model mapping put {first}: mapped again with each device's "
            "memory enforced (--memory)")
    return replace(remapped, notes=(*remapped.notes, note))
