"""Helpers shared by every report writer.

Atomic file writes, time formatting, per-device statistics, the critical
path of a schedule, stable colours, and the :class:`RunRecord` protocol that
lets reports show predicted against measured times.
"""

from __future__ import annotations

import bisect
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from mapper.engine.schedule import Schedule
from mapper.errors import OptionsError
from mapper.mapping.base import MapResult


# -- the execution-trace protocol ---------------------------------------------
@runtime_checkable
class RunRecord(Protocol):
    """One executed task, as the HTML and Chrome-trace writers read it.

    Attributes
    ----------
    task : int or str
        Task index or task name.
    device : int or str
        Device index or device name it ran on.
    predicted_start, predicted_end : float
        The schedule's times, seconds.
    measured : float or None
        Wall-clock duration measured on this machine, seconds.
    modelled : float or None
        Modelled duration (for devices that are not present), seconds.
    """

    task: int | str
    device: int | str
    predicted_start: float
    predicted_end: float
    measured: float | None
    modelled: float | None


@dataclass(frozen=True, slots=True)
class RunRow:
    """A :class:`RunRecord` resolved against a schedule (indices, not names)."""

    task: int
    device: int
    predicted_start: float
    predicted_end: float
    measured: float | None
    modelled: float | None
    worker: str | None = None  # the engine's worker that ran it (a Dask run); None for the local executor

    @property
    def predicted(self) -> float:
        return self.predicted_end - self.predicted_start

    @property
    def actual(self) -> float | None:
        """Modelled duration when given (accelerators), else the measured one."""
        return self.modelled if self.modelled is not None else self.measured


