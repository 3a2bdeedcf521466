"""The cost table: what each task costs on each device, and each edge between
each pair of devices.

:func:`build_cost_table` prices every task on every device with the
device-latency model of :mod:`mapper.costing` (docs/cost_model.md);
explicit per-device costs win over the model. Transfers follow the timing
semantics of docs/architecture.md: the sum over a route's links of latency
plus bytes over bandwidth.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from mapper.core.graph import Placement, SourceNode, Task, TaskGraph
from mapper.core.units import fmt_bytes_pair
from mapper.costing.efficiency import op_class
from mapper.costing.latency import NO_RATES, Estimate, estimate, infeasible_estimate
from mapper.errors import InfeasibleError, InputError, OptionsError
from mapper.platform.loader import DEVICE_KINDS, Device, Platform

INF = math.inf
GIB = float(2**30)
MIB = float(2**20)


#: What each bound code means (the ``bound`` matrix holds the long names).
BOUNDS = ("compute", "memory", "launch", "serial", "explicit", "infeasible")


@dataclass(frozen=True, slots=True, repr=False, weakref_slot=True)
class CostTable:
    """Per-task, per-device times and per-pair route data. ``inf`` = infeasible.

    All matrices are tuples of tuples: ``time[t][d]``, ``route_latency[a][b]``.
    A device pair without a route has ``inf`` latency and per-byte time and an
    empty ``routes`` entry; an edge between such devices costs ``inf`` unless
    it has an explicit ``comm`` (see :meth:`route_error`).
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
    _feasible: tuple[tuple[int, ...], ...] = field(init=False, compare=False)  # [task] devices with finite time

    def __post_init__(self) -> None:
        feasible = tuple(tuple(d for d, x in enumerate(row) if x < INF) for row in self.time)
        object.__setattr__(self, "_feasible", feasible)

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
        """Devices where task ``t`` has a finite time, ascending."""
        return self._feasible[t]

    def has_route(self, a: int, b: int) -> bool:
        """True when data can move from device ``a`` to device ``b``."""
        return self.route_latency[a][b] < INF

    def reason(self, t: int, d: int) -> str | None:
        """Why task ``t`` cannot run on device ``d``; None when it can."""
        for task, dev, why in self.reasons:
            if task == t and dev == d:
                return why
        return None

    def route_error(self, e: int, a: int, b: int) -> InfeasibleError:
        """The error to raise when edge ``e`` would need the missing route ``a -> b``."""
        edge = self.graph.edges[e]
        src, dst = self.graph.tasks[edge.src], self.graph.tasks[edge.dst]
        da, db = self.platform.devices[a].name, self.platform.devices[b].name
        via = f" or via host {self.platform.host}" if self.platform.host not in (None, da, db) else ""
        return InfeasibleError(
            f"edge {src.name} -> {dst.name} would move {edge.bytes:.6g} bytes from {da} to {db}, "
            f"but platform {self.platform.name} has no link {da} -> {db}{via}",
            span=dst.span,
            obj=self.graph.name,
        )

    def require_feasible(self) -> None:
        """Raise :class:`InfeasibleError` naming the first task no device can run.

        When no device of the platform has the rates to price the task at
        all, the platform does not describe the graph: that is bad input
        (:class:`InputError`, exit 2), not an infeasible mapping.
        """
        for t in range(self.n_tasks):
            if not self.feasible_devices(t):
                task = self.graph.tasks[t]
                reasons = [self.reason(t, d) or "its time there is infinite" for d in range(self.n_devices)]
                why = "; ".join(f"{self.platform.devices[d].name}: {r}" for d, r in enumerate(reasons))
                if reasons and all(r.startswith(NO_RATES) for r in reasons):
                    raise InputError(
                        f"platform {self.platform.name} cannot price task {task.name}: no device declares "
                        "peak_gflops or mem_bandwidth_gbs", span=task.span, obj=task.name,
                        hint="use a platform with device rates, or give the graph's tasks explicit costs")
                raise InfeasibleError(f"task {task.name} can run on no device ({why})", span=task.span, obj=task.name)

    def __repr__(self) -> str:
        return (f"CostTable({self.graph.name!r} on {self.platform.name!r}: "
                f"{self.n_tasks} tasks x {self.n_devices} devices)")


