"""Time ``mapper import onnx`` on the full-architecture models in the onnx wheel.

Prints, per model, the ONNX nodes, the tasks imported, and the median wall time
of the import (reading, shape inference, writing the DSL) and of lowering the DSL
it writes, over interleaved repeats, with the load average. Target: ResNet-50 and
DenseNet-121 (1,746 nodes) each under 1 s.

    python benchmarks/onnx_import.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import onnx

from mapper.frontend.importers.onnx_dsl import import_onnx
from mapper.frontend.load import graph_from_text

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
TARGET_S = 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    models = sorted(LIGHT.glob("light_*.onnx"))
    times: dict[str, list[tuple[float, float]]] = {m.stem: [] for m in models}
    info: dict[str, tuple[int, int]] = {}
    import_onnx(str(models[0]))  # warm the imports
    for _ in range(args.repeats):  # interleaved: every model once per round
        for m in models:
            t0 = time.perf_counter()
            imp = import_onnx(str(m))
            t1 = time.perf_counter()
            graph_from_text(imp.text, m.name)
            t2 = time.perf_counter()
            times[m.stem].append((t1 - t0, t2 - t1))
            info[m.stem] = (imp.nodes, imp.tasks)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; median of {args.repeats} interleaved runs")
    print(f"{'model':<24} {'nodes':>6} {'tasks':>6} {'import s':>9} {'lower s':>8} {'total s':>8} {'vs 1 s':>7}")
    for name, runs in times.items():
        imp_s = statistics.median(r[0] for r in runs)
        low_s = statistics.median(r[1] for r in runs)
        nodes, tasks = info[name]
        total = imp_s + low_s
        print(f"{name:<24} {nodes:>6} {tasks:>6} {imp_s:>9.3f} {low_s:>8.3f} {total:>8.3f} {total / TARGET_S:>7.2f}")


if __name__ == "__main__":
    main()
