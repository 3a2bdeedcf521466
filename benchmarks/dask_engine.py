"""The Dask engine against the local executor: overhead per task, and
predicted against measured times on the examples.

For each example (small sizes, so that a run takes seconds), mapped by HEFT
on cpu-gpu-fpga and then dealt round-robin over the devices (so that tensors
move between workers), the script runs the local executor and the Dask
engine (in-process workers, then worker processes), interleaved, and prints
per run: the median over tasks of the engine's compute time minus the local
executor's kernel time (the engine's overhead per task), the wall time of
one pass per task, and the re-timed makespan against the prediction.

    python benchmarks/dask_engine.py [--repeats 5]

Wall-clock figures: report them with the load average (printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from randdag import round_robin  # noqa: E402

from mapper.frontend.load import graph_from_text  # noqa: E402
from mapper.mapping.base import MapResult  # noqa: E402
from mapper.pipeline import compile_graph  # noqa: E402
from mapper.run.dask_engine import execute_dask  # noqa: E402
from mapper.run.execute import execute  # noqa: E402

SMALL = {
    "cg": ("param n = 1024, N = n*n", "param n = 512, N = n*n"),
    "jacobi2d": ("param N = 4096, K = 10, R = 10", "param N = 1024, K = 10, R = 3"),
    "gpt2_block": None,
    "bert_base": ("param B = 8, S = 128, H = 768, A = 12, F = 3072, L = 12, V = 30522",
                  "param B = 2, S = 128, H = 768, A = 12, F = 3072, L = 2, V = 30522"),
}


def spread(name: str) -> MapResult:
    text = (ROOT / "examples" / f"{name}.tg").read_text()
    if SMALL[name]:
        old, new = SMALL[name]
        text = text.replace(old, new)
    return round_robin(compile_graph(graph_from_text(text, f"{name}.tg"), "cpu-gpu-fpga", mapper="heft").result)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'example':11s} {'engine':16s} {'tasks':>5s} {'overhead/task':>14s} {'pass wall/task':>15s} "
          f"{'predicted':>10s} {'re-timed':>10s} {'xfers':>5s}")
    for name in SMALL:
        res = spread(name)
        local = execute(res, repeats=args.repeats)
        runs = [("local", local),
                ("dask in-process", execute_dask(res, repeats=args.repeats, processes=False)),
                ("dask processes", execute_dask(res, repeats=args.repeats, processes=True))]
        base = {r.task: r.measured for r in local.records}
        for label, tr in runs:
            over = [r.measured - base[r.task] for r in tr.records if r.measured is not None and base[r.task]]
            n = len(tr.records)
            print(f"{name:11s} {label:16s} {n:5d} {statistics.median(over) * 1e3:11.3f} ms "
                  f"{tr.wall / (tr.repeats + 1) / n * 1e3:12.3f} ms {tr.predicted_makespan * 1e3:8.3f}ms "
                  f"{tr.makespan * 1e3:8.3f}ms {len(tr.transfers):5d}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