# -- transfer routes ----------------------------------------------------------

RouteTables = tuple[
    tuple[tuple[float, ...], ...], tuple[tuple[float, ...], ...], tuple[tuple[tuple[int, ...], ...], ...]
]
#: The route tables of the platforms priced last (a platform is immutable; the cluster planner
#: prices every block on one node, whose pairs are many on a large node): (platform, tables).
_ROUTES: list[tuple[Platform, RouteTables]] = []


def route_tables(platform: Platform) -> RouteTables:
    """``(latency, sec_per_byte, routes)`` for every ordered device pair.

    Store-and-forward along :meth:`Platform.route`: latencies and per-byte
    times of the route's links add; no route gives ``inf`` and ``()``. A
    ``shared_memory`` link moves no bytes: it costs its ``sync_us`` (the
    hand-over between two processors on one DRAM).
    """
    for known, tables in _ROUTES:
        if known is platform:
            return tables
    tables = _route_tables(platform)
    _ROUTES.insert(0, (platform, tables))
    del _ROUTES[4:]
    return tables


def _route_tables(platform: Platform) -> RouteTables:
    """:func:`route_tables`, computed."""
    n = len(platform.devices)
    lat = [[0.0] * n for _ in range(n)]
    spb = [[0.0] * n for _ in range(n)]
    rts: list[list[tuple[int, ...]]] = [[()] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            route = platform.route(a, b)
            if route is None:
                lat[a][b] = spb[a][b] = INF
                continue
            links = [platform.links[i] for i in route]
            lat[a][b] = sum(link.sync_us if link.shared_memory else link.latency_us for link in links) / 1e6
            spb[a][b] = sum(0.0 if link.shared_memory else 1.0 / (link.bandwidth_gbs * 1e9) for link in links)
            rts[a][b] = route
    return (tuple(map(tuple, lat)), tuple(map(tuple, spb)), tuple(map(tuple, rts)))


@functools.lru_cache(maxsize=4096)
def _excluded(placement: Placement, device: str, kind: str) -> Estimate:
    """``placement`` rules ``device`` out (cached: split plans pin thousands of tasks alike)."""
    return infeasible_estimate(f"placement {placement} excludes {device} ({kind})")


def _explicit_costs(task: Task, platform: Platform, index: dict[str, int]) -> dict[int, float]:
    """Device index -> seconds from ``task.explicit_cost``; a key names a device
    (``index``: name -> device index) or a kind."""
    by_name: dict[int, float] = {}
    by_kind: dict[str, float] = {}
    for key, seconds in task.explicit_cost:
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise InputError(f"task {task.name}: cost for {key} must be a finite time >= 0, got {seconds}",
                             span=task.span)
        at = index.get(key)
        if at is not None:
            by_name[at] = float(seconds)
        elif key in DEVICE_KINDS and any(d.kind == key for d in platform.devices):
            by_kind[key] = float(seconds)
        else:
            names = ", ".join(d.name for d in platform.devices)
            raise InputError(
                f"task {task.name} gives a cost for {key!r}, which platform {platform.name} does not have "
                f"(devices: {names})",
                span=task.span,
                obj=task.name,
            )
    out = {d.index: by_kind[d.kind] for d in platform.devices if d.kind in by_kind}
    out.update(by_name)
    return out


def unfused_estimate(parts: Sequence[Task], device: Device) -> Estimate:
    """A fused task on a device that does not fuse (:mod:`mapper.costing.fusion`): its
    parts one after the other, each a kernel call of its own. The bound is
    the longest part's."""
    ests = [estimate(p, op_class(p.op, p.span), device) for p in parts]
    for e in ests:
        if e.time == INF:
            return e
    longest = max(ests, key=lambda e: e.time)
    return Estimate(sum(e.time for e in ests), longest.bound, "", sum(e.t_parallel for e in ests),
                    sum(e.t_serial for e in ests), sum(e.t_memory for e in ests), all(e.cached for e in ests),
                    sum(e.t_overhead for e in ests), sum(e.t_copy for e in ests))


def _fpga_area(task: Task, device: Device, est: Estimate, explicit: bool) -> float:
    """DSP-area units ``task`` occupies on FPGA ``device`` (docs/cost_model.md).

    A streamable task on a streaming FPGA needs only the share of the DSPs that
    keeps its arithmetic in pace with its memory stream, ``A min(1, Tp / Tm)``;
    anything else (and explicit-cost tasks) takes the whole kernel area ``A``.
    """
    cap = device.area
    if cap is None or est.time == INF:
        return 0.0
    if explicit or task.streamable <= 0 or not device.streaming:
        return cap
    if est.t_parallel == 0.0:
        return 0.0
    if est.t_memory == 0.0:
        return cap
    return cap * min(1.0, est.t_parallel / est.t_memory)


def build_cost_table(graph: TaskGraph, platform: Platform) -> CostTable:
    """Cost every task on every device and every device pair's route.

    Order of checks per (task, device): placement, explicit cost, op support,
    rates, footprint vs memory. The first that fails gives the reason.
    """
    devices = platform.devices
    times: list[tuple[float, ...]] = []
    energy: list[tuple[float, ...]] = []
    bounds: list[tuple[str, ...]] = []
    areas: list[tuple[float, ...]] = []
    reasons: list[tuple[int, int, str]] = []
    footprint = footprints(graph)
    capacity = tuple(d.memory_gib * GIB if d.memory_gib is not None else INF for d in devices)
    index = {d.name: d.index for d in devices}
    memo: dict[tuple, tuple] = {}  # explicit-cost tasks alike (a spiking network's neurons) share a row
    plain = _PlainRows(platform, capacity)
    for task in graph.tasks:
        row = plain.row(task, footprint[task.index]) if task.explicit_cost else None
        key = (task.explicit_cost, task.placement, footprint[task.index]) if task.explicit_cost else None
        if row is None and key is not None:
            row = memo.get(key)
        if row is None:
            row = _task_row(task, platform, index, footprint[task.index], capacity)
            if key is not None:
                memo[key] = row
        times.append(row[0])
        energy.append(row[1])
        bounds.append(row[2])
        areas.append(row[3])
        reasons.extend((task.index, d, why) for d, why in row[4])
    _colocate(graph, times, bounds, energy, reasons)
    lat, spb, rts = route_tables(platform)
    return CostTable(
        graph=graph,
        platform=platform,
        time=tuple(times),
        energy=tuple(energy),
        bound=tuple(bounds),
        reasons=tuple(reasons),
        route_latency=lat,
        route_sec_per_byte=spb,
        routes=rts,
        footprint=footprint,
        memory_capacity=capacity,
        area=tuple(areas),
        area_capacity=tuple(
            d.area if d.kind == "fpga" and d.area is not None else INF for d in devices
        ),
    )


#: DSL ops as the ONNX op types an op-support list names, for tasks not imported from a model.
DSL_ONNX = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "matmul": "MatMul", "conv2d": "Conv",
            "conv_transpose2d": "ConvTranspose", "relu": "Relu", "gelu": "Gelu", "softmax": "Softmax",
            "layernorm": "LayerNormalization", "batchnorm": "BatchNormalization", "maxpool": "MaxPool",
            "avgpool": "AveragePool", "reshape": "Reshape", "concat": "Concat", "transpose": "Transpose",
            "split": "Split", "instancenorm": "InstanceNormalization"}


