"""Parse and lower large explicit-cost graphs: the fast path (mapper.frontend.fastparse) against Lark,
and the direct reader (mapper.frontend.direct: text straight to the graph) against both.

Random layered graphs with one ``task NAME cost { ... }`` line per task (one entry per
device) and two ``a -> b comm T`` edges per task, the shape of profiled graphs and of
benchmarks/vs_saga.py's instances. Prints the median of interleaved repeats, the ratio
of Lark to the fast path, and parse+lower of 10,000 tasks x 32 devices against its 3 s
target, with the load average; ``direct s`` is the direct reader on the same text (its
graph checked equal to the lowered program's).

    python benchmarks/parse_explicit.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import time

from mapper.frontend import lark_parse as L
from mapper.frontend import parse as P
from mapper.frontend.direct import direct_graph
from mapper.frontend.lowering.program import lower

TARGET_S = 3.0


def program(tasks: int, devices: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    lines = ["graph big {"]
    for i in range(tasks):
        lines.append(f"  task t{i} cost {{ " + ", ".join(f"p{d + 1}: {rng.uniform(1, 20):.4g}" for d in range(devices))
                     + " }")
    for i in range(tasks - 1):
        for j in rng.sample(range(i + 1, min(tasks, i + 40)), min(2, min(tasks, i + 40) - i - 1)):
            lines.append(f"  t{i} -> t{j} comm {rng.uniform(1, 10):.3g}")
    return "\n".join([*lines, "}", ""])


def lark_parse(text: str):
    """Lark's tree and transformer, under the same collector setting as mapper.frontend.parse."""
    gc.disable()
    try:
        return L._ToAst("big.tg", text).transform(L._parser().parse(text))
    finally:
        gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; median of {args.repeats} interleaved runs")
    print(f"{'tasks x devices':>16} {'lines':>7} {'lark s':>8} {'fast s':>8} {'lark/fast':>10} {'lower s':>8} "
          f"{'fast+lower s':>13} {'direct s':>9}")
    for tasks, devices in ((2_000, 8), (10_000, 32)):
        text = program(tasks, devices)
        runs: dict[str, list[float]] = {"lark": [], "fast": [], "lower": [], "direct": []}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            slow = lark_parse(text) if tasks <= 2_000 else None  # Lark on 10,000 x 32 takes half a minute
            t1 = time.perf_counter()
            fast = P.parse(text, "big.tg")
            t2 = time.perf_counter()
            graph = lower(fast)
            t3 = time.perf_counter()
            direct = direct_graph(text, "big.tg")
            runs["direct"].append(time.perf_counter() - t3)
            assert direct == graph and direct.tasks == graph.tasks and direct.edges == graph.edges
            if slow is not None:
                assert slow == fast
                runs["lark"].append(t1 - t0)
            runs["fast"].append(t2 - t1)
            runs["lower"].append(t3 - t2)
        med = {k: statistics.median(v) if v else None for k, v in runs.items()}
        fast_s, lower_s = med["fast"] or 0.0, med["lower"] or 0.0
        lark_s = med["lark"]
        ratio = f"{lark_s / fast_s:>10.1f}" if lark_s else f"{'-':>10}"
        lark_col = f"{lark_s:>8.2f}" if lark_s else f"{'-':>8}"
        total = fast_s + lower_s
        line = (f"{f'{tasks:,} x {devices}':>16} {text.count(chr(10)):>7} {lark_col} {fast_s:>8.2f} {ratio} "
                f"{lower_s:>8.2f} {total:>13.2f} {med['direct'] or 0.0:>9.2f}")
        if tasks == 10_000:
            line += f"   target {TARGET_S:g} s: ratio {total / TARGET_S:.2f}"
        print(line)


if __name__ == "__main__":
    main()
