"""Mapping benchmark: the MILP against the list heuristics, and HEFT's scaling.

Part 1: random task graphs (tests/randdag.py) of 10/20/30/50 tasks on 3 and 4
devices, a few seeds each. For each, the MILP mapper's solve time, status,
gap, and its makespan relative to HEFT, CPOP and PEFT (ratio < 1: the MILP
is better).

Part 2: HEFT's mapping time on 1,000 and 10,000 tasks on 8 devices.

Part 3 (``--lns``): graphs above the exact-size limit, where the MILP mapper
coarsens and runs MILP-window LNS: its makespan relative to the best of
HEFT, CPOP and PEFT.

Run from the repository root::

    python benchmarks/mapping.py [--time-limit 20] [--seeds 3] [--sizes 10 20 30 50] [--big 1000 10000]
                                 [--lns 100 200 500] [--lns-time 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from randdag import random_instance

from mapper.engine.validate import validate
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions

SHAPES = ("layered", "forkjoin", "random")
BASELINES = ("heft", "cpop", "peft")


def milp_rows(sizes, seeds: int, time_limit: float):
    rows = []
    for n in sizes:
        for n_devices in (3, 4):
            for seed in range(seeds):
                shape = SHAPES[seed % len(SHAPES)]
                cost = random_instance(1000 * n + 10 * n_devices + seed, n, shape=shape, n_devices=n_devices)
                base = {b: get_mapper(b).map(cost).objective_value for b in BASELINES}
                start = time.perf_counter()
                res = get_mapper("milp").map(cost, MapOptions(time_limit=time_limit, seed=seed))
                wall = time.perf_counter() - start
                assert not validate(res.schedule), "MILP schedule does not validate"
                mode = "LNS" if any(x.startswith("graph too large") for x in res.notes) else "exact"
                rows.append(dict(n=n, devices=n_devices, seed=seed, shape=shape, mode=mode, time=wall,
                                 status=res.status,
                                 gap=res.gap, makespan=res.objective_value,
                                 **{f"vs_{b}": res.objective_value / base[b] for b in BASELINES}))
                r = rows[-1]
                print(f"{n:4d} {n_devices:3d} {seed:4d} {shape:9s} {mode:5s} {wall:8.2f} {r['status']:9s} "
                      f"{_pct(r['gap']):>7s} {r['makespan']:10.2f} "
                      + " ".join(f"{r['vs_' + b]:7.3f}" for b in BASELINES), flush=True)
    return rows


def heft_rows(sizes, repeats: int = 3):
    rows = []
    for n in sizes:
        cost = random_instance(7, n, shape="layered", n_devices=8)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            res = get_mapper("heft").map(cost)
            times.append(time.perf_counter() - start)
        rows.append((n, len(cost.graph.edges), min(times), statistics.median(times), res.objective_value))
        print(f"{n:6d} {len(cost.graph.edges):7d} {min(times):9.3f} {statistics.median(times):9.3f} "
              f"{res.objective_value:12.2f}", flush=True)
    return rows


def lns_rows(sizes, time_limit: float):
    rows = []
    for n in sizes:
        for shape in ("layered", "forkjoin"):
            cost = random_instance(31 * n, n, shape=shape, n_devices=4)
            base = min(get_mapper(b).map(cost).objective_value for b in BASELINES)
            start = time.perf_counter()
            res = get_mapper("milp").map(cost, MapOptions(time_limit=time_limit))
            wall = time.perf_counter() - start
            assert not validate(res.schedule), "LNS schedule does not validate"
            coarse = next((x.split("coarsened ")[1] for x in res.notes if "coarsened" in x), "-")
            rows.append((n, shape, coarse, wall, res.status, res.objective_value / base))
            print(f"{n:5d} {shape:9s} {coarse:>12s} {wall:8.1f} {res.status:9s} {res.objective_value / base:9.4f}",
                  flush=True)
    return rows


def _pct(gap):
    return "-" if gap is None else f"{100 * gap:.1f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0, help="MILP time limit per graph (s)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10, 20, 30, 50])
    ap.add_argument("--big", type=int, nargs="*", default=[1000, 10000])
    ap.add_argument("--lns", type=int, nargs="*", default=[], help="sizes for the large-graph (LNS) part")
    ap.add_argument("--lns-time", type=float, default=30.0, help="time limit per large graph (s)")
    args = ap.parse_args(argv)

    if args.sizes:
        print(f"MILP vs heuristics (time limit {args.time_limit:g} s per graph; ratio = MILP / heuristic makespan)")
        print("   n dev seed shape     mode   time[s] status       gap   makespan "
              + " ".join(f"{b:>7s}" for b in BASELINES))
    rows = milp_rows(args.sizes, args.seeds, args.time_limit)
    if rows:
        print("\nper size (geometric means of the ratios; statuses)")
        print("   n  optimal  mean time[s]  max gap " + " ".join(f"{b:>7s}" for b in BASELINES))
    for n in args.sizes:
        sel = [r for r in rows if r["n"] == n]
        if not sel:
            continue
        gaps = [r["gap"] for r in sel if r["gap"] is not None]
        ratios = " ".join(f"{statistics.geometric_mean([r['vs_' + b] for r in sel]):7.3f}" for b in BASELINES)
        print(f"{n:4d} {sum(r['status'] == 'optimal' for r in sel):4d}/{len(sel):<3d} "
              f"{statistics.mean(r['time'] for r in sel):12.2f} {_pct(max(gaps) if gaps else None):>8s} {ratios}")
    if args.big:
        print("\nHEFT scaling on 8 devices (best and median of 3 runs)")
        print(" tasks   edges   best[s] median[s]     makespan")
        heft_rows(args.big)
    if args.lns:
        print(f"\nLarge graphs, 4 devices: MILP mapper (coarsening + LNS, {args.lns_time:g} s) / best of "
              + ", ".join(BASELINES))
        print(" tasks shape      coarsened  time[s] status        ratio")
        lns_rows(args.lns, args.lns_time)
    return 0


if __name__ == "__main__":
    sys.exit(main())
