"""Memory feasibility of a declared result: no schedule is reported that its devices cannot hold.

The delay model (docs/architecture.md) leaves memory out unless ``--memory`` is on, so a
mapper may put more on a device than it has. Before a result is declared,
:func:`fitting` measures each device's peak over time (:func:`mapper.engine.memory.peak_memory`);
when one exceeds its capacity, the mapping is made again with the memory constraint on
(each device's static footprints within its capacity, which bounds the peak). The static
sum can rule out mappings whose peak fits (a training step frees its activations), so when
it finds none, a greedy repair closes the overflowing device to its largest task and maps
again, until every peak fits. When neither finds a mapping,
:class:`~mapper.errors.InfeasibleError` (exit 3) names the device and the bytes.
"""

from __future__ import annotations

from dataclasses import replace

from mapper.core.units import fmt_bytes, fmt_bytes_pair, fmt_n
from mapper.costing.cost import CostTable
from mapper.engine.memory import peak_memory
from mapper.engine.schedule import Schedule, build_schedule
from mapper.errors import InfeasibleError
from mapper.mapping.base import MapOptions, Mapper, MapResult

#: Relative slack on a capacity, as the validator allows (float sums of byte counts).
SLACK = 1e-9


def overflow(schedule: Schedule) -> tuple[int, float] | None:
    """The device whose peak exceeds its memory by the most (its index and peak bytes); None when all fit."""
    cap = schedule.cost.memory_capacity
    if all(c == float("inf") for c in cap):  # no device declares its memory: nothing to check
        return None
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
    constraint on, or, when the static footprints rule every mapping out, one repaired by
    :func:`_repair` (a note says which); :class:`InfeasibleError` when neither fits."""
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
        static = err.message
    else:
        again = overflow(remapped.schedule)
        if again is None:
            note = (f"memory: the delay-model mapping put {first}: mapped again with each device's "
                    "memory enforced (--memory)")
            return replace(remapped, notes=(*remapped.notes, note))
        static = f"{remapped.mapper}'s puts {too_big(cost, *again)}"
    repaired, why = _repair(result, first, mapper, cost, options)
    if repaired is not None:
        return repaired
    raise InfeasibleError(
        f"no mapping of {cost.graph.name} fits the devices' memory: {result.mapper}'s puts {first}; "
        f"with each device's footprints summed: {static}; moving tasks off the full devices: {why}",
        hint="a platform with more memory, smaller sizes (--param), or --parallel to split the ops")


#: Most rounds of :func:`_repair` (each maps the graph once more).
REPAIR_ROUNDS = 48


def _repair(result: MapResult, first: str, mapper: Mapper, cost: CostTable,
            options: MapOptions) -> tuple[MapResult | None, str]:
    """Map again with the overflowing device closed to the largest task on it, until every
    device holds its peak (a greedy repair: a task once moved stays off that device). The
    schedule is re-timed on the full cost table, keeps the first result's lower bound (a
    bound on the delay model bounds every mapping that fits) and is not proven optimal.
    Returns (the result, "") or (None, why it stopped)."""
    closed: set[tuple[int, int]] = set()
    current = result
    for _ in range(REPAIR_ROUNDS):
        over = overflow(current.schedule)
        if over is None:
            sched = build_schedule(cost, current.schedule.assignment, current.schedule.options)
            bound = result.lower_bound
            value = current.objective_value
            gap = max(0.0, (value - bound) / value) if bound is not None and value > 0 else None
            names = sorted({f"{cost.graph.tasks[t].name} off {cost.platform.devices[d].name}" for t, d in closed})
            note = (f"memory: the delay-model mapping put {first}; mapped again with {fmt_n(len(closed), 'task')} "
                    "kept off full devices (" + ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") + ")")
            status = "feasible" if current.status == "optimal" else current.status
            return replace(current, schedule=sched, status=status, lower_bound=bound, gap=gap,
                           notes=(*current.notes, note)), ""
        d, peak = over
        on = [t for t, slot in enumerate(current.schedule.slots) if slot.device == d and (t, d) not in closed]
        if not on:
            return None, f"{too_big(cost, d, peak)} with no task left to move"
        t = max(on, key=lambda t: (cost.footprint[t], -t))
        closed.add((t, d))
        try:
            current = mapper.map(_closed(cost, closed), options)
        except InfeasibleError as err:
            return None, err.message
    return None, f"still over after {REPAIR_ROUNDS} rounds"


def _closed(cost: CostTable, closed: set[tuple[int, int]]) -> CostTable:
    """``cost`` with each (task, device) of ``closed`` infeasible."""
    time = [list(row) for row in cost.time]
    energy = [list(row) for row in cost.energy]
    reasons = list(cost.reasons)
    for t, d in sorted(closed):
        time[t][d] = energy[t][d] = float("inf")
        reasons.append((t, d, "kept off: its device's memory overflowed"))
    return replace(cost, time=tuple(map(tuple, time)), energy=tuple(map(tuple, energy)), reasons=tuple(reasons))


def oversized(result: MapResult) -> MapResult:
    """``result`` with a note when some tasks are too big for some devices' memory on their own
    (the cost table rules those devices out): which tasks, the largest footprint, and where they ran."""
    cost = result.schedule.cost
    big: set[int] = set()
    short: dict[int, None] = {}
    for t, d, why in cost.reasons:
        if why.startswith("footprint"):
            big.add(t)
            short[d] = None
    if not big:
        return result
    devs = cost.platform.devices
    where = dict.fromkeys(devs[result.schedule.slots[t].device].name for t in sorted(big))
    largest = max(cost.footprint[t] for t in big)
    least = min(cost.memory_capacity[d] for d in short)
    note = (f"memory: {len(big)} task{'s' if len(big) != 1 else ''} too big for "
            f"{_names([devs[d].name for d in short])} (footprints up to {fmt_bytes(largest)}, "
            f"memory {fmt_bytes(least)}) ran on {', '.join(where)}; --parallel splits ops across devices")
    return replace(result, notes=(*result.notes, note))


def _names(names: list[str]) -> str:
    """``gpu0, gpu1``, or ``the 8 devices gpu0 .. gpu7`` past three."""
    return ", ".join(names) if len(names) <= 3 else f"the {len(names)} devices {names[0]} .. {names[-1]}"
