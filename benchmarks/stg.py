"""Known optima: the Kasahara Standard Task Graph set (P|prec|Cmax) with published optimal makespans.

The Standard Task Graph set (Tobita and Kasahara, "A standard task graph set
for fair evaluation of multiprocessor scheduling algorithms", Journal of
Scheduling 5(5), 2002) in the copy of the repository thelonesailor/MSP
(folders ``50/`` and ``100/``: random graphs of 50 and 100 tasks, with
``Optimal_values/Case{50,100}_{P}_OPT.csv``: the optimal makespan on ``P``
identical processors, or, for the instances whose optimum was not known, a
lower and an upper bound). An STG file lists the task count ``n``, then per
task ``id time predecessor-count predecessors...``, with dummy tasks ``0``
and ``n + 1`` of time 0; no communication.

For each chosen instance and processor count the script builds the
explicit-cost graph (dummies left out; their edges imply nothing) on ``P``
identical CPU devices, maps it with each ``--mappers`` entry (default
``milp`` and ``cpsat``) under ``--time-limit`` (default 15 s), and prints the
makespan, the optimum (``lo-hi`` for an open instance), whether it was
found (the optimum, or the upper bound of an open instance) and proven, and
the time; the summary counts, per mapper and set, the optima found and
proven, the open instances closed (an optimum proven) and the median time.

    python benchmarks/stg.py PATH/TO/MSP [--sizes 50 100] [--procs 2 4] [--count 10] [--time-limit 15]
                             [--only rand0022 rand0025 ...]

Without the checkout it says so and exits 0. Wall times come with the load
average.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from pathlib import Path

from mapper.core.graph import Edge, Task, TaskGraph
from mapper.costing.cost import build_cost_table
from mapper.engine.validate import validate
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.platform.loader import parse_platform


def read_stg(path: Path) -> TaskGraph:
    """An STG file as explicit-cost tasks (seconds = its time units) and plain edges."""
    numbers = [int(x) for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
               for x in line.split()]
    n = numbers[0]
    pos = 1
    times: dict[int, int] = {}
    preds: dict[int, list[int]] = {}
    for _ in range(n + 2):
        tid, cost, k = numbers[pos], numbers[pos + 1], numbers[pos + 2]
        times[tid] = cost
        preds[tid] = numbers[pos + 3:pos + 3 + k]
        pos += 3 + k
    real = [t for t in sorted(times) if 0 < t <= n]
    index = {t: k for k, t in enumerate(real)}
    tasks = tuple(Task(index[t], f"t{t}", "task", explicit_cost=(("cpu", float(times[t])),)) for t in real)
    pairs = sorted({(index[p], index[t]) for t in real for p in preds[t] if p in index}, key=lambda e: (e[1], e[0]))
    edges = tuple(Edge(i, u, v, 0.0, 0.0) for i, (u, v) in enumerate(pairs))
    return TaskGraph(path.stem, tasks, edges)


def platform(procs: int):
    devices = "".join(f'\n[[device]]\nname = "p{k}"\nkind = "cpu"\n' for k in range(procs))
    return parse_platform(f'name = "identical{procs}"\n{devices}')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", nargs="?", default=os.environ.get("STG_MSP", ""), help="a checkout of thelonesailor/MSP")
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 100])
    ap.add_argument("--procs", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--count", type=int, default=10, help="instances per set (the first ones)")
    ap.add_argument("--time-limit", type=float, default=15.0)
    ap.add_argument("--mappers", default="milp,cpsat")
    ap.add_argument("--only", nargs="+", default=[], help="instances by file name (rand0022 ...), in place of --count")
    args = ap.parse_args()
    repo = Path(args.repo) if args.repo else None
    if repo is None or not (repo / "Optimal_values").is_dir():
        print("skipped: give the path of a thelonesailor/MSP checkout (its Optimal_values/ was not found)")
        return 0
    mappers = [m.strip() for m in args.mappers.split(",") if m.strip()]
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; time limit {args.time_limit:g} s")
    print(f"{'instance':<22} {'P':>2} {'opt':>7} " + " ".join(f"{m:>8} {'found':>5} {'proven':>6} {'s':>6}"
                                                            for m in mappers))
    summary: dict[tuple[str, int, int], list[tuple[bool, bool, float, bool]]] = {}
    for size in args.sizes:
        for procs in args.procs:
            with (repo / "Optimal_values" / f"Case{size}_{procs}_OPT.csv").open() as fh:
                optima = [(row[0], float(row[2]), float(row[-1])) for row in csv.reader(fh) if len(row) >= 3]
            plat = platform(procs)
            chosen = [o for o in optima if Path(o[0]).stem in args.only] if args.only else optima[:args.count]
            for name, low, opt in chosen:
                cost = build_cost_table(read_stg(repo / name), plat)
                cells = []
                for m in mappers:
                    t0 = time.perf_counter()
                    result = get_mapper(m).map(cost, MapOptions(time_limit=args.time_limit))
                    dt = time.perf_counter() - t0
                    assert not validate(result.schedule), (name, m)
                    found = result.objective_value <= opt * (1 + 1e-9)
                    proven = found and result.status == "optimal"
                    summary.setdefault((m, size, procs), []).append((found, proven, dt, low < opt and proven))
                    cells.append(f"{result.objective_value:>8g} {'yes' if found else 'no':>5} "
                                 f"{'yes' if proven else 'no':>6} {dt:>6.2f}")
                known = f"{opt:g}" if low == opt else f"{low:g}-{opt:g}"
                print(f"{name:<22} {procs:>2} {known:>7} " + " ".join(cells), flush=True)
    print()
    for (m, size, procs), rows in sorted(summary.items()):
        print(f"{m:>6} STG-{size} P={procs}: optimum found {sum(r[0] for r in rows)}/{len(rows)}, proven "
              f"{sum(r[1] for r in rows)}/{len(rows)} (open instances closed: {sum(r[3] for r in rows)}), "
              f"median {statistics.median(r[2] for r in rows):.2f} s, max {max(r[2] for r in rows):.2f} s")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