def refusal(task: Task, dev: Device) -> str | None:
    """Why ``dev`` cannot run ``task`` by its ``dtypes`` and op-support list; None when it can.
    Decided per model node (:attr:`Task.sources`); a DSL task by its op's ONNX type (:data:`DSL_ONNX`)."""
    dtype = dict(dev.convert).get(task.dtype, task.dtype)
    if dev.dtypes and dtype not in dev.dtypes:
        return f"{dev.name} runs {'/'.join(dev.dtypes)} only, the task is {task.dtype}"
    if dev.supports is None:
        return None
    nodes = list(task.sources)
    for part in () if nodes else task.parts or (task,):
        op = str(part.attr("kind", "")) if part.op == "opaque" else DSL_ONNX.get(part.op, "")
        if not op:
            return f"{part.op} has no ONNX op type to look up in the {dev.supports.name} list"
        nodes.append(SourceNode(part.name, op, (), tuple(o.type.dtype for o in part.operands), part.dtype,
                                shapes=tuple(o.type.shape for o in part.operands)))
    for node in nodes:
        why = dev.supports.why_not(_as_run(node, dev))
        if why is not None:
            return why
    return None


def _as_run(node: SourceNode, dev: Device) -> SourceNode:
    """``node`` with its dtypes as ``dev`` runs them (its ``convert`` table)."""
    if not dev.convert:
        return node
    conv = dict(dev.convert)
    return replace(node, inputs=tuple(conv.get(d, d) for d in node.inputs), dtype=conv.get(node.dtype, node.dtype))


