"""THE timing semantics of mapper (DESIGN.md section 3, the delay model).

Given an assignment of tasks to devices (and optionally a per-device order),
compute when every task and transfer runs. The MILP and the validator encode
the same rules; this module is the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.cost import CostTable


@dataclass(frozen=True, slots=True)
class ScheduleOptions:
    """Optional refinements of the delay model; all off by default."""

    contention: bool = False  # transfers sharing a link are serialised
    streaming: bool = False  # chains of streamable tasks on one FPGA pipeline
    memory: bool = False  # static footprint per device must fit its memory
    area: bool = False  # tasks resident on an FPGA must fit its area

    @property
    def enabled(self) -> tuple[str, ...]:
        return tuple(n for n in ("contention", "streaming", "memory", "area") if getattr(self, n))


@dataclass(frozen=True, slots=True)
class Assignment:
    """``device[t]`` for every task; ``order[d]``, when given, fixes the
    execution order on each device (else insertion-based list scheduling)."""

    device: tuple[int, ...]
    order: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class TaskSlot:
    task: int
    device: int
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Transfer:
    edge: int
    src_device: int
    dst_device: int
    start: float
    end: float
    links: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Schedule:
    """Timed result. ``slots[t]`` is task ``t``'s slot; transfers by edge index."""

    cost: CostTable
    options: ScheduleOptions
    slots: tuple[TaskSlot, ...]
    transfers: tuple[Transfer, ...]
    makespan: float

    @property
    def device_of(self) -> tuple[int, ...]:
        return tuple(s.device for s in self.slots)
