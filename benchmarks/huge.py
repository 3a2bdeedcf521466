"""Huge task graphs: the multilevel path at 10^4 to 10^6 tasks, and a spiking network on Loihi cores.

    python benchmarks/huge.py [--sizes 10000,100000,1000000] [--devices 8] [--time-limit 10]
                              [--heft-max 100000] [--snn 100000] [--out DIR]

Graphs (deterministic, seed 0), explicit costs on ``--devices`` heterogeneous devices
(device ``d`` runs a task ``1, 1.5, 2, 3`` times slower as ``d mod 4``) and explicit
``comm`` on the edges:

* ``layered``: 100 layers, each task fed by 2 random tasks of the layer above;
* ``workflow``: WfCommons-style (Epigenomics-shaped): a split task per lane group of
  100 lanes, chains of 5 tasks per lane, a merge per group, a final merge.

Each row runs ``mapper compile`` as a separate process and prints its whole-process time
(wall and CPU: user plus system, about what it would take on an idle machine, the
partitioner's second thread aside), its peak resident memory, and the makespan of
``--coarsen multilevel`` (what ``auto`` picks past 10,000 tasks), of ``--coarsen chains`` (the
chain-coarsening path; skipped past ``--chains-max`` tasks) and of ``--mapper heft`` on the full
graph (also skipped past ``--heft-max``), plus km1 (connectivity - 1 over the nets, net weights as the partitioner
sees them) of the default mapping's devices against one direct Mt-KaHyPar call for as many
blocks under the same balance, with the preset mapper uses and with the stock deterministic
preset (``km1 stock``: :mod:`mapper.mapping.partition_preset`). The load average is printed
beside every timing (the machine is shared).

``--snn N``: a feed-forward spiking network of about N neurons (4 populations, topographic
projections of fan-out 16 within ``--snn-radius``) on the ``loihi`` platform (128 cores, 1,024 neurons and 4,096
input axons each), mapped in process: the constrained partition against a plain
Mt-KaHyPar partition that ignores fan-in (how many cores it overfills).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

SLOWDOWN = (1.0, 1.5, 2.0, 3.0)


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def write_graph(path: str, shape: str, n: int, nd: int) -> int:
    """Write a generated graph in the DSL; returns its task count."""
    rng = random.Random(0)
    tasks: list[float] = []
    edges: list[tuple[int, int]] = []
    if shape == "layered":
        layers = 100
        width = max(1, n // layers)
        for i in range(layers * width):
            tasks.append(rng.uniform(1.0, 10.0))
            if i >= width:
                lo = (i // width - 1) * width
                for j in sorted({lo + rng.randrange(width) for _ in range(2)}):
                    edges.append((j, i))
    else:
        groups = max(1, n // 502)
        final = []
        for _ in range(groups):
            split = len(tasks)
            tasks.append(rng.uniform(1.0, 5.0))
            tails = []
            for _ in range(100):
                prev = split
                for _ in range(5):
                    tasks.append(rng.uniform(1.0, 10.0))
                    edges.append((prev, len(tasks) - 1))
                    prev = len(tasks) - 1
                tails.append(prev)
            merge = len(tasks)
            tasks.append(rng.uniform(5.0, 20.0))
            edges.extend((t, merge) for t in tails)
            final.append(merge)
        end = len(tasks)
        tasks.append(10.0)
        edges.extend((m, end) for m in final)
    with open(path, "w") as f:
        f.write(f"graph {shape} {{\n")
        for i, w in enumerate(tasks):
            costs = ", ".join(f"p{d}: {w * SLOWDOWN[d % 4]:.4f}ms" for d in range(nd))
            f.write(f"  task t{i} cost {{ {costs} }}\n")
        for a, b in edges:
            f.write(f"  t{a} -> t{b} comm {rng.uniform(0.5, 5.0):.4f}ms\n")
        f.write("}\n")
    return len(tasks)


def write_platform(path: str, nd: int) -> None:
    with open(path, "w") as f:
        f.write('name = "huge"\n')
        for d in range(nd):
            f.write(f'[[device]]\nname = "p{d}"\nkind = "cpu"\n')


def compile_run(graph: str, platform: str, out: str, extra: list[str], limit: float) -> dict:
    """One ``mapper compile`` process: wall and CPU seconds, peak MiB, makespan, devices."""
    cmd = [sys.executable, "-m", "mapper", "compile", graph, "--platform", platform, "--json", out, "-q",
           "--time-limit", str(limit), *extra]
    load = _load()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    cpu = usage.ru_utime + usage.ru_stime
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        return {"wall": wall, "cpu": cpu, "mib": usage.ru_maxrss / 1024, "load": load, "error": err.strip()[-200:]}
    with open(out) as f:
        report = json.load(f)
    names = {t["name"]: t["device"] for t in report["tasks"]}
    return {"wall": wall, "cpu": cpu, "mib": usage.ru_maxrss / 1024, "load": load, "makespan": report["makespan"],
            "devices": names, "notes": report.get("notes", [])}


def km1_pair(graph_path: str, nd: int, devices: dict[str, str]) -> tuple[int, int, int]:
    """km1 of ``devices``, of one direct Mt-KaHyPar call for ``nd`` blocks (3 % imbalance) with the
    preset mapper uses, and of one with the stock deterministic preset."""
    from mapper.frontend.load import graph_from_text
    from mapper.mapping import hypergraph
    from mapper.mapping.hypergraph import km1, nets_of, partition

    with open(graph_path) as f:
        graph = graph_from_text(f.read(), graph_path)
    comm = [e.comm or 0.0 for e in graph.edges]
    nets = nets_of(graph, comm)
    index = {f"p{d}": d for d in range(nd)}
    ours = [index[devices[t.name]] for t in graph.tasks]
    n = len(graph.tasks)
    caps = [-(-n * 103 // (100 * nd))] * nd
    direct = partition(n, nets, [1] * n, caps, 0)
    changes, hypergraph.PRESET_CHANGES = hypergraph.PRESET_CHANGES, {}
    try:
        stock = partition(n, nets, [1] * n, caps, 0)
    finally:
        hypergraph.PRESET_CHANGES = changes
    return km1(nets, ours), km1(nets, direct), km1(nets, stock)


def _fmt(r: dict | None, key: str = "makespan") -> str:
    if r is None:
        return "skipped"
    if "error" in r:
        return "error"
    return f"{r[key]:.6g}"


def _secs(r: dict | None, key: str) -> str:
    return "-" if r is None else f"{r[key]:.1f}"


def run_graphs(args, tmp: str) -> None:
    plat = os.path.join(tmp, "huge.toml")
    write_platform(plat, args.devices)
    print(f"{'shape':9} {'tasks':>8} {'wall s':>7} {'cpu s':>6} {'load':>5} {'MiB':>6} {'makespan':>10} "
          f"{'chains':>10} {'c wall':>7} {'c cpu':>6} {'heft':>10} {'h wall':>7} {'h cpu':>6} {'km1':>9} "
          f"{'km1 mtk':>9} {'km1 stock':>9}")
    for size in args.sizes:
        for shape in ("layered", "workflow"):
            path = os.path.join(tmp, f"{shape}{size}.tg")
            n = write_graph(path, shape, size, args.devices)
            out = os.path.join(tmp, "r.json")
            ml = compile_run(path, plat, out, ["--coarsen", "multilevel"], args.time_limit)
            small = n <= args.heft_max
            chains = (compile_run(path, plat, out, ["--coarsen", "chains"], args.time_limit)
                      if n <= args.chains_max else None)
            heft = compile_run(path, plat, out, ["--mapper", "heft"], args.time_limit) if small else None
            k_ours = k_direct = k_stock = "-"
            if "devices" in ml and n <= args.km1_max:
                k_ours, k_direct, k_stock = map(str, km1_pair(path, args.devices, ml["devices"]))
            print(f"{shape:9} {n:>8} {ml['wall']:>7.1f} {ml['cpu']:>6.1f} {ml['load']:>5} {ml['mib']:>6.0f} "
                  f"{_fmt(ml):>10} {_fmt(chains):>10} {_secs(chains, 'wall'):>7} {_secs(chains, 'cpu'):>6} "
                  f"{_fmt(heft):>10} {_secs(heft, 'wall'):>7} {_secs(heft, 'cpu'):>6} {k_ours:>9} {k_direct:>9} "
                  f"{k_stock:>9}",
                  flush=True)
            if "error" in ml:
                print(f"  error: {ml['error']}")


def run_snn(args) -> None:
    from mapper.costing.cost import build_cost_table
    from mapper.frontend.importers.snn import Network, network_graph
    from mapper.mapping.base import MapOptions
    from mapper.mapping.hypergraph import nets_of, partition
    from mapper.mapping.limits import check, limits_of
    from mapper.mapping.multilevel import map_multilevel
    from mapper.platform.loader import load_platform

    q = args.snn // 4
    net = Network("snn", 0, (("a", q), ("b", q), ("c", q), ("d", q)),
                  tuple((a, b, 16, args.snn_radius) for a, b in (("a", "b"), ("b", "c"), ("c", "d"))))
    t0 = time.perf_counter()
    graph = network_graph(net)
    plat = load_platform("loihi")
    cost = build_cost_table(graph, plat)
    built = time.perf_counter() - t0
    nets = nets_of(graph, [e.comm or 0.0 for e in graph.edges])
    load = _load()
    t1 = time.perf_counter()
    result = map_multilevel(cost, MapOptions(time_limit=60.0))
    ours = time.perf_counter() - t1
    n, nd = len(graph.tasks), len(plat.devices)
    load2 = _load()
    t2 = time.perf_counter()
    plain = partition(n, nets, [1] * n, [-(-n * 103 // (100 * nd))] * nd, 0)
    direct = time.perf_counter() - t2
    from mapper.mapping.hypergraph import km1

    limits = limits_of(cost)
    broken = check(cost, nets, plain, limits)
    print(f"\nSNN: {n} neurons, {len(graph.edges)} synapses (radius {args.snn_radius}) on loihi ({nd} cores), "
          f"built in {built:.1f} s")
    print(f"  constrained (mapper): {ours:.1f} s (load {load}), km1 {km1(nets, result.schedule.device_of)}, "
          f"limits broken: {len(check(cost, nets, result.schedule.device_of, limits))}")
    print(f"  plain Mt-KaHyPar:     {direct:.1f} s (load {load2}), km1 {km1(nets, plain)}, "
          f"cores over a limit: {len(broken)}" + (f" (e.g. {broken[0]})" if broken else ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--time-limit", type=float, default=10.0)
    p.add_argument("--heft-max", type=int, default=100_000, help="run heft and chains up to this many tasks")
    p.add_argument("--chains-max", type=int, default=100_000, help="run --coarsen chains up to this many tasks")
    p.add_argument("--km1-max", type=int, default=200_000, help="compare km1 up to this many tasks")
    p.add_argument("--snn", type=int, default=100_000, help="neurons of the SNN case (0: skip)")
    p.add_argument("--snn-radius", type=int, default=1800, help="the SNN's projections' radius (neurons)")
    args = p.parse_args()
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with tempfile.TemporaryDirectory() as tmp:
        if args.sizes:
            run_graphs(args, tmp)
    if args.snn:
        run_snn(args)


if __name__ == "__main__":
    main()
