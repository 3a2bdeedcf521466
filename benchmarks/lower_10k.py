"""Time parse + lower of a 10,000-task program (target: under 2 s).

The program is a loop of 2,500 template instances, each a chain of four ops
(matmul, add, relu, layernorm) with an inline weight. Prints the task count,
the best of three wall-clock times, and tasks per second.

Usage: python benchmarks/lower_10k.py [--tasks N] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from mapper.frontend.load import graph_from_text
from mapper.frontend.parse import parse

PROGRAM = """\
param B = 32, D = 256, N = {n}
graph chain10k {{
  input x : f32[B, D]
  template block(h) {{
    m = matmul(h, weight f32[D, D])
    a = add(m, h)
    r = relu(a)
    y = layernorm(r)
    return y
  }}
  h0 = x
  for i in 0..N {{
    h{{i+1}} = block(h{{i}})
  }}
  output h{{N}}
}}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--profile", action="store_true", help="print the top functions by time")
    args = ap.parse_args()
    text = PROGRAM.format(n=args.tasks // 4)
    parse(text, "bench.tg")  # build the Lark parser once, outside the timing
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        g = graph_from_text(text, "bench.tg")
        times.append(time.perf_counter() - t0)
    best = min(times)
    print(f"tasks {len(g.tasks)}  edges {len(g.edges)}")
    print(f"parse+lower best of 3: {best:.3f} s  ({len(g.tasks) / best:,.0f} tasks/s)")
    print(f"target 2 s: {'met' if best < 2.0 else 'MISSED'} (ratio {best / 2.0:.2f})")
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(graph_from_text, text, "bench.tg")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(20)


if __name__ == "__main__":
    main()