def converted(dev: Device, dtype: str) -> Device:
    """``dev`` as it prices a task of ``dtype``: a dtype it converts (``convert``) at the rates of
    the dtype it becomes."""
    to = dict(dev.convert).get(dtype)
    if to is None:
        return dev
    peaks = tuple((d, dev.peak(to) or v) if d == dtype else (d, v) for d, v in dev.peak_gflops)
    if dev.peak(to) is not None and dev.peak(dtype) is None:
        peaks += ((dtype, dev.peak(to) or 0.0),)
    tensor = tuple(dev.tensor_gflops) + tuple((dtype, v) for d, v in dev.tensor_gflops if d == to
                                               and dev.tensor_peak(dtype) is None)
    return replace(dev, peak_gflops=peaks, tensor_gflops=tensor)


class _PlainRows:
    """The rows of the commonest explicit-cost tasks, those of a huge generated graph: a plain
    ``task`` with a time for each device by name, placed anywhere, fitting every device's memory,
    on a platform without FPGAs. Read off the cost tuple, with no estimate per device: the numbers
    :func:`_task_row` gives (None for any other task, which it prices)."""

    def __init__(self, platform: Platform, capacity: tuple[float, ...]) -> None:
        devices = platform.devices
        self.usable = bool(devices) and not any(d.kind == "fpga" for d in devices)
        self.names = tuple(d.name for d in devices)
        self.power = tuple(d.power_active_w or 0.0 for d in devices)
        self.room = min(capacity, default=INF)
        self.bound = ("explicit",) * len(devices)
        self.area = (0.0,) * len(devices)
        self.orders: dict[tuple[str, ...], tuple[int, ...] | None] = {}  # cost keys -> each device's entry

    def row(self, task: Task, footprint: float) -> tuple | None:
        if (not self.usable or task.op != "task" or task.placement.allow or task.placement.deny
                or not footprint <= self.room):
            return None
        keys, secs = zip(*task.explicit_cost)
        order = self.orders.get(keys, ())
        if order == ():
            order = self.orders[keys] = self._order(keys)
        if order is None or set(map(type, secs)) != {float} or not (
                min(secs) >= 0 and math.isfinite(sum(secs))):  # sum: any NaN or infinity
            return None
        times = secs if order is _SAME else tuple(secs[i] for i in order)
        return times, tuple(map(operator.mul, self.power, times)), self.bound, self.area, ()

    def _order(self, keys: tuple[str, ...]) -> tuple[int, ...] | None:
        """Where each device's time is among a cost's entries: None unless they name each device once."""
        if len(set(keys)) != len(keys) or sorted(keys) != sorted(self.names):
            return None
        order = tuple(keys.index(n) for n in self.names)
        return _SAME if order == tuple(range(len(keys))) else order


_SAME: tuple[int, ...] = (-1,)  # a cost's entries already in device order


