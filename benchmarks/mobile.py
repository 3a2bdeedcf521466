"""Delegation on a phone and an embedded board: the nine light ONNX models of the onnx wheel.

Per model and platform (``sd8gen3``: the Hexagon NPU behind ONNX Runtime's QNN EP list;
``jetson-orin``: a DLA behind TensorRT's DLA list), prints the accelerator's subgraph count and
fallback nodes under ``--delegate greedy`` (what the runtimes do), the predicted latency of
``greedy`` and of ``mapped`` (the mapper's choice with the same invocation and hand-over costs),
and of the best single processor. Every schedule is checked by the independent validator.

Whole-model latency against MLPerf Mobile v4.0's Snapdragon 8 Gen 3 rows, CPU+GPU co-execution and
several models' SLOs are benchmarks/mlperf_mobile.py's; ONNX Runtime QNN's own partitions are the
optional oracle in tests/test_delegation.py.

    python benchmarks/mobile.py [--models squeezenet,resnet50] [--time-limit 5]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import onnx

from mapper.core.units import fmt_time
from mapper.engine.validate import validate
from mapper.errors import InputWarning
from mapper.mapping.base import MapOptions
from mapper.pipeline import compile_graph
from mapper.report.delegation import delegation

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
PLATFORMS = ("sd8gen3", "jetson-orin")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated model names (default: all nine)")
    ap.add_argument("--time-limit", type=float, default=5.0)
    args = ap.parse_args()
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    models = [m for m in sorted(LIGHT.glob("light_*.onnx")) if not wanted or m.stem[6:] in wanted]
    options = MapOptions(time_limit=args.time_limit)
    head = f"{'model':<14} {'platform':<12} {'subgraphs':>9} {'fallbacks':>9}  {'fallback ops':<22} " \
           f"{'greedy':>10} {'mapped':>10} {'gain':>6} {'best single':>18}"
    print(head)
    print("-" * len(head))
    for path in models:
        for plat in PLATFORMS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", InputWarning)
                greedy = compile_graph(str(path), plat, mapper="delegate-greedy", options=options).result
                mapped = compile_graph(str(path), plat, mapper="delegate-mapped", options=options).result
                single = compile_graph(str(path), plat, mapper="single", options=options).result
            for r in (greedy, mapped, single):
                bad = validate(r.schedule)
                if bad:
                    raise SystemExit(f"{path.stem} on {plat}: {r.mapper}'s schedule is invalid: {bad[0].message}")
            dl = delegation(greedy.schedule) or {"subgraphs": [], "fallbacks": []}
            ops = ",".join(sorted({f["op"] for f in dl["fallbacks"]})) or "-"
            g, m = greedy.schedule.makespan, mapped.schedule.makespan
            where = single.schedule.cost.platform.devices[single.schedule.slots[0].device].name
            print(f"{path.stem[6:]:<14} {plat:<12} {len(dl['subgraphs']):>9} {len(dl['fallbacks']):>9}  "
                  f"{ops[:22]:<22} {fmt_time(g):>10} {fmt_time(m):>10} {g / m:>5.2f}x "
                  f"{fmt_time(single.schedule.makespan) + ' ' + where:>18}")


if __name__ == "__main__":
    main()
