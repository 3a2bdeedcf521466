"""Shared report helpers (mapper.report.common) and the hand-built schedules
the other report tests use."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from mapper.core import units
from mapper.core.graph import Edge, Task, TaskGraph
from mapper.costing.cost import CostTable
from mapper.engine.schedule import Schedule, ScheduleOptions, TaskSlot, Transfer
from mapper.errors import OptionsError
from mapper.mapping.base import MapResult
from mapper.platform.loader import Device, Link, Platform
from mapper.report import common

INF = math.inf
XSS = "<script>window.__xss=1;alert(1)</script>"


# -- builders (imported by the other test_report_* modules) ------------------------
def make_platform() -> Platform:
    """cpu0 is the host; gpu0 and fpga0 hang off it (no direct gpu-fpga link)."""
    devices = (
        Device(0, "cpu0", "cpu"),
        Device(1, "gpu0", "gpu"),
        Device(2, "fpga0", "fpga"),
    )
    pairs = (("cpu0", "gpu0"), ("gpu0", "cpu0"), ("cpu0", "fpga0"), ("fpga0", "cpu0"))
    links = tuple(Link(i, a, b, bandwidth_gbs=10.0, latency_us=10.0) for i, (a, b) in enumerate(pairs))
    return Platform("tri", devices, links, host="cpu0")


def _routes(platform: Platform):
    names = [d.name for d in platform.devices]
    direct = {(names.index(ln.src), names.index(ln.dst)): ln.index for ln in platform.links}
    host = names.index(platform.host)
    n = len(names)
    routes = [[() for _ in range(n)] for _ in range(n)]
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            if (a, b) in direct:
                routes[a][b] = (direct[(a, b)],)
            else:
                routes[a][b] = (direct[(a, host)], direct[(host, b)])
    lat = [[sum(platform.links[ln].latency_us * 1e-6 for ln in routes[a][b]) for b in range(n)] for a in range(n)]
    spb = [[sum(1.0 / (platform.links[ln].bandwidth_gbs * 1e9) for ln in routes[a][b]) for b in range(n)] for a in range(n)]
    return tuple(map(tuple, routes)), tuple(map(tuple, lat)), tuple(map(tuple, spb))


def build_result(tasks, edges, assign, times, *, platform=None, mapper="heft", status="heuristic", options=None):
    """A MapResult whose schedule is list-scheduled in topological order.

    ``tasks``: (name, op) pairs; ``edges``: (src, dst, bytes); ``assign``:
    device per task; ``times``: seconds per task on its device.
    """
    platform = platform or make_platform()
    n, m = len(tasks), len(platform.devices)
    graph = TaskGraph(
        "g",
        tuple(Task(i, nm, op, flops=1e9 * (i + 1), bytes_read=1e6, bytes_written=2e6) for i, (nm, op) in enumerate(tasks)),
        tuple(Edge(j, s, d, float(b)) for j, (s, d, b) in enumerate(edges)),
    )
    routes, lat, spb = _routes(platform)
    time = tuple(tuple(times[t] if d == assign[t] else times[t] * 2 for d in range(m)) for t in range(n))
    cost = CostTable(
        graph=graph,
        platform=platform,
        time=time,
        energy=tuple((0.0,) * m for _ in range(n)),
        bound=tuple(("explicit",) * m for _ in range(n)),
        reasons=(),
        route_latency=lat,
        route_sec_per_byte=spb,
        routes=routes,
        footprint=(0.0,) * n,
        memory_capacity=(INF,) * m,
        area=tuple((0.0,) * m for _ in range(n)),
        area_capacity=(INF,) * m,
    )
    free = [0.0] * m
    slots: list[TaskSlot | None] = [None] * n
    transfers = []
    for t in graph.topo_order:
        d = assign[t]
        ready = free[d]
        for e in graph.preds[t]:
            src = graph.edges[e].src
            arrive = slots[src].end
            if assign[src] != d:
                c = cost.comm(e, assign[src], d)
                transfers.append(Transfer(e, assign[src], d, slots[src].end, slots[src].end + c, routes[assign[src]][d]))
                arrive += c
            ready = max(ready, arrive)
        slots[t] = TaskSlot(t, d, ready, ready + times[t])
        free[d] = ready + times[t]
    transfers.sort(key=lambda tr: tr.edge)
    makespan = max(s.end for s in slots)
    sched = Schedule(cost, options or ScheduleOptions(), tuple(slots), tuple(transfers), makespan)
    return MapResult(
        sched, mapper, status, "makespan", makespan,
        lower_bound=makespan * 0.8, gap=0.2, solve_time=0.0125, notes=("hand-built schedule",),
    )  # fmt: skip


def small_result(name5: str = "out", **kw) -> MapResult:
    """Six tasks on cpu0/gpu0/fpga0 with direct and host-relayed transfers."""
    tasks = [("embed", "embedding"), ("qkv", "matmul"), ("attn", "attention"),
             ("spec", "fft"), ("norm", "layernorm"), (name5, "relu")]  # fmt: skip
    edges = [(0, 1, 4e6), (0, 3, 2e6), (1, 3, 1e6), (1, 2, 8e6), (2, 4, 4e6), (3, 4, 1e6), (4, 5, 4e6)]
    assign = [0, 1, 1, 2, 0, 0]
    times = [1e-3, 2e-3, 3e-3, 1.5e-3, 0.5e-3, 0.25e-3]
    return build_result(tasks, edges, assign, times, **kw)


def random_result(n: int, seed: int = 0) -> MapResult:
    """A random layered DAG with ``n`` tasks, devices assigned at random."""
    rng = random.Random(seed)
    ops = ("matmul", "add", "gelu", "fft", "stencil")
    tasks = [(f"t{i}", ops[rng.randrange(len(ops))]) for i in range(n)]
    edges = []
    for i in range(1, n):
        for p in sorted(rng.sample(range(max(0, i - 6), i), min(i, rng.randint(1, 2)))):
            edges.append((p, i, rng.choice((0.0, 1e5, 1e6))))
    assign = [rng.randrange(3) for _ in range(n)]
    times = [rng.uniform(1e-4, 1e-3) for _ in range(n)]
    return build_result(tasks, edges, assign, times)


# -- tests ------------------------------------------------------------------------------
def test_small_result_shape():
    res = small_result()
    s = res.schedule
    assert len(s.slots) == 6
    # the gpu -> fpga edge goes through the host: two links
    (tr,) = [t for t in s.transfers if t.edge == 2]
    assert tr.links == (1, 2)
    assert s.makespan == max(x.end for x in s.slots)


def test_critical_path_small():
    res = small_result()
    s = res.schedule
    path = common.critical_path(s)
    g = s.cost.graph
    # ends at the makespan task, starts at a task that starts at 0
    assert path[-1] == common.PathStep("task", 5)
    assert path[0].kind == "task" and s.slots[path[0].index].start == 0.0
    # consecutive elements really wait on each other
    xfer = {t.edge: t for t in s.transfers}

    def span(step):
        if step.kind == "task":
            return s.slots[step.index].start, s.slots[step.index].end
        return xfer[step.index].start, xfer[step.index].end

    for a, b in zip(path, path[1:]):
        assert math.isclose(span(a)[1], span(b)[0], rel_tol=1e-12, abs_tol=1e-15)
    names = [g.tasks[p.index].name if p.kind == "task" else f"e{p.index}" for p in path]
    # embed -> (e0) -> qkv -> attn -> (e4) -> norm -> out: the gpu chain dominates
    assert names == ["embed", "e0", "qkv", "attn", "e4", "norm", "out"]


def test_critical_path_resource_wait():
    # two independent tasks on one device: the second waited on the device
    res = build_result([("a", "add"), ("b", "add")], [], [0, 0], [1.0, 2.0])
    assert common.critical_path(res.schedule) == (common.PathStep("task", 0), common.PathStep("task", 1))


def test_critical_path_random_is_chain():
    res = random_result(80, seed=3)
    s = res.schedule
    path = common.critical_path(s)
    assert s.slots[path[-1].index].end == s.makespan
    assert s.slots[path[0].index].start == 0.0
    assert len(set(path)) == len(path)


def test_device_stats_union_and_utilisation():
    res = build_result([("a", "add"), ("b", "add"), ("c", "add")], [(0, 2, 0)], [0, 1, 0], [1.0, 4.0, 1.0])
    st = common.device_stats(res.schedule)
    assert [(d.name, d.tasks) for d in st] == [("cpu0", 2), ("gpu0", 1), ("fpga0", 0)]
    assert st[0].busy == 2.0 and st[1].utilisation == 1.0 and st[2].utilisation == 0.0
    assert common.union_length([(0, 2), (1, 3), (5, 6)]) == 4


def test_fmt_time_units():
    assert units.fmt_time(80.0) == "80 s"
    assert units.fmt_time(0.0125) == "12.5 ms"
    assert units.fmt_time(3.5e-6) == "3.5 us"
    assert units.fmt_time(2e-9) == "2 ns"
    assert units.fmt_time(0.0) == "0 s"
    assert units.fmt_time(None) == "-"
    assert units.fmt_time(3599.0) == "3599 s"  # an hour and more in hours, days, years
    assert units.fmt_time(5674.0) == "1.576 h"  # a column never mixes 5674 s with 3.436 h
    assert units.fmt_time(10_000.0) == "2.778 h" and units.fmt_time(600_000.0) == "6.944 days"
    assert units.fmt_time(1e12) == "31,688 years"
    assert common.round_sig(0.1 + 0.2) == 0.3
    assert common.round_sig(INF) is None


def test_fmt_pct_reads_zero_only_for_zero():
    assert units.fmt_pct(0.2) == "20.0 %" and units.fmt_pct(0.0) == "0.0 %" and units.fmt_pct(None) == "-"
    assert units.fmt_pct(2.6e-5) == "0.0026 %"  # a gap this small is still a gap


def test_op_colour_stable():
    assert common.op_colour("matmul") == common.op_colour("matmul") == common.PALETTE[0]
    assert common.op_colour("my_custom_op") in common.PALETTE
    assert common.op_colour("matmul") != common.op_colour("conv2d")


@dataclass
class Rec:
    task: object
    device: object
    predicted_start: float
    predicted_end: float
    measured: float | None
    modelled: float | None


def test_resolve_run_by_name_and_index():
    s = small_result().schedule
    rows = common.resolve_run(s, [Rec("qkv", "gpu0", 0.0, 1.0, None, 0.5), Rec(0, 0, 0.0, 1.0, 2.0, None)])
    assert [r.task for r in rows] == [0, 1]
    assert rows[0].actual == 2.0 and rows[1].actual == 0.5
    assert common.resolve_run(s, None) == ()
    with pytest.raises(OptionsError):
        common.resolve_run(s, [Rec("nope", "gpu0", 0, 1, None, None)])
    with pytest.raises(OptionsError):
        common.resolve_run(s, [object()])


# -- properties on schedules built by mapper.engine.schedule ---------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 40),
    shape=st.sampled_from(("layered", "forkjoin", "chain", "random")),
    explicit=st.booleans(),
    contention=st.booleans(),
    streaming=st.booleans(),
    mapper=st.sampled_from(("heft", "cpop", "greedy")),
)
def test_critical_path_property(seed, n, shape, explicit, contention, streaming, mapper):
    """On any schedule: the path is a chain of distinct elements from time 0 to
    the makespan, each starting when the one before it ends (or, for stages of
    a streamed FPGA chain, while the stage before it runs)."""
    from randdag import random_instance

    from mapper.mapping import get_mapper
    from mapper.mapping.base import MapOptions

    cost = random_instance(seed, n, shape, explicit_comm=explicit)
    opts = MapOptions(schedule=ScheduleOptions(contention=contention, streaming=streaming))
    s = get_mapper(mapper).map(cost, opts).schedule
    path = common.critical_path(s)
    xfer = {t.edge: t for t in s.transfers}

    def span(step):
        if step.kind == "task":
            return s.slots[step.index].start, s.slots[step.index].end
        return xfer[step.index].start, xfer[step.index].end

    assert len(set(path)) == len(path) >= 1
    assert path[-1].kind == "task" and span(path[-1])[1] == s.makespan
    tol = 1e-9 * max(1.0, s.makespan)
    piped = {(c[k - 1], c[k]) for c in s.streamed for k in range(1, len(c))}
    for a, b in zip(path, path[1:]):
        if (a.kind, b.kind) == ("task", "task") and (a.index, b.index) in piped:
            assert span(a)[0] <= span(b)[0] <= span(a)[1] + tol  # overlapped stages
        else:
            assert abs(span(a)[1] - span(b)[0]) <= tol
    assert span(path[0])[0] == 0.0


def test_critical_path_of_the_heft_paper_schedule_follows_its_transfers():
    # HEFT's schedule of the paper's graph (makespan 80): n1 -> n4 -> n6 -> n8 -> n10, with the
    # three transfers between devices on the path (a regression: an inbound transfer was once
    # timed by another transfer's end, and the path went through n3 instead)
    from pathlib import Path

    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import load_graph
    from mapper.mapping import get_mapper
    from mapper.platform.loader import load_platform

    root = Path(__file__).resolve().parents[1]
    cost = build_cost_table(load_graph(root / "examples" / "heft_paper.tg"), load_platform("heft3"))
    s = get_mapper("heft").map(cost).schedule
    steps = [(p.kind, cost.graph.tasks[p.index].name if p.kind == "task" else p.index)
             for p in common.critical_path(s)]
    assert steps == [("task", "n1"), ("transfer", 2), ("task", "n4"), ("task", "n6"), ("transfer", 8),
                     ("task", "n8"), ("transfer", 13), ("task", "n10")]