def _task_row(task: Task, platform: Platform, index: dict[str, int], footprint: float,
              capacity: tuple[float, ...]) -> tuple:
    """``(times, energies, bounds, areas, ((device, why), ...))`` of one task on every device."""
    explicit = _explicit_costs(task, platform, index) if task.explicit_cost else None
    cls = op_class(task.op, task.span)
    row_t, row_e, row_b, row_a, why = [], [], [], [], []
    for dev in platform.devices:
        est = _cell(task, dev, cls, explicit, footprint, capacity)
        if est.time == INF:
            why.append((dev.index, est.reason))
        row_t.append(est.time)
        row_b.append(est.bound)
        power = dev.power_active_w or 0.0
        row_e.append(INF if est.time == INF else power * est.time)
        row_a.append(_fpga_area(task, dev, est, explicit is not None) if dev.kind == "fpga" else 0.0)
    return tuple(row_t), tuple(row_e), tuple(row_b), tuple(row_a), tuple(why)


def _cell(task: Task, dev: Device, cls: str, explicit: dict[int, float] | None, footprint: float,
          capacity: tuple[float, ...]) -> Estimate:
    """One task on one device: the checks of :func:`build_cost_table` in its order."""
    if not task.placement.permits(dev.name, dev.kind):
        est = _excluded(task.placement, dev.name, dev.kind)
    elif explicit is not None:
        sec = explicit.get(dev.index)
        est = infeasible_estimate("no cost given") if sec is None else Estimate(sec, "explicit")
    elif (refused := refusal(task, dev)) is not None:
        est = infeasible_estimate(refused)
    elif task.parts and not dev.fuses:
        est = unfused_estimate(task.parts, converted(dev, task.dtype))
    else:
        est = estimate(task, cls, converted(dev, task.dtype))
    if est.time < INF and footprint > capacity[dev.index]:
        need, has = fmt_bytes_pair(footprint, capacity[dev.index])
        est = infeasible_estimate(f"footprint {need} exceeds memory {has}")
    return est


def device_column(graph: TaskGraph, platform: Platform, device: int,
                  tasks: Sequence[int]) -> tuple[dict[int, float], dict[int, str], tuple[float, ...]]:
    """What :func:`build_cost_table` gives ``tasks`` on device ``device`` alone, without costing
    the rest of the graph or the other devices: each task's time there, the reason of each
    infinite one (the first of the table's sorted reasons for that cell), and every task's
    footprint. A colocation class closes the device to all its members as the table does
    (:func:`_colocate`), so the classes of ``tasks`` are costed whole."""
    dev = platform.devices[device]
    footprint = footprints(graph)
    capacity = tuple(d.memory_gib * GIB if d.memory_gib is not None else INF for d in platform.devices)
    index = {d.name: d.index for d in platform.devices}
    classes = colocation_classes(graph)
    wanted = set(tasks)
    cells = sorted(wanted.union(*(m for m in classes if wanted.intersection(m))))
    times: dict[int, float] = {}
    why: dict[int, str] = {}
    for i in cells:
        task = graph.tasks[i]
        explicit = _explicit_costs(task, platform, index) if task.explicit_cost else None
        est = _cell(task, dev, op_class(task.op, task.span), explicit, footprint[i], capacity)
        times[i] = est.time
        if est.time == INF:
            why[i] = est.reason
    for members in classes:
        reason = _closed_by(graph, (t for t in members if t in times and times[t] == INF))
        if reason is None:
            continue
        for t in members:
            if t in times and times[t] < INF:
                times[t] = INF
                why[t] = reason
    return times, why, footprint


def footprints(graph: TaskGraph) -> tuple[float, ...]:
    """Each task's static footprint, what ``--memory`` sums per device: its
    ``memory`` when declared, else the larger of its work's bytes and the data
    it touches (weights, the inputs its edges bring, its output). A device's
    peak over time (:mod:`mapper.engine.memory`) never exceeds the sum over its tasks."""
    incoming = [0.0] * len(graph.tasks)
    for e in graph.edges:
        incoming[e.dst] += e.bytes
    out = []
    for t in graph.tasks:
        if t.memory is not None:
            out.append(float(t.memory))
            continue
        weights = sum(o.type.nbytes for o in t.operands if o.kind == "weight") if t.operands else 0
        produced = t.output.nbytes if t.output is not None else t.bytes_written
        out.append(float(max(t.bytes_read + t.bytes_written, weights + incoming[t.index] + produced)))
    return tuple(out)


