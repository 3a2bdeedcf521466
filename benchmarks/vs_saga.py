"""mapper's list schedulers side by side with SAGA's, then what SAGA cannot express.

SAGA (Coleman, Krishnamachari, "Scheduling Algorithms Gauntlet",
arXiv:2403.07120; PyPI ``anrg-saga``, a bench dependency: ``pip install -e
.[bench]``) schedules related machines: node speeds, link strengths, task
costs, data sizes; a task takes ``cost / speed``, a transfer ``size /
strength``. Part 1 builds each instance once as a SAGA task graph and network
and the identical instance in mapper (:func:`mapper.frontend.importers.related_instance`:
explicit per-device costs, links of bandwidth ``strength``), runs SAGA's HEFT
and CPoP and ours (HEFT, CPOP, PEFT; SAGA 2.0.2 has no PEFT) in this one
process, and prints makespans and wall times with ratios ours/SAGA. SAGA's
schedule is also re-timed by mapper's schedule builder (same assignment, same
per-node order) as a check that both tools see the same instance.

Part 2 runs the WfCommons workflows on the cpu-gpu-fpga platform with
per-device costs from the roofline/Amdahl model and compares our MILP (with
LNS beyond its size limit) with our heuristics; part 3 does the same for the
DSL examples, whose per-op costs differ per device in a way SAGA's model
cannot state (one speed per node for every task). Both parts also project
the instance onto the closest related-machines instance (median per-device
time ratio as the node speed, route bandwidth as the link strength), run
SAGA's HEFT on it and re-time that schedule on the true costs. Part 4
times whole processes, ``mapper compile --mapper heft`` against SAGA's HEFT,
on a 2,000-task instance (:mod:`saga_process`).

    python benchmarks/vs_saga.py [--quick] [--milp-time S]

Instances: random layered DAGs (20/50/100 tasks, CCR 0.1/1/10, 4 related
nodes), the HEFT paper's DAG on 3 related nodes, and WfCommons workflows
(the committed test set plus larger ones generated with fixed seeds by
benchmarks/gen_wfcommons.py). PYTHONHASHSEED is pinned to 0 (the script
re-executes itself) because SAGA iterates frozensets of nodes, whose order,
and so its tie-breaking, follows string hashing.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import logging
import math
import os
import platform as pyplatform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

if os.environ.get("PYTHONHASHSEED") != "0":  # SAGA's tie-breaking follows str hashing: pin it
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import saga  # noqa: E402
from related_dag import related_dag  # noqa: E402
from saga.schedulers import CpopScheduler, HeftScheduler  # noqa: E402
from saga.schedulers import cpop as saga_cpop  # noqa: E402
from saga.schedulers.heft import heft_rank_sort  # noqa: E402

from mapper.costing.cost import build_cost_table  # noqa: E402
from mapper.engine.schedule import Assignment, build_schedule  # noqa: E402
from mapper.engine.validate import validate  # noqa: E402
from mapper.errors import MapperError  # noqa: E402
from mapper.frontend.importers import RelatedNetwork, related_instance  # noqa: E402
from mapper.frontend.importers.wfcommons import ReferenceMachine, read_wfformat, workflow_graph  # noqa: E402
from mapper.mapping import get_mapper  # noqa: E402
from mapper.mapping.base import MapOptions  # noqa: E402
from mapper.mapping.cpop import critical_path  # noqa: E402
from mapper.mapping.placer import Placer  # noqa: E402
from mapper.mapping.ranks import downward_rank, mean_comm, mean_times, priority_order, upward_rank  # noqa: E402
from mapper.platform.loader import load_platform  # noqa: E402

DATA = HERE.parent / "tests" / "data" / "wfcommons"
OURS = ("heft", "heft-samedev", "cpop", "peft")
SAGA = {"heft": HeftScheduler, "cpop": CpopScheduler}


@dataclass(frozen=True, slots=True)
class Instance:
    """A related-machines instance: task costs, (src, dst, size) edges, network."""

    name: str
    family: str
    tasks: tuple[tuple[str, float], ...]
    edges: tuple[tuple[str, str, float], ...]
    network: RelatedNetwork


# -- instances ------------------------------------------------------------------

def random_dag(n: int, ccr: float, seed: int, nodes: int = 4) -> Instance:
    """:func:`related_dag.related_dag` as an instance."""
    names, costs, edges, net = related_dag(n, ccr, seed, nodes)
    return Instance(f"rand{n}_ccr{ccr:g}", "random", tuple(zip(names, costs)),
                    tuple((names[a], names[b], s) for a, b, s in edges), net)


def heft_paper() -> Instance:
    """The HEFT paper's DAG (Topcuoglu et al. 2002, Fig. 2) with each task's mean
    cost over P1-P3 and the paper's edge weights as sizes, on 3 related nodes of
    speeds 1, 1.5, 2 with unit strength (SAGA cannot state the paper's unrelated costs)."""
    from mapper.frontend.load import load_graph

    g = load_graph(HERE.parent / "examples" / "heft_paper.tg")
    tasks = tuple((t.name, sum(c for _, c in t.explicit_cost) / len(t.explicit_cost)) for t in g.tasks)
    edges = tuple((g.tasks[e.src].name, g.tasks[e.dst].name, e.comm) for e in g.edges)
    net = RelatedNetwork(("p1", "p2", "p3"), (1.0, 1.5, 2.0), ((0, 1, 1), (1, 0, 1), (1, 1, 0)))
    return Instance("heft_paper", "heft-paper", tasks, edges, net)


#: WfCommons network: 4 nodes, speeds 1, 1.5, 2, 3 (cost = runtime on the reference core), 100 MB/s links
WF_NET = RelatedNetwork.uniform((1.0, 1.5, 2.0, 3.0), 1e8, prefix="n")


def wfcommons_instances(quick: bool) -> list[tuple[Instance, Path]]:
    files = sorted(DATA.glob("*.json"))
    if not quick:
        from gen_wfcommons import generate

        tmp = Path(tempfile.mkdtemp(prefix="wf_vs_saga_"))
        atexit.register(shutil.rmtree, tmp, True)
        for label, size in (("montage", 200), ("epigenomics", 200), ("1000genome", 200), ("cycles", 200),
                            ("montage", 500), ("seismology", 500)):
            path = tmp / f"{label}-{size}.json"
            path.write_text(json.dumps(generate(label, size, 2024 + size)))
            files.append(path)
    out = []
    for path in files:
        wf = read_wfformat(path)
        g = workflow_graph(wf)
        n = len(g.tasks)
        label = path.stem.rsplit("-", 1)[0]
        tasks = tuple((t.name, r.runtime) for t, r in zip(g.tasks, wf.tasks))
        edges = tuple((g.tasks[e.src].name, g.tasks[e.dst].name, e.bytes) for e in g.edges)
        out.append((Instance(f"{label}-{n}", "wfcommons", tasks, edges, WF_NET), path))
    return out


# -- part 1: the same instance in both tools ---------------------------------------

def saga_pair(inst: Instance) -> tuple[saga.TaskGraph, saga.Network]:
    net = inst.network
    nodes = list(zip(net.names, net.speeds))
    links = [(net.names[a], net.names[b], net.strength[a][b])
             for a in range(len(net.names)) for b in range(a + 1, len(net.names))]
    links += [(nm, nm, math.inf) for nm in net.names]
    tg = saga.TaskGraph.create(list(inst.tasks), list(inst.edges))  # adds super source/sink if needed
    return tg, saga.Network.create(nodes, links)


def ours_from_saga(inst: Instance, tg: saga.TaskGraph):
    """mapper's graph and platform for SAGA's task graph (with its super nodes)."""
    names = sorted(t.name for t in tg.tasks)
    index = {nm: i for i, nm in enumerate(names)}
    cost = {t.name: t.cost for t in tg.tasks}
    edges = [(index[d.source], index[d.target], d.size) for d in tg.dependencies]
    return related_instance(inst.name.replace("-", "_").replace(".", "_"), names, [cost[n] for n in names],
                            edges, inst.network)


def retime_saga(cost_table, sched) -> float:
    """mapper's makespan for SAGA's assignment and per-node order."""
    names = [t.name for t in cost_table.graph.tasks]
    index = {nm: i for i, nm in enumerate(names)}
    devices = [d.name for d in cost_table.platform.devices]
    device = [0] * len(names)
    order = []
    for d, dn in enumerate(devices):
        seq = [index[st.name] for st in sorted(sched[dn], key=lambda s: (s.start, s.end))
               if st.name in index]  # SAGA's super source/sink exist only in part 2's projection
        for t in seq:
            device[t] = d
        order.append(tuple(seq))
    return build_schedule(cost_table, Assignment(tuple(device), tuple(order))).makespan


def diagnose(cost_table, tg, net) -> tuple[bool, int, int, float]:
    """(same HEFT task list?, our critical-path length, SAGA's CP-set size,
    makespan of our HEFT placement step fed SAGA's task list).

    SAGA's CPoP puts on the CP node every task whose priority is close to the
    entry's; with its downward rank (which adds the task's own mean cost, not
    the predecessor's) that set is usually much smaller than the paper's path.
    """
    w, c = mean_times(cost_table), mean_comm(cost_table)
    up = upward_rank(cost_table, w, c)
    names = [t.name for t in cost_table.graph.tasks]
    saga_list = heft_rank_sort(net, tg)
    same = [names[t] for t in priority_order(cost_table, up)] == saga_list
    placer = Placer(cost_table, MapOptions().schedule)
    index = {nm: i for i, nm in enumerate(names)}
    for nm in saga_list:
        placer.place_best(index[nm])
    replay = placer.schedule().makespan
    prio = tuple(a + b for a, b in zip(up, downward_rank(cost_table, w, c)))
    ranks = saga_cpop.cpop_ranks(net, tg)
    entry = max((t.name for t in tg.tasks if tg.in_degree(t.name) == 0), key=lambda n: ranks[n])
    saga_cp = sum(1 for v in ranks.values() if math.isclose(v, ranks[entry], rel_tol=1e-9))
    return same, len(critical_path(cost_table, prio)), saga_cp, replay


def cold_saga() -> None:
    """Clear SAGA's memoised ranks (per network and graph), so each run starts cold."""
    saga_cpop.upward_rank.cache_clear()
    saga_cpop.cpop_ranks.cache_clear()


def run_saga(name: str, tg, net):
    cold_saga()
    t0 = time.perf_counter()
    sched = SAGA[name]().schedule(net, tg)
    return sched, time.perf_counter() - t0


def run_ours(name: str, graph, plat, options: MapOptions = MapOptions()):
    t0 = time.perf_counter()
    cost = build_cost_table(graph, plat)
    res = get_mapper(name).map(cost, options)
    dt = time.perf_counter() - t0
    bad = validate(res.schedule)
    if bad:
        raise SystemExit(f"{name} on {graph.name}: invalid schedule: {bad[0].message}")
    return res, cost, dt


def part1(instances: list[Instance]) -> list[dict]:
    rows = []
    for inst in instances:
        tg, net = saga_pair(inst)
        _ = tg.graph, net.graph  # build SAGA's cached networkx views outside the timing
        graph, plat = ours_from_saga(inst, tg)
        row = {"inst": inst, "n": len(graph.tasks), "e": len(graph.edges)}
        for name in OURS:
            res, cost, dt = run_ours(name, graph, plat)
            row[f"ours_{name}"] = (res.objective_value, dt)
        for name in SAGA:
            sched, dt = run_saga(name, tg, net)
            row[f"saga_{name}"] = (sched.makespan, dt)
            row[f"retime_{name}"] = retime_saga(cost, sched)
        row["diag"] = diagnose(cost, tg, net)
        rows.append(row)
    return rows


def _r(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b > 0 else "-"


def print_part1(rows: list[dict]) -> None:
    print("\n## Part 1: same instance in both tools (makespan; wall time ms; ratios ours/SAGA)\n")
    print("| instance | tasks | edges | SAGA HEFT | our HEFT | ratio | SAGA CPoP | our CPOP | ratio | our PEFT | "
          "PEFT/SAGA HEFT | re-timed SAGA HEFT | same HEFT list | CP tasks ours/SAGA | HEFT ms SAGA/ours | "
          "time ratio ours/SAGA (HEFT) | time ratio ours/SAGA (CPOP) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        sh, th = r["saga_heft"]
        sc, tc = r["saga_cpop"]
        oh, toh = r["ours_heft"]
        oc, toc = r["ours_cpop"]
        op, _ = r["ours_peft"]
        same, cp, scp, _ = r["diag"]
        print(f"| {r['inst'].name} | {r['n']} | {r['e']} | {sh:.6g} | {oh:.6g} | {_r(oh, sh)} | {sc:.6g} | "
              f"{oc:.6g} | {_r(oc, sc)} | {op:.6g} | {_r(op, sh)} | {r['retime_heft']:.6g} | "
              f"{'yes' if same else 'no'} | {cp}/{scp} | "
              f"{th * 1e3:.1f} / {toh * 1e3:.1f} | {_r(toh, th)} | {_r(toc, tc)} |")
    print()
    for alg in ("heft", "cpop"):
        ratios = [r[f"ours_{alg}"][0] / r[f"saga_{alg}"][0] for r in rows]
        times = [r[f"ours_{alg}"][1] / r[f"saga_{alg}"][1] for r in rows]
        better = sum(x < 1 - 1e-9 for x in ratios)
        same = sum(abs(x - 1) <= 1e-9 for x in ratios)
        print(f"{alg.upper()}: ours better on {better}, equal on {same}, worse on {len(ratios) - better - same} "
              f"of {len(ratios)}; makespan ratio geo-mean {_geo(ratios):.3f} (min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}); wall-time ratio geo-mean {_geo(times):.4f}")
    for label, ours in (("HEFT-samedev (SAGA's rank)", lambda r: r["ours_heft-samedev"][0]),
                        ("better of our two HEFT ranks", lambda r: min(r["ours_heft"][0], r["ours_heft-samedev"][0]))):
        ratios = [ours(r) / r["saga_heft"][0] for r in rows]
        worse = sum(x > 1 + 1e-9 for x in ratios)
        print(f"{label} vs SAGA HEFT: worse on {worse} of {len(ratios)}; makespan ratio geo-mean "
              f"{_geo(ratios):.4f} (max {max(ratios):.3f})")
    lists = [r for r in rows if r["diag"][0]]
    print(f"HEFT task lists equal on {len(lists)} of {len(rows)}; on those the makespans are equal on "
          f"{sum(abs(r['ours_heft'][0] - r['saga_heft'][0]) <= 1e-9 * r['saga_heft'][0] for r in lists)}")
    replay = sum(abs(r["diag"][3] - r["saga_heft"][0]) <= 1e-9 * r["saga_heft"][0] for r in rows)
    print(f"our HEFT placement step fed SAGA's HEFT task list: same makespan as SAGA's HEFT on {replay} of "
          f"{len(rows)}" + "".join(f"; {r['inst'].name}: {r['diag'][3]:.6g} vs {r['saga_heft'][0]:.6g}"
                                   for r in rows if abs(r["diag"][3] - r["saga_heft"][0]) > 1e-9 * r["saga_heft"][0]))
    agree = sum(r["retime_heft"] <= r["saga_heft"][0] * (1 + 1e-9) for r in rows)
    print(f"re-timing SAGA's HEFT schedules in mapper: makespan <= SAGA's on {agree} of {len(rows)} "
          "(same assignment and per-node order; mapper starts each task as early as the order allows)")


def _geo(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


# -- part 2: per-device costs (cpu-gpu-fpga), MILP/LNS vs heuristics -----------------------

def related_projection(cost) -> tuple[saga.TaskGraph, saga.Network, str]:
    """The closest SAGA instance to ``cost``: task cost = time on device 0, node
    speed = 1 / median over tasks of time[t][d] / time[t][0], link strength =
    1 / (seconds per byte along the route) (latencies dropped). Also the range
    of the per-task ratios, which a related model must flatten to one number."""
    nd = cost.n_devices
    devs = [d.name for d in cost.platform.devices]
    speeds, spread = [], []
    for d in range(nd):
        ratios = sorted(cost.time[t][d] / cost.time[t][0] for t in range(cost.n_tasks)
                        if 0 < cost.time[t][0] < math.inf)
        finite = [x for x in ratios if x < math.inf]
        speeds.append(1.0 / finite[len(finite) // 2])
        if d:
            inf = len(ratios) - len(finite)
            spread.append(f"{devs[d]} {finite[0]:.3g}-{finite[-1]:.3g}" + (f" ({inf} inf)" if inf else ""))
    names = [t.name for t in cost.graph.tasks]
    # cost on cpu0; a task that cannot run there: its best device's time scaled by that speed
    tasks = [(nm, cost.time[t][0] if cost.time[t][0] < math.inf
              else min(cost.time[t][d] * speeds[d] for d in range(nd))) for t, nm in enumerate(names)]
    edges = [(names[e.src], names[e.dst], e.bytes) for e in cost.graph.edges]
    links = [(devs[a], devs[b], 1.0 / cost.route_sec_per_byte[a][b]) for a in range(nd) for b in range(a + 1, nd)]
    links += [(dn, dn, math.inf) for dn in devs]
    net = saga.Network.create(list(zip(devs, speeds)), links)
    return saga.TaskGraph.create(tasks, edges), net, "; ".join(spread)


def saga_on_projection(cost) -> tuple[float, str, str]:
    """(SAGA HEFT's makespan re-timed on the true costs, or inf; why not; ratio spread)."""
    tg, net, spread = related_projection(cost)
    sched = HeftScheduler().schedule(net, tg)
    try:
        return retime_saga(cost, sched), "", spread
    except MapperError as err:  # a task SAGA put where it cannot run, or a route that is missing
        return math.inf, err.message[:60], spread

def hetero_table(title: str, graphs: list[tuple[str, object]], milp_time: float) -> None:
    """Our heuristics and MILP on cpu-gpu-fpga, then SAGA's HEFT on the closest related instance."""
    plat = load_platform("cpu-gpu-fpga")
    names = ("heft", "cpop", "peft", "greedy", "cpu")
    print(f"\n## {title}; MILP time limit {milp_time:g} s\n")
    print("| graph | tasks | " + " | ".join(names) + " | milp | milp status | lower bound | "
          "milp / best heuristic | milp s | notes |")
    print("|---|---:|" + "---:|" * len(names) + "---:|---|---:|---:|---:|---|")
    gains, proj = [], []
    for label, graph in graphs:
        vals = {nm: run_ours(nm, graph, plat)[0].objective_value for nm in names}
        proj.append((label, vals["heft"], *saga_on_projection(build_cost_table(graph, plat))))
        res, _, dt = run_ours("milp", graph, plat, MapOptions(time_limit=milp_time))
        best = min(vals[nm] for nm in ("heft", "cpop", "peft", "greedy"))
        gains.append(res.objective_value / best)
        lb = f"{res.lower_bound:.6g}" if res.lower_bound is not None else "-"
        note = next((x for x in res.notes if "LNS" in x or "coarsen" in x.lower()), res.notes[0] if res.notes else "")
        print(f"| {label} | {len(graph.tasks)} | " + " | ".join(f"{vals[nm]:.6g}" for nm in names)
              + f" | {res.objective_value:.6g} | {res.status} | {lb} | {res.objective_value / best:.4f} | "
              f"{dt:.1f} | {note[:70]} |")
    print(f"\nMILP/LNS vs the best of HEFT, CPOP, PEFT, greedy: geo-mean ratio {_geo(gains):.4f}, "
          f"best {min(gains):.4f}, worst {max(gains):.4f}")
    print("\nThe closest related-machines (SAGA) instance: SAGA's HEFT on it, its schedule re-timed on the "
          "true per-device costs, vs our HEFT on the true costs\n")
    print("| graph | our HEFT | SAGA HEFT on projection, re-timed | ratio SAGA/ours | per-task time ratio "
          "to cpu0 (min-max) |")
    print("|---|---:|---:|---:|---|")
    for name, ours, theirs, why, spread in proj:
        shown = f"{theirs:.6g}" if theirs < math.inf else f"infeasible: {why}"
        print(f"| {name} | {ours:.6g} | {shown} | {_r(theirs, ours) if theirs < math.inf else '-'} | {spread} |")


#: DSL examples with per-op costs on cpu-gpu-fpga (heft_paper has costs for p1-p3 only)
EXAMPLES = ("bert_base", "resnet50", "gpt2_block", "jacobi2d", "cg", "fft_conv")


def part2(workflows: list[tuple[Instance, Path]], milp_time: float) -> None:
    ref = ReferenceMachine(default_parallel=0.9)
    hetero_table(f"Part 2: WfCommons on cpu-gpu-fpga (roofline/Amdahl costs, parallel fraction "
                 f"{ref.default_parallel})", [(i.name, workflow_graph(read_wfformat(p), ref)) for i, p in workflows],
                 milp_time)
    from mapper.costing.fusion import fuse
    from mapper.frontend.load import load_graph

    hetero_table("Part 3: the DSL examples on cpu-gpu-fpga (per-op costs, fused as `mapper compile` fuses them)",
                 [(nm, fuse(load_graph(HERE.parent / "examples" / f"{nm}.tg"))) for nm in EXAMPLES], milp_time)


# -- part 1b: every SAGA scheduler against the exact mapper ---------------------------

#: SAGA 2.0.2's schedulers that run on any instance with their defaults (BruteForce and SMT
#: search exhaustively, Hybrid needs a list of schedulers to pick from).
SKIP = {"BruteForceScheduler", "SMTScheduler", "HybridScheduler"}


def part1b(instances: list[Instance], milp_time: float) -> None:
    """On each random DAG and the HEFT paper's: every SAGA scheduler, and our
    ``milp`` (CP-SAT then the MILP) with ``milp_time`` seconds."""
    import saga.schedulers as schedulers

    names = sorted(n for n in dir(schedulers) if n.endswith("Scheduler") and n not in SKIP)
    print(f"\n## Part 1b: every SAGA scheduler ({len(names)}) against milp ({milp_time:g} s)\n")
    print(f"load average {os.getloadavg()[0]:.2f}\n")
    print("| instance | best SAGA | by | worst SAGA | milp | status | milp / best SAGA |")
    print("|---|---:|---|---:|---:|---|---:|")
    never_worse = 0
    ratios = []
    for inst in instances:
        tg, net = saga_pair(inst)
        graph, plat = ours_from_saga(inst, tg)
        cost = build_cost_table(graph, plat)
        found: dict[str, float] = {}
        for name in names:
            cold_saga()
            try:
                sched = getattr(schedulers, name)().schedule(net, tg)
            except Exception as err:  # a scheduler that fails on an instance is left out of its row
                print(f"<!-- {name} on {inst.name}: {type(err).__name__} -->")
                continue
            placed = {st.name for _, tasks in sched.items() for st in tasks}
            if placed < {t.name for t in tg.tasks}:
                print(f"<!-- {name} on {inst.name}: leaves tasks out -->")
                continue
            try:  # the same instance in mapper's model (part 1: equal or less than SAGA's makespan)
                found[name] = min(retime_saga(cost, sched), sched.makespan)
            except MapperError:  # a task on two nodes (duplication): SAGA's own makespan
                found[name] = sched.makespan
        res = get_mapper("milp").map(cost, MapOptions(time_limit=milp_time))
        if validate(res.schedule):
            raise SystemExit(f"milp on {inst.name}: invalid schedule")
        best = min(found, key=lambda k: (found[k], k))
        ratio = res.objective_value / found[best]
        ratios.append(ratio)
        never_worse += res.objective_value <= min(found.values()) * (1 + 1e-9)
        print(f"| {inst.name} | {found[best]:g} | {best.removesuffix('Scheduler')} | {max(found.values()):g} | "
              f"{res.objective_value:g} | {res.status} | {ratio:.4f} |")
    print(f"\nmilp no worse than every SAGA scheduler on {never_worse} of {len(instances)}; "
          f"milp / best SAGA geo-mean {_geo(ratios):.4f}, max {max(ratios):.4f}")


# -- part 4: whole processes on a large instance -------------------------------------

def part4(n: int, nodes: int, repeats: int) -> None:
    """Whole-process wall time on an ``n``-task, ``nodes``-node random DAG (CCR 1,
    seed 7): :func:`saga_process.whole_processes`."""
    from saga_process import whole_processes

    from mapper.frontend.importers.dsl_writer import graph_to_dsl

    inst = random_dag(n, 1.0, seed=7, nodes=nodes)
    tmp = Path(tempfile.mkdtemp(prefix="vs_saga_large_"))
    atexit.register(shutil.rmtree, tmp, True)
    tg, _ = saga_pair(inst)
    graph, _ = ours_from_saga(inst, tg)  # SAGA's instance (its super source/sink included), as ours
    net = inst.network
    whole_processes(tmp, graph_to_dsl(graph), {"names": net.names, "speeds": net.speeds, "strength": net.strength,
                                               "tasks": inst.tasks, "edges": inst.edges},
                    f"{len(graph.tasks)} tasks x {nodes} nodes ({len(graph.edges)} edges)", repeats)


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ver = {p: metadata.version(p) for p in ("anrg-saga", "wfcommons")}
    return (f"{datetime.date.today().isoformat()}; {os.cpu_count()} CPUs (nproc), {model}; "
            f"Python {pyplatform.python_version()}; anrg-saga {ver['anrg-saga']}, wfcommons {ver['wfcommons']}; "
            f"PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED')}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="mapper vs SAGA (HEFT, CPoP) and MILP on cpu-gpu-fpga")
    ap.add_argument("--quick", action="store_true", help="small random DAGs and the committed workflows only")
    ap.add_argument("--milp-time", type=float, default=10.0, help="MILP time limit per workflow, s (default 10)")
    ap.add_argument("--skip-part1", action="store_true", help="parts 2 and 3 only (per-device costs)")
    ap.add_argument("--only-part4", action="store_true", help="the whole-process timing only")
    ap.add_argument("--only-part1b", action="store_true", help="every SAGA scheduler against milp only")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per side in part 4 (default 3)")
    args = ap.parse_args(argv)
    if args.only_part4:
        part4(2000, 8, args.repeats)
        return 0
    if args.only_part1b:
        sizes = (20, 50) if args.quick else (20, 50, 100)
        part1b([random_dag(n, ccr, seed=1000 * n + int(ccr * 10)) for n in sizes for ccr in (0.1, 1.0, 10.0)]
               + [heft_paper()], args.milp_time)
        return 0
    logging.getLogger().setLevel(logging.ERROR)  # SAGA warns on every super source/sink it adds
    print(f"# mapper vs SAGA\n\n{machine()}")
    sizes = (20, 50) if args.quick else (20, 50, 100)
    insts = [random_dag(n, ccr, seed=1000 * n + int(ccr * 10)) for n in sizes for ccr in (0.1, 1.0, 10.0)]
    insts.append(heft_paper())
    wf = wfcommons_instances(args.quick)
    insts += [i for i, _ in wf]
    if not args.skip_part1:
        print_part1(part1(insts))
        part1b([i for i in insts if i.family in ("random", "heft-paper")], args.milp_time)
    part2(wf, args.milp_time)
    if not args.quick:
        part4(2000, 8, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
