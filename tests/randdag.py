"""Random task graphs, platforms and cost tables for tests (and the HEFT paper's example).

Builds :class:`~mapper.costing.cost.CostTable` objects directly, without the cost
model: times, energies and either explicit per-edge ``comm`` or bytes timed
by route tables derived from the platform's links (a direct link, else
through the host). Everything is a pure function of its arguments and seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from mapper.core.graph import Edge, Placement, Task, TaskGraph
from mapper.costing.cost import CostTable
from mapper.engine.schedule import Assignment, build_schedule
from mapper.mapping.base import MapResult
from mapper.platform.loader import Device, Link, Platform

INF = math.inf
SHAPES = ("layered", "forkjoin", "chain", "random")


def make_platform(kinds: Sequence[str], links: Sequence[tuple[int, int, float, float]] = (),
                  streaming: bool = True, name: str = "test") -> Platform:
    """Devices named ``<kind><k>``; ``links`` as ``(src, dst, GB/s, latency us)``
    between device indices, each added in both directions. The host is the first CPU."""
    count: dict[str, int] = {}
    devices = []
    for i, kind in enumerate(kinds):
        k = count.get(kind, 0)
        count[kind] = k + 1
        devices.append(Device(index=i, name=f"{kind}{k}", kind=kind, streaming=streaming and kind == "fpga"))
    out = []
    for a, b, bw, lat in links:
        for s, d in ((a, b), (b, a)):
            out.append(Link(index=len(out), src=devices[s].name, dst=devices[d].name, bandwidth_gbs=bw, latency_us=lat))
    host = next((d.name for d in devices if d.kind == "cpu"), None)
    return Platform(name=name, devices=tuple(devices), links=tuple(out), host=host)


def _routes(platform: Platform) -> list[list[tuple[int, ...] | None]]:
    nd = len(platform.devices)
    direct = {(platform.device_index(ln.src), platform.device_index(ln.dst)): ln.index for ln in platform.links}
    host = platform.device_index(platform.host) if platform.host is not None else None
    routes: list[list[tuple[int, ...] | None]] = [[None] * nd for _ in range(nd)]
    for a in range(nd):
        for b in range(nd):
            if a == b:
                routes[a][b] = ()
            elif (a, b) in direct:
                routes[a][b] = (direct[(a, b)],)
            elif host is not None and (a, host) in direct and (host, b) in direct:
                routes[a][b] = (direct[(a, host)], direct[(host, b)])
    return routes


def make_cost(graph: TaskGraph, platform: Platform, time: Sequence[Sequence[float]],
              energy: Sequence[Sequence[float]] | None = None, footprint: Sequence[float] | None = None,
              memory_capacity: Sequence[float] | None = None, area: Sequence[Sequence[float]] | None = None,
              area_capacity: Sequence[float] | None = None) -> CostTable:
    """A CostTable from explicit matrices; routes come from ``platform.links``."""
    n, nd = len(graph.tasks), len(platform.devices)
    routes = _routes(platform)
    lat = [[INF] * nd for _ in range(nd)]
    spb = [[INF] * nd for _ in range(nd)]
    for a in range(nd):
        for b in range(nd):
            r = routes[a][b]
            if r is not None:
                lat[a][b] = sum(platform.links[ln].latency_us * 1e-6 for ln in r)
                spb[a][b] = sum(1.0 / (platform.links[ln].bandwidth_gbs * 1e9) for ln in r)
    time_t = tuple(tuple(float(x) for x in row) for row in time)
    reasons = tuple((t, d, "not supported there (test data)") for t in range(n) for d in range(nd)
                    if not time_t[t][d] < INF)
    energy_t = tuple(tuple(float(x) for x in row) for row in energy) if energy is not None else \
        tuple(tuple(x * 10.0 if x < INF else INF for x in row) for row in time_t)
    fpga = [d.kind == "fpga" for d in platform.devices]
    return CostTable(
        graph=graph, platform=platform, time=time_t, energy=energy_t,
        bound=tuple(tuple("explicit" if x < INF else "infeasible" for x in row) for row in time_t),
        reasons=reasons,
        route_latency=tuple(tuple(r) for r in lat),
        route_sec_per_byte=tuple(tuple(r) for r in spb),
        routes=tuple(tuple(r if r is not None else () for r in row) for row in routes),
        footprint=tuple(footprint) if footprint is not None else tuple(0.0 for _ in range(n)),
        memory_capacity=tuple(memory_capacity) if memory_capacity is not None else tuple(INF for _ in range(nd)),
        area=tuple(tuple(r) for r in area) if area is not None else
        tuple(tuple(1.0 if fpga[d] else 0.0 for d in range(nd)) for _ in range(n)),
        area_capacity=tuple(area_capacity) if area_capacity is not None else
        tuple(float(n) if fpga[d] else INF for d in range(nd)),
    )


def make_graph(n: int, edges: Sequence[tuple[int, int, float, float | None]], streamable: Sequence[int] = (),
               names: Sequence[str] | None = None, placement: Sequence[Placement] | None = None,
               name: str = "g") -> TaskGraph:
    """Tasks ``t0..`` (or ``names``); edges as ``(src, dst, bytes, comm or None)``."""
    tasks = tuple(Task(index=i, name=names[i] if names else f"t{i}", op="task",
                       streamable=streamable[i] if streamable else 0,
                       placement=placement[i] if placement else Placement()) for i in range(n))
    return TaskGraph(name=name, tasks=tasks,
                     edges=tuple(Edge(index=j, src=s, dst=d, bytes=float(b), comm=c)
                                 for j, (s, d, b, c) in enumerate(edges)))


def random_edges(rng: random.Random, n: int, shape: str) -> list[tuple[int, int]]:
    """Edge list (src < dst) of a DAG of ``n`` tasks with the given shape."""
    pairs: set[tuple[int, int]] = set()
    if shape == "chain":
        pairs = {(i, i + 1) for i in range(n - 1)}
    elif shape == "forkjoin":
        # source, parallel branches of short chains, sink; repeated stages
        i = 0
        while i < n - 1:
            src = i
            width = rng.randint(1, 4)
            ends = []
            j = src + 1
            for _ in range(width):
                if j >= n - 1:
                    break
                length = rng.randint(1, 2)
                prev = src
                for _ in range(length):
                    if j >= n - 1:
                        break
                    pairs.add((prev, j))
                    prev = j
                    j += 1
                ends.append(prev)
            sink = j if j < n else n - 1
            for e in ends or [src]:
                if e != sink:
                    pairs.add((e, sink))
            i = sink
    elif shape == "layered":
        layers: list[list[int]] = []
        i = 0
        while i < n:
            w = min(rng.randint(1, 5), n - i)
            layers.append(list(range(i, i + w)))
            i += w
        for k in range(1, len(layers)):
            for v in layers[k]:
                for u in rng.sample(layers[k - 1], rng.randint(1, len(layers[k - 1]))):
                    pairs.add((u, v))
    else:
        p = min(1.0, 2.5 / max(n - 1, 1))
        for v in range(1, n):
            for u in range(v):
                if rng.random() < p:
                    pairs.add((u, v))
    return sorted(pairs)


def random_instance(seed: int, n: int, shape: str = "random", ccr: float = 1.0, heterogeneity: float = 0.5,
                    n_devices: int = 3, infeasible: float = 0.1, explicit_comm: bool = True,
                    zero_times: bool = False, budgets: bool = False) -> CostTable:
    """A random graph, platform and CostTable.

    ``ccr``: mean communication / mean computation; ``heterogeneity`` in
    [0, 1): device speeds spread (``time = w * U(1 - h, 1 + h)``, after
    Topcuoglu et al.); ``infeasible``: fraction of (task, device) entries set
    to ``inf`` (every task keeps a feasible device). Devices: a CPU, a GPU,
    an FPGA (streaming), then more GPUs; links CPU<->GPU, CPU<->FPGA, so
    GPU->FPGA goes through the host. Bytes-based edges when not
    ``explicit_comm``. With ``budgets`` every task can run on the CPU (whose
    memory is unbounded) and the other devices' memory, and the FPGA's area,
    hold about 40% of the graph's footprint and area.
    """
    rng = random.Random(seed)
    kinds = ["cpu", "gpu", "fpga", "gpu"][:n_devices] + ["gpu"] * max(0, n_devices - 4)
    links = [(0, d, rng.choice([8.0, 16.0, 32.0]), rng.choice([1.0, 5.0, 10.0])) for d in range(1, n_devices)]
    platform = make_platform(kinds, links)
    pairs = random_edges(rng, n, shape)
    base = [rng.uniform(1.0, 20.0) for _ in range(n)]
    time = []
    for t in range(n):
        row = [0.0 if zero_times and rng.random() < 0.1 else base[t] * rng.uniform(1 - heterogeneity, 1 + heterogeneity)
               for _ in range(n_devices)]
        for d in range(n_devices):
            if rng.random() < infeasible:
                row[d] = INF
        if not any(x < INF for x in row):
            row[rng.randrange(n_devices)] = base[t]
        if budgets and not row[0] < INF:
            row[0] = base[t]
        time.append(row)
    mean_w = sum(base) / n
    edges = []
    for s, d in pairs:
        c = rng.uniform(0.0, 2.0 * ccr * mean_w)
        if explicit_comm:
            edges.append((s, d, 0.0, c))
        else:
            # bytes such that the 16 GB/s route takes about c seconds
            edges.append((s, d, c * 16e9, None))
    streamable = [rng.choice([0, 0, 2, 4, 8]) for _ in range(n)]
    graph = make_graph(n, edges, streamable, name=f"rand{seed}")
    footprint = [rng.uniform(0.0, 1e9) for _ in range(n)]
    area = [[rng.uniform(0.5, 2.0) if k == "fpga" else 0.0 for k in kinds] for _ in range(n)]
    memory = [INF] + [0.4 * sum(footprint) if budgets else INF for _ in kinds[1:]]
    area_cap = [0.4 * sum(r[d] for r in area) if budgets and k == "fpga" else (float(n) if k == "fpga" else INF)
                for d, k in enumerate(kinds)]
    return make_cost(graph, platform, time, footprint=footprint, area=area, memory_capacity=memory,
                     area_capacity=area_cap)


# -- the HEFT paper's example (Topcuoglu, Hariri, Wu, IEEE TPDS 13(3) 2002, Fig. 2) --

HEFT_TIMES = (
    (14, 16, 9), (13, 19, 18), (11, 13, 19), (13, 8, 17), (12, 13, 10),
    (13, 16, 9), (7, 15, 11), (5, 11, 14), (18, 12, 20), (21, 7, 16),
)
HEFT_EDGES = (
    (1, 2, 18), (1, 3, 12), (1, 4, 9), (1, 5, 11), (1, 6, 14), (2, 8, 19), (2, 9, 16), (3, 7, 23),
    (4, 8, 27), (4, 9, 23), (5, 9, 13), (6, 8, 15), (7, 10, 17), (8, 10, 11), (9, 10, 13),
)


def heft_paper_example() -> CostTable:
    """Tasks n1..n10 on processors p1..p3 (CPUs, no links), explicit comm."""
    platform = Platform(name="heft3", devices=tuple(Device(index=i, name=f"p{i + 1}", kind="cpu") for i in range(3)),
                        host="p1")
    graph = make_graph(10, [(s - 1, d - 1, 0.0, float(c)) for s, d, c in HEFT_EDGES],
                       names=[f"n{i + 1}" for i in range(10)], name="heft_example")
    return make_cost(graph, platform, HEFT_TIMES)


def round_robin(result: MapResult) -> MapResult:
    """``result``'s graph with its tasks dealt round-robin over their feasible
    devices (so that tensors move between devices), timed by the schedule builder."""
    cost = result.schedule.cost
    device = tuple(cost.feasible_devices(t)[t % len(cost.feasible_devices(t))] for t in range(cost.n_tasks))
    sched = build_schedule(cost, Assignment(device))
    return MapResult(sched, "spread", "heuristic", "makespan", sched.makespan)


def slow_to_prove_dsl(seed: int = 0, n: int = 50) -> str:
    """A layered graph of ``n`` tasks with explicit costs on ``cpu-gpu-fpga``'s
    cpu0, gpu0 and fpga0 and gigabyte transfers, as DSL: the default mapper
    does not prove it within 20 s (for tests that interrupt a long search a
    few seconds in). With ``n=100`` the search is far from a proof after
    its first report on any machine (tests/mapping_signals.py)."""
    from mapper.frontend.importers.dsl_writer import graph_to_dsl

    rng = random.Random(seed)
    pairs = sorted(random_edges(rng, n, "layered"), key=lambda e: (e[1], e[0]))
    speeds = (("cpu0", 1.0), ("gpu0", 0.5), ("fpga0", 0.7))
    tasks = tuple(Task(i, f"t{i}", "task", explicit_cost=tuple(sorted((d, round(rng.uniform(1, 20) * f, 3))
                                                                      for d, f in speeds)))
                  for i in range(n))
    edges = tuple(Edge(k, u, v, float(rng.randint(1, 20) * 10**9)) for k, (u, v) in enumerate(pairs))
    return graph_to_dsl(TaskGraph("slow", tasks, edges))