def colocation_classes(graph: TaskGraph) -> tuple[tuple[int, ...], ...]:
    """The tasks of each ``colocate`` class with two or more tasks, each ascending, by first task."""
    members: dict[str, list[int]] = {}
    for t in graph.tasks:
        if t.colocate:
            members.setdefault(t.colocate, []).append(t.index)
    return tuple(tuple(m) for m in members.values() if len(m) > 1)


def _closed_by(graph: TaskGraph, cannot: Iterable[int]) -> str | None:
    """Why a device is closed to a colocation class: the first of its members that ``cannot`` run
    there (None: every member can)."""
    blocker = next(iter(cannot), None)
    return None if blocker is None else f"colocated with {graph.tasks[blocker].name!r}, which cannot run here"


def _colocate(graph: TaskGraph, times: list, bounds: list, energy: list, reasons: list) -> None:
    """A device that one task of a colocation class cannot use is closed to the whole class."""
    devices = len(times[0]) if times else 0
    for members in colocation_classes(graph):
        for d in range(devices):
            why = _closed_by(graph, (t for t in members if times[t][d] == INF))
            if why is None:
                continue
            for t in members:
                if times[t][d] < INF:
                    times[t] = times[t][:d] + (INF,) + times[t][d + 1:]
                    energy[t] = energy[t][:d] + (INF,) + energy[t][d + 1:]
                    bounds[t] = bounds[t][:d] + ("infeasible",) + bounds[t][d + 1:]
                    reasons.append((t, d, why))
    reasons.sort()


# -- FPGA streaming -------------------------------------------------------------

def stream_chain_times(times: Sequence[float], chunks: int,
                       launches: Sequence[float] | None = None) -> tuple[tuple[float, float], ...]:
    """(start, end) offsets of each stage of a linear pipeline fed in ``chunks`` chunks.

    Stage ``i`` handles a chunk in ``b_i / C`` (``C = chunks``, ``b_i = t_i -
    L_i``) after paying its launch ``L_i`` once (``launches``, at most
    ``t_i``; none when not given). Without launches, chunk ``c`` leaves stage
    ``i`` at ``f(i, c) = max(f(i-1, c), f(i, c-1)) + b_i / C`` (a permutation
    flow shop of identical jobs), whose closed form is ``f(i, C-1) =
    sum_{j<=i} b_j / C + (C-1) max_{j<=i} b_j / C``; stage ``i`` starts when
    the first chunk leaves stage ``i-1``. Launches are paid in chain order
    and hold back every later stage: stage ``i``'s offsets shift by
    ``sum_{j<=i} L_j`` (``sum_{j<i} L_j`` for its start). So the chain takes
    its launches, its slowest stage and the fill latency (Wilhelm et al.,
    arXiv:2208.06321, streaming FPGA chains), and a launch is never divided
    by the chunk count.
    """
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise OptionsError(f"stream_chain_times: chunks must be an integer >= 1, got {chunks!r}")
    out: list[tuple[float, float]] = []
    head = 0.0  # when the first chunk reaches stage i: its predecessors' launches and first chunks
    slowest = 0.0
    for i, t in enumerate(times):
        t = float(t)
        if not (t >= 0 and math.isfinite(t)):
            raise OptionsError(f"stream_chain_times: stage {i} time must be finite and >= 0, got {t}")
        launch = min(t, max(0.0, float(launches[i]))) if launches is not None else 0.0
        per_chunk = (t - launch) / chunks
        slowest = max(slowest, per_chunk)
        start = head
        head += launch + per_chunk
        out.append((start, head + (chunks - 1) * slowest))
    return tuple(out)
