"""HEFT on wide graphs: independent tasks on 4 devices, with the indexed gap search
(mapper.engine.timeline) and, for comparison, with the walk over the placed tasks it replaced.

Prints the wall time of the heft mapper per size, the ratio of the walk to the index,
and the 100,000-task time against its 30 s target, with the load average.

    python benchmarks/heft_wide.py [--largest 100000]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from randdag import make_cost, make_graph

from mapper.engine.timeline import Timeline
from mapper.mapping import get_mapper
from mapper.platform.loader import Device, Platform

TARGET_S = 30.0


def instance(n: int, devices: int = 4):
    rng = random.Random(1)
    plat = Platform(name="wide", devices=tuple(Device(index=i, name=f"p{i}", kind="cpu") for i in range(devices)))
    return make_cost(make_graph(n, []), plat, [[rng.uniform(1, 10) for _ in range(devices)] for _ in range(n)])


def heft_seconds(cost, walk: bool) -> tuple[float, float]:
    indexed = Timeline.slot
    if walk:
        Timeline.slot = lambda self, d, ready, duration, insertion=True: (  # type: ignore[method-assign]
            self._walk(d, ready, duration) if insertion and self._ends[d] else indexed(self, d, ready, duration,
                                                                                      insertion))
    try:
        t0 = time.perf_counter()
        result = get_mapper("heft").map(cost)
        return time.perf_counter() - t0, result.schedule.makespan
    finally:
        Timeline.slot = indexed  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--largest", type=int, default=100_000)
    args = ap.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'tasks':>8} {'index s':>9} {'walk s':>9} {'walk/index':>11}")
    for n in (2_000, 5_000, 10_000):
        cost = instance(n)
        t_index, ms_index = heft_seconds(cost, walk=False)
        t_walk, ms_walk = heft_seconds(cost, walk=True)
        assert ms_index == ms_walk, "the index and the walk must give the same schedule"
        print(f"{n:>8} {t_index:>9.2f} {t_walk:>9.2f} {t_walk / t_index:>11.1f}")
    t_index, _ = heft_seconds(instance(args.largest), walk=False)
    print(f"{args.largest:>8} {t_index:>9.2f} {'-':>9} {'-':>11}   "
          f"target {TARGET_S:g} s: ratio {t_index / TARGET_S:.2f}")


if __name__ == "__main__":
    main()
