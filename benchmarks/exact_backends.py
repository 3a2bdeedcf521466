"""The two exact backends side by side, and the default mapper that runs both.

``highs``: the ``milp`` mapper with its CP-SAT turn switched off (the HiGHS
MILP, with LNS first above 20 tasks and the large-graph path above 60);
``cpsat``: OR-Tools CP-SAT alone; ``milp``: the default mapper, CP-SAT for
three quarters of the time then the MILP (a sequential portfolio).

Random task graphs (tests/randdag.py: layered, fork-join and random shapes,
CCR 1) of 10 to 50 tasks on 3 and 4 devices, and the DSL examples on
cpu-gpu-fpga (the HEFT paper's on its three processors), each mapped by
each with the same time limit, one after the other (HiGHS on one thread;
CP-SAT on two where there are two cores). Per instance: each backend's
makespan, status and wall time, and the ratios cpsat / highs (< 1: CP-SAT better) and milp /
best of the two alone. The summary counts the instances each proves optimal
and the geometric means of the ratios. Wall times are printed with the load
average.

    python benchmarks/exact_backends.py [--time-limit 10] [--seeds 2] [--sizes 10 20 30 50] [--examples]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from randdag import random_instance  # noqa: E402

from mapper.costing.cost import build_cost_table  # noqa: E402
from mapper.costing.fusion import fuse_for  # noqa: E402
from mapper.engine.validate import validate  # noqa: E402
from mapper.frontend.load import load_graph  # noqa: E402
from mapper.mapping import get_mapper  # noqa: E402
from mapper.mapping.base import MapOptions  # noqa: E402
from mapper.platform.loader import load_platform  # noqa: E402

SHAPES = ("layered", "forkjoin", "random")
BACKENDS = ("highs", "cpsat", "milp")


def run(name: str, cost, time_limit: float):
    """One backend's result (``highs``: the milp mapper without its CP-SAT turn)."""
    import mapper.mapping.milp as milp

    share = milp.CPSAT_SHARE
    if name == "highs":
        milp.CPSAT_SHARE = 0.0
    try:
        return get_mapper("milp" if name == "highs" else name).map(cost, MapOptions(time_limit=time_limit))
    finally:
        milp.CPSAT_SHARE = share


def instances(sizes, seeds: int, examples: bool):
    for n in sizes:
        for devices in (3, 4):
            for seed in range(seeds):
                shape = SHAPES[(seed + n) % 3]
                yield f"{shape} n={n} d={devices} s={seed}", random_instance(seed, n, shape=shape, n_devices=devices)
    if examples:
        for path in sorted((ROOT / "examples").glob("*.tg")):
            graph = load_graph(str(path))
            # explicit-cost examples name their own processors (the HEFT paper's)
            platform = load_platform("heft3" if any(t.explicit_cost for t in graph.tasks) else "cpu-gpu-fpga")
            graph = fuse_for(graph, platform)
            yield f"{path.stem} ({len(graph.tasks)} tasks)", build_cost_table(graph, platform)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10, 20, 30, 50])
    ap.add_argument("--examples", action="store_true", help="also the DSL examples on cpu-gpu-fpga")
    args = ap.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; time limit {args.time_limit:g} s")
    head = f"{'instance':<34} " + " ".join(f"{b + ' ' + c:>14}" for b in BACKENDS for c in ("value", "status", "s"))
    print(head + f" {'cpsat/highs':>11} {'milp/best':>9}")
    print("-" * (len(head) + 22))
    proven = {b: 0 for b in BACKENDS}
    logs: list[float] = []
    portfolio: list[float] = []
    count = 0
    for label, cost in instances(args.sizes, args.seeds, args.examples):
        cells = []
        values = {}
        for name in BACKENDS:
            t0 = time.perf_counter()
            result = run(name, cost, args.time_limit)
            dt = time.perf_counter() - t0
            assert not validate(result.schedule), (label, name)
            values[name] = result.objective_value
            proven[name] += result.status == "optimal"
            cells += [f"{result.objective_value:>14.6g}", f"{result.status:>14}", f"{dt:>14.2f}"]
        ratio = values["cpsat"] / values["highs"] if values["highs"] > 0 else 1.0
        best = min(values["highs"], values["cpsat"])
        both = values["milp"] / best if best > 0 else 1.0
        logs.append(math.log(ratio))
        portfolio.append(math.log(both))
        count += 1
        print(f"{label:<34} " + " ".join(cells) + f" {ratio:>11.4f} {both:>9.4f}", flush=True)
    print(f"\nproven optimal: highs {proven['highs']}/{count}, cpsat {proven['cpsat']}/{count}, "
          f"milp {proven['milp']}/{count}; geometric mean cpsat/highs {math.exp(sum(logs) / len(logs)):.4f}, "
          f"milp/best {math.exp(sum(portfolio) / len(portfolio)):.4f}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
