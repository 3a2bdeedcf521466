"""Optimal scheduling with communication delays: the default mapper on Sinnen's benchmark graphs.

    python benchmarks/sinnen.py FOLDER [--sizes 10 21 30] [--procs 2 4 8 16] [--time-limit 60]
                                       [--count N] [--only NAME ...]

FOLDER holds the set's GXL (or DOT) files: fork, join, fork-join, in- and out-trees, pipelines,
series-parallel, stencil, independent and random graphs of 10, 21 and 30 tasks, CCR 0.1 to 10
(Sinnen's group, University of Auckland; the files several student schedulers built on that set
ship in their ``test_inputs/``; nothing of it is shipped here). Each graph is imported as
``mapper import gxl`` does (a task's weight its time on any processor, an edge's its transfer
time between two processors) onto N identical, fully connected processors (P|prec,c_ij|Cmax),
and compiled with the default mapper under the time limit. The table gives, per size and
processor count, the instances proven optimal and the gaps of the rest (makespan over the
lower bound the mapper reports), and every instance with an optimum that other solvers of the
set assert (:data:`KNOWN`) is checked against it. Wall times depend on the machine's load
(printed); schedule lengths do not.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mapper.costing.cost import build_cost_table  # noqa: E402
from mapper.engine.validate import validate  # noqa: E402
from mapper.frontend.importers.task_formats import procs_platform, read_weighted, weighted_dsl  # noqa: E402
from mapper.frontend.load import graph_from_text  # noqa: E402
from mapper.mapping import get_mapper  # noqa: E402
from mapper.mapping.base import MapOptions  # noqa: E402
from mapper.platform.loader import parse_platform  # noqa: E402

SIZE = re.compile(r"_Nodes_(\d+)_")
#: Optimal schedule lengths other solvers of the set assert in their test suites (graph, processors):
#: length. Sources: the SearcherTests of a SOFTENG306 (University of Auckland, 2021) team's A*
#: scheduler (two processors) and the IntegrationTest of another team's (2 to 8 processors).
KNOWN = {
    ("Fork_Join_Nodes_10_CCR_0.10_WeightType_Random", 2): 499, ("Independent_Nodes_21_WeightType_Random", 2): 66,
    ("InTree-Balanced-MaxBf-3_Nodes_10_CCR_0.10_WeightType_Random", 2): 222,
    ("Fork_Nodes_10_CCR_0.10_WeightType_Random", 2): 300,
    ("InTree-Unbalanced-MaxBf-3_Nodes_10_CCR_0.10_WeightType_Random", 2): 344,
    ("Pipeline_Nodes_21_CCR_0.10_WeightType_Random", 2): 904, ("Join_Nodes_10_CCR_0.10_WeightType_Random", 2): 292,
    ("OutTree-Balanced-MaxBf-3_Nodes_21_CCR_1.05_WeightType_Random", 2): 71,
    ("OutTree-Unbalanced-MaxBf-3_Nodes_21_CCR_0.99_WeightType_Random", 2): 72,
    ("Random_Nodes_10_Density_4.50_CCR_10.00_WeightType_Random", 2): 66,
    ("SeriesParallel-MaxBf-5_Nodes_10_CCR_9.97_WeightType_Random", 2): 59,
    ("Stencil_Nodes_21_CCR_10.03_WeightType_Random", 2): 134,
    ("InTree-Unbalanced-MaxBf-3_Nodes_10_CCR_10.00_WeightType_Random", 2): 56,
    ("InTree-Unbalanced-MaxBf-3_Nodes_10_CCR_10.00_WeightType_Random", 4): 56,
    ("Join_Nodes_10_CCR_10.07_WeightType_Random", 2): 54, ("Join_Nodes_10_CCR_10.07_WeightType_Random", 4): 52,
    ("Random_Nodes_21_Density_5.14_CCR_0.10_WeightType_Random", 2): 3946,
    ("Random_Nodes_21_Density_5.14_CCR_0.10_WeightType_Random", 4): 3837,
    ("Fork_Nodes_10_CCR_10.00_WeightType_Random", 4): 47, ("Fork_Nodes_10_CCR_10.00_WeightType_Random", 8): 47,
    ("Fork_Join_Nodes_10_CCR_10.01_WeightType_Random", 4): 69,
    ("Fork_Join_Nodes_10_CCR_10.01_WeightType_Random", 8): 69,
    ("Fork_Nodes_10_CCR_0.10_WeightType_Random", 4): 204, ("Fork_Nodes_10_CCR_0.10_WeightType_Random", 8): 167,
}


def instances(folder: Path, sizes: list[int], count: int | None, only: list[str]) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.suffix in (".gxl", ".dot"))
    out = []
    for size in sizes:
        group = [p for p in files if (m := SIZE.search(p.name)) and int(m.group(1)) == size
                 and (not only or any(o in p.name for o in only))]
        out += group[:count] if count else group
    return out


def solve(path: Path, procs: int, limit: float) -> tuple[float, float | None, str, float]:
    """(makespan, lower bound, status, seconds) of the default mapper on ``path`` and ``procs``."""
    g = read_weighted(path, path.suffix[1:])
    graph = graph_from_text(weighted_dsl(g), path.name)
    platform = parse_platform(procs_platform(procs, path.name), f"procs{procs}.toml")
    t0 = time.perf_counter()
    result = get_mapper("milp").map(build_cost_table(graph, platform), MapOptions(time_limit=limit))
    seconds = time.perf_counter() - t0
    assert validate(result.schedule) == [], path.name
    return result.objective_value, result.lower_bound, result.status, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 21, 30])
    ap.add_argument("--procs", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--count", type=int, help="at most this many graphs of each size")
    ap.add_argument("--only", nargs="*", default=[], help="graphs whose names contain one of these")
    args = ap.parse_args()
    paths = instances(args.folder, args.sizes, args.count, args.only)
    if not paths:
        print(f"no .gxl or .dot graphs of sizes {args.sizes} in {args.folder}")
        return 2
    rows: dict[tuple[int, int], list[tuple[str, float, float | None, str, float]]] = {}
    print(f"{'graph':62} {'procs':>5} {'makespan':>9} {'bound':>9} {'status':>9} {'s':>6}")
    for procs in args.procs:
        for path in paths:
            size = int(SIZE.search(path.name).group(1))  # type: ignore[union-attr]
            value, bound, status, seconds = solve(path, procs, args.time_limit)
            rows.setdefault((size, procs), []).append((path.stem, value, bound, status, seconds))
            print(f"{path.stem[:62]:62} {procs:5d} {value:9.6g} {bound if bound is not None else float('nan'):9.6g} "
                  f"{status:>9} {seconds:6.1f}", flush=True)
    checked = [(name, procs, value, status, KNOWN[(name, procs)]) for (_, procs), got in rows.items()
               for name, value, _, status, _ in got if (name, procs) in KNOWN]
    if checked:
        agree = [c for c in checked if c[3] == "optimal" and abs(c[2] - c[4]) < 1e-6]
        print(f"\nknown optima (other solvers' test suites): {len(agree)} of {len(checked)} proven and equal")
        for name, procs, value, status, known in checked:
            if (name, procs, value, status, known) not in agree:
                print(f"      {name} on {procs}: {value:g} ({status}) against the known {known}")
    print(f"\nproven optimal within {args.time_limit:g} s (load average {os.getloadavg()[0]:.2f}):")
    for (size, procs), got in sorted(rows.items()):
        proven = [r for r in got if r[3] == "optimal"]
        gaps = [(r[1] - r[2]) / r[1] for r in got if r[3] != "optimal" and r[2] is not None and r[1] > 0]
        secs = statistics.median(r[4] for r in proven) if proven else float("nan")
        print(f"  {size:2d} tasks on {procs:2d} processors: {len(proven):3d} of {len(got):3d} proven "
              f"(median {secs:.2f} s)" + (f"; the rest: gaps {min(gaps):.1%} to {max(gaps):.1%}" if gaps else ""))
        for name, value, bound, status, _ in got:
            if status != "optimal":
                print(f"      {name}: {value:g} against bound {bound:g}" if bound is not None else f"      {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
