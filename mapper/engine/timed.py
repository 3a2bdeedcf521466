"""The data a timed schedule is made of: the options of the delay model, an assignment, each
task's slot and each transfer (built by :mod:`mapper.engine.schedule`, which re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

from mapper.costing.cost import CostTable


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
    """The transfer of edge ``edge``; ``start`` is the producer's end and
    ``end`` the arrival. ``hops`` (``(link, start, end)`` per link of the
    route) is filled only under link contention."""

    edge: int
    src_device: int
    dst_device: int
    start: float
    end: float
    links: tuple[int, ...] = ()
    hops: tuple[tuple[int, float, float], ...] = ()


@dataclass(frozen=True, slots=True, repr=False, weakref_slot=True)
class Schedule:
    """Timed result. ``slots[t]`` is task ``t``'s slot; transfers by edge index.

    ``order[d]`` is the execution order on device ``d`` (re-timing it with
    :func:`build_schedule` gives this schedule back); ``streamed`` lists the
    pipelined FPGA chains (tasks in chain order) when streaming is on.
    """

    cost: CostTable
    options: ScheduleOptions
    slots: tuple[TaskSlot, ...]
    transfers: tuple[Transfer, ...]
    makespan: float
    order: tuple[tuple[int, ...], ...] = ()
    streamed: tuple[tuple[int, ...], ...] = ()

    @property
    def device_of(self) -> tuple[int, ...]:
        return tuple(s.device for s in self.slots)

    @property
    def assignment(self) -> Assignment:
        return Assignment(self.device_of, self.order or None)

    def __repr__(self) -> str:
        return (f"Schedule({self.cost.graph.name!r} on {self.cost.platform.name!r}, makespan {self.makespan:.6g} s, "
                f"{len(self.slots)} tasks, {len(self.transfers)} transfers)")
