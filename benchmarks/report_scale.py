"""Report writing at scale: the JSON, HTML and Perfetto reports of a 10^5-task schedule.

    python benchmarks/report_scale.py [--tasks 100000] [--width 100]

A generated layered DAG (deterministic, seed 0) with explicit costs on the ``workstation``
platform's ``cpu0`` and ``gpu0`` (the GPU 3x faster) and explicit ``comm`` on the edges (each
task fed by one random task of the layer above, ``--width`` tasks a layer), mapped once with
HEFT in process; then each report is written ``--repeat`` times and the best wall time, the
peak traced memory (tracemalloc, one more run) and the file size are printed. Past
``mapper.report.blocks.DETAIL_LIMIT`` tasks the HTML Gantt chart and the trace draw busy blocks
per device (docs/huge.md); the JSON report lists every task. The machine is shared: the load
average is printed beside the timings.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mapper.costing.cost import build_cost_table
from mapper.frontend.load import load_graph
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.platform.loader import load_platform
from mapper.report.blocks import DETAIL_LIMIT
from mapper.report.chrome_trace import write_chrome_trace
from mapper.report.html import write_html
from mapper.report.json_report import write_json


def write_graph(path: str, n: int, width: int) -> None:
    """The generated graph in the DSL."""
    rng = random.Random(0)
    with open(path, "w") as f:
        f.write("graph big {\n")
        for i in range(n):
            c = rng.uniform(1, 10)
            f.write(f"  task t{i} cost {{ cpu0: {c:.4f}ms, gpu0: {c / 3:.4f}ms }}\n")
        for i in range(width, n):
            f.write(f"  t{i - width + rng.randrange(width)} -> t{i} comm {rng.uniform(0.1, 1):.4f}ms\n")
        f.write("}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--width", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "big.tg")
        write_graph(src, args.tasks, args.width)
        t0 = time.perf_counter()
        cost = build_cost_table(load_graph(src), load_platform("workstation"))
        result = get_mapper("heft").map(cost, MapOptions())
        print(f"{args.tasks:,} tasks, {len(cost.graph.edges):,} edges: loaded and mapped (heft) in "
              f"{time.perf_counter() - t0:.1f} s; blocks past {DETAIL_LIMIT:,} tasks")
        print(f"{'report':<8}{'best s':>8}{'peak MiB':>10}{'size MB':>9}  load")
        for name, write, ext in (("json", write_json, "json"), ("html", write_html, "html"),
                                 ("trace", write_chrome_trace, "trace.json")):
            out = os.path.join(tmp, f"r.{ext}")
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                write(result, out)
                best = min(best, time.perf_counter() - t0)
            tracemalloc.start()  # a separate run: tracing slows the writer down
            write(result, out)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(f"{name:<8}{best:>8.2f}{peak / 2**20:>10.0f}{os.path.getsize(out) / 1e6:>9.1f}  "
                  f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