def _resolve(value: int | str, names: Sequence[str], what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise OptionsError(f"run record {what} must be an index or a name, got {value!r}", obj="run")
    if isinstance(value, int):
        if 0 <= value < len(names):
            return value
        raise OptionsError(f"run record {what} index {value} is out of range", obj="run")
    try:
        return names.index(value)
    except ValueError:
        raise OptionsError(f"run record names unknown {what} {value!r}", obj="run") from None


def resolve_run(schedule: Schedule, run) -> tuple[RunRow, ...]:
    """Check ``run`` against ``schedule`` and return its rows in task index order.

    ``run`` is a sequence of :class:`RunRecord`, or an object whose ``records``
    attribute is one (such as an execution trace), or None.
    """
    run = getattr(run, "records", run)
    if not run:
        return ()
    tasks = [t.name for t in schedule.cost.graph.tasks]
    devices = [d.name for d in schedule.cost.platform.devices]
    rows = []
    for rec in run:
        if not isinstance(rec, RunRecord):
            raise OptionsError(f"{rec!r} lacks the RunRecord attributes", obj="run")
        rows.append(
            RunRow(
                task=_resolve(rec.task, tasks, "task"),
                device=_resolve(rec.device, devices, "device"),
                predicted_start=float(rec.predicted_start),
                predicted_end=float(rec.predicted_end),
                measured=None if rec.measured is None else float(rec.measured),
                modelled=None if rec.modelled is None else float(rec.modelled),
                worker=None if getattr(rec, "worker", None) is None else str(rec.worker),  # type: ignore[attr-defined]
            )
        )
    return tuple(sorted(rows, key=lambda r: (r.task, r.predicted_start)))


def as_schedule(obj: MapResult | Schedule) -> Schedule:
    """The schedule of a :class:`MapResult`, or ``obj`` itself."""
    return obj.schedule if isinstance(obj, MapResult) else obj


# -- numbers --------------------------------------------------------------------
def round_sig(x: float, digits: int = 12) -> float | None:
    """``x`` rounded to ``digits`` significant digits; None when not finite."""
    if x is None or not math.isfinite(x):
        return None
    return float(format(x, _SPECS.get(digits) or f".{digits}g")) + 0.0  # + 0.0 turns -0.0 into 0.0


_SPECS = {12: ".12g"}


# -- per-device statistics ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DeviceStats:
    """One device's share of a schedule. ``busy`` is the union of its task
    intervals (overlapping streamed tasks count once)."""

    index: int
    name: str
    kind: str
    tasks: int
    busy: float
    utilisation: float  # busy / makespan, 0 when the makespan is 0


def union_length(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    cur_s = 0.0
    cur_e: float | None = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def device_stats(schedule: Schedule) -> tuple[DeviceStats, ...]:
    """Tasks, busy time and utilisation per device, in device index order."""
    per: list[list[tuple[float, float]]] = [[] for _ in schedule.cost.platform.devices]
    for s in schedule.slots:
        per[s.device].append((s.start, s.end))
    out = []
    for d, dev in enumerate(schedule.cost.platform.devices):
        busy = union_length(per[d])
        util = busy / schedule.makespan if schedule.makespan > 0 else 0.0
        out.append(DeviceStats(d, dev.name, dev.kind, len(per[d]), busy, util))
    return tuple(out)


def transfer_of_edge(schedule: Schedule) -> dict[int, int]:
    """Edge index -> position in ``schedule.transfers``."""
    return {tr.edge: i for i, tr in enumerate(schedule.transfers)}


def task_levels(schedule_or_graph) -> tuple[int, ...]:
    """Topological level of each task: 0 for sources, else 1 + max over preds."""
    graph = getattr(getattr(schedule_or_graph, "cost", None), "graph", schedule_or_graph)
    level = [0] * len(graph.tasks)
    for t in graph.topo_order:
        for p in graph.pred_tasks(t):
            level[t] = max(level[t], level[p] + 1)
    return tuple(level)


# -- the critical path --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PathStep:
    """One element of the critical path: ``kind`` is ``task`` or ``transfer``;
    ``index`` is a task index or an edge index."""

    kind: str
    index: int


def critical_path(schedule: Schedule) -> tuple[PathStep, ...]:
    """The chain of tasks and transfers that ends the schedule, first to last.

    Start at the task that ends at the makespan (lowest index on ties) and walk
    back: a task waited on whatever became ready last among its incoming
    transfers (cross-device edges), its same-device predecessors (data) and the
    task before it on its device (the resource); a transfer waited on its
    source task or, under link contention, on the transfer before it on a
    shared link; a task inside a streamed FPGA chain waited on the chain's
    stage before it (it starts before that stage ends: the pipeline's fill).
    The walk stops at an element that waited on nothing (it starts at a time
    no predecessor explains, e.g. 0). This is the classic critical
    path of a list schedule (Topcuoglu, Hariri, Wu, "Performance-effective and
    low-complexity task scheduling for heterogeneous computing", IEEE TPDS
    13(3), 2002, section 4.2), extended with resource waits.
    """
    slots = schedule.slots
    if not slots:
        return ()
    graph = schedule.cost.graph
    tol = 1e-9 * max(1.0, abs(schedule.makespan))
    xfer = {tr.edge: tr for tr in schedule.transfers}
    chain_prev = {c[k]: c[k - 1] for c in getattr(schedule, "streamed", ()) for k in range(1, len(c))}
    # (end, start, index) sorted per device and per link: "what ended at time s"
    # is a bisection, so the walk is O(path length * log n)
    dev_ends: dict[int, list[tuple[float, float, int]]] = {}
    for sl in slots:
        dev_ends.setdefault(sl.device, []).append((sl.end, sl.start, sl.task))
    link_ends: dict[int, list[tuple[float, float, int]]] = {}
    for tr in schedule.transfers:
        for link in tr.links:
            link_ends.setdefault(link, []).append((tr.end, tr.start, tr.edge))
    for table in (dev_ends, link_ends):
        for rows in table.values():
            rows.sort()

    def ended_at(rows: list[tuple[float, float, int]], t: float, me: int) -> list[int]:
        lo = bisect.bisect_left(rows, (t - tol, -math.inf, -1))
        hi = bisect.bisect_right(rows, (t + tol, math.inf, len(slots) + len(graph.edges)))
        return [i for end, start, i in rows[lo:hi] if i != me and start < t]

    last = min(range(len(slots)), key=lambda t: (-slots[t].end, t))
    path = [PathStep("task", last)]
    seen = {path[0]}
    while True:
        step = path[-1]
        cands: list[tuple[float, int, PathStep]] = []  # (ready, priority, step)
        if step.kind == "task":
            me = slots[step.index]
            start = me.start
            for e in graph.preds[step.index]:
                edge = graph.edges[e]
                inbound = xfer.get(e)
                if inbound is not None and slots[edge.src].device != me.device:
                    cands.append((inbound.end, 0, PathStep("transfer", e)))
                else:
                    cands.append((slots[edge.src].end, 0, PathStep("task", edge.src)))
            if step.index in chain_prev:  # pipelined: explained by the stage before it
                cands.append((start, 0, PathStep("task", chain_prev[step.index])))
            for other in ended_at(dev_ends[me.device], start, step.index):
                cands.append((slots[other].end, 1, PathStep("task", other)))
        else:
            tr = xfer[step.index]
            start = tr.start
            src = graph.edges[step.index].src
            cands.append((slots[src].end, 0, PathStep("task", src)))
            for link in tr.links:
                for e in ended_at(link_ends[link], start, step.index):
                    cands.append((xfer[e].end, 1, PathStep("transfer", e)))
        ready = [c for c in cands if c[0] <= start + tol and c[0] >= start - tol and c[2] not in seen]
        if not ready:
            break
        nxt = min(ready, key=lambda c: (c[1], c[2].kind != "transfer", c[2].index))[2]
        path.append(nxt)
        seen.add(nxt)
    return tuple(reversed(path))


# -- colours ----------------------------------------------------------------------
#: Twenty distinguishable colours (Tableau 20 order, dark shades first).
PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip

#: Ops of the catalogue (docs/ops.md) in a fixed colour order.
_KNOWN_OPS = (
    # DNN ops take the first ten colours; explicit-cost tasks and scientific ops the next ten
    "matmul", "conv2d", "attention", "layernorm", "add", "gelu", "softmax", "relu", "batchnorm", "maxpool",
    "task", "stencil", "spmv", "fft", "dot", "axpy", "reduce", "elementwise", "embedding", "avgpool",
)  # fmt: skip


def op_colour(op: str) -> str:
    """A stable colour for an op: fixed for catalogue ops, hashed for others."""
    if op in _KNOWN_OPS:
        return PALETTE[_KNOWN_OPS.index(op)]
    return PALETTE[zlib.crc32(op.encode("utf-8")) % len(PALETTE)]


#: Device colours: by kind family, shade by index within the kind.
_KIND_COLOURS = {
    "cpu": ("#4e79a7", "#a0cbe8", "#1f4e79", "#7aa6d6"),
    "gpu": ("#59a14f", "#8cd17d", "#2e6b27", "#b6e3a8"),
    "fpga": ("#f28e2b", "#ffbe7d", "#b35806", "#fdd0a2"),
}


def device_colours(schedule: Schedule) -> tuple[str, ...]:
    """One colour per device, in device index order (cpu blue, gpu green, fpga orange)."""
    seen: dict[str, int] = {}
    out = []
    for dev in schedule.cost.platform.devices:
        k = seen.get(dev.kind, 0)
        seen[dev.kind] = k + 1
        shades = _KIND_COLOURS.get(dev.kind)
        out.append(shades[k % len(shades)] if shades else PALETTE[(9 + dev.index) % len(PALETTE)])
    return tuple(out)


def nice_step(span: float, target: int = 8) -> float:
    """A 1-2-5 tick step that cuts ``span`` into about ``target`` pieces."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / target
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= m * mag:
            return m * mag
    return 10.0 * mag


def text_colour(fill: str) -> str:
    """Black or white, whichever reads better on the ``#rrggbb`` colour ``fill``."""
    r, g, b = (int(fill[i : i + 2], 16) / 255.0 for i in (1, 3, 5))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#111111" if luminance > 0.55 else "#ffffff"


def clip_text(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters with an ellipsis ('' if < 2 fit)."""
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1] + "\u2026" if max_chars >= 2 else ""


# -- link tracks ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LinkTrack:
    """A lane for transfers: a platform link (``link`` >= 0), or a device pair
    for transfers that use no link (``link == -1``, e.g. explicit ``comm``)."""

    key: str  # "src->dst"
    link: int
    src: str
    dst: str


@dataclass(frozen=True, slots=True)
class TransferPiece:
    """Part of a transfer drawn on one track: ``track`` indexes the tracks."""

    edge: int
    track: int
    start: float
    end: float


def link_tracks(schedule: Schedule) -> tuple[tuple[LinkTrack, ...], tuple[TransferPiece, ...]]:
    """The tracks that carry transfers (platform links in link order, then
    link-less device pairs) and each transfer's piece on each link of its
    route (its per-hop times under contention, else its whole interval),
    ordered by edge then route position."""
    plat = schedule.cost.platform
    devs = plat.devices
    found: dict[tuple[int, int, int], LinkTrack] = {}
    raw: list[tuple[int, tuple[int, int, int], float, float]] = []
    for tr in sorted(schedule.transfers, key=lambda x: x.edge):
        hops = getattr(tr, "hops", ())
        if hops:
            parts = [((0, link, 0), s, e) for link, s, e in hops]
        elif tr.links:
            parts = [((0, link, 0), tr.start, tr.end) for link in tr.links]
        else:
            parts = [((1, tr.src_device, tr.dst_device), tr.start, tr.end)]
        for key, s, e in parts:
            if key not in found:
                if key[0] == 0:
                    ln = plat.links[key[1]]
                    found[key] = LinkTrack(f"{ln.src}->{ln.dst}", ln.index, ln.src, ln.dst)
                else:
                    a, b = devs[key[1]].name, devs[key[2]].name
                    found[key] = LinkTrack(f"{a}->{b}", -1, a, b)
            raw.append((tr.edge, key, s, e))
    order = sorted(found)
    index = {k: i for i, k in enumerate(order)}
    tracks = tuple(found[k] for k in order)
    return tracks, tuple(TransferPiece(edge, index[key], s, e) for edge, key, s, e in raw)
