"""Prediction accuracy of the CPU cost model on this machine.

Calibrates the CPU (``mapper calibrate``), runs each example all on the CPU
with the Numba kernels and prints the distribution of the relative
prediction error ``(predicted - measured) / measured`` over CPU tasks longer
than 1 ms, per example and per op class, where ``measured`` is a task's
median over timed passes of its whole graph (``mapper.run.execute.Execution``)
and ``predicted`` the calibrated model's time for the task. Target: within
15 % of the measured medians.

By default the measurements are interleaved: one timed pass of every
example runs after each round of the calibration's rate measurements and
after each pass of its probes, so that the calibration and the examples see
the machine at the same times (this shared machine's speed moves by 20-30 %
from one second to the next and between runs a minute apart; side by side
is the only fair comparison). ``--sequential`` calibrates first and then
runs the examples (``--repeats`` passes each), as a user does with ``mapper
calibrate`` and then ``mapper run``; ``--platform FILE`` skips the
calibration.

The calibrated platform carries per-op efficiencies and fixed times per call
fitted on a small grid of probe tasks per class (not on the examples'
shapes); the script also prints the error the same platform gives without
them (the cost model's default efficiencies, no fixed times), and a floor
set by the measurements themselves: each task that has twins in its example
(the same op on the same shapes) predicted by the median of its twins'
measured medians, beside the model's error on the same tasks.

Sizes (smaller than the examples' own where a full run takes too long on a
2-core machine; every size is printed): see :data:`SIZES`.

Usage: python benchmarks/prediction.py [--repeats 5] [--quick-calibration | --platform FILE | --sequential]
       [--threads N] [--only NAME ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from mapper.costing.cost import build_cost_table
from mapper.costing.efficiency import op_class
from mapper.frontend.load import graph_from_text
from mapper.pipeline import compile_graph
from mapper.platform.loader import load_platform
from mapper.run.calibrate import calibrate
from mapper.run.calibration.records import Settings
from mapper.run.calibration.writer import calibrated_platform, platform_toml
from mapper.run.execute import Execution, one_compute_pool
from mapper.run.heap import steady_heap
from mapper.run.trace import ERROR_MIN_SECONDS

#: Thread-pool sizes set by ``--threads``.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

#: Example -> replacement of its first ``param`` line (None: the example's own sizes).
SIZES: dict[str, str | None] = {
    "resnet50": None,  # batch 1, 3x224x224
    "bert_base": "param B = 1, S = 128, H = 768, A = 12, F = 3072, L = 2, V = 30522",
    "gpt2_block": None,  # S = 1024, d = 768
    "jacobi2d": "param N = 1024, K = 10, R = 2",
    "cg": "param n = 512, N = n*n",
    "fft_conv": "param B = 16, L = 16384",
}


def source(name: str) -> str:
    text = (EXAMPLES / f"{name}.tg").read_text()
    if SIZES[name] is None:
        return text
    return re.sub(r"^param .*$", SIZES[name], text, count=1, flags=re.M)


def params(name: str) -> str:
    m = re.search(r"^param .*$", source(name), flags=re.M)
    return m.group(0) if m else "(no params)"


def dist(errs: list[float]) -> str:
    if not errs:
        return "no tasks"
    a = sorted(abs(e) for e in errs)
    n = len(a)
    p90 = a[max(-(-9 * n // 10) - 1, 0)]
    within = sum(e <= 0.15 for e in a)
    return (f"n={n:3d}  median {statistics.median(a) * 100:6.1f}%  p90 {p90 * 100:6.1f}%  "
            f"max {a[-1] * 100:7.1f}%  bias {statistics.median(errs) * 100:+6.1f}%  within 15%: {within}/{n}")


def signature(task) -> str:
    """What makes two tasks the same work: op, attributes, operand kinds, shapes and dtypes."""
    operands = ", ".join(f"{o.kind} {o.type.dtype}{list(o.type.shape)}" for o in task.operands)
    return f"{task.op}({operands}) {sorted(task.attrs)}"


def twin_floor(rows: list[dict]) -> list[tuple[float, float]]:
    """``(twins' error, model's error)`` for each task that has twins among
    ``rows``: the error of predicting its measured median by the median of
    its twins' (leave one out), beside the model's error on it. Identical
    tasks differ only by where they run in the graph (what was in the cache,
    what the machine was doing), so the first is a floor for a model that
    gives identical tasks one time."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["twin"], []).append(r)
    out = []
    for group in groups.values():
        for r in group if len(group) > 1 else ():
            others = statistics.median(x["measured"] for x in group if x is not r)
            out.append((others / r["measured"] - 1.0, r["error"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5,
                    help="timed passes per example with --platform or --sequential (interleaved: one per "
                         "calibration round and probe pass)")
    ap.add_argument("--quick-calibration", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, choices=sorted(SIZES))
    ap.add_argument("--platform", help="use this platform file instead of calibrating")
    ap.add_argument("--sequential", action="store_true",
                    help="calibrate first, then run the examples (not interleaved)")
    ap.add_argument("--threads", type=int, help="run with this many threads in every pool (OpenMP, "
                    "OpenBLAS, MKL, Numba): restarts the script with those variables set")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    if args.threads and os.environ.get("NUMBA_NUM_THREADS") != str(args.threads):
        os.environ.update({k: str(args.threads) for k in THREAD_VARS})  # pools read them at load time
        os.execv(sys.executable, [sys.executable, __file__, *(sys.argv[1:] if argv is None else argv)])

    with steady_heap():  # the executor's and the calibration's heap policy, across the interleaving
        return run(args)


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; "
          f"threads per pool: {os.environ.get('NUMBA_NUM_THREADS', 'default')}")
    with one_compute_pool() as blas:
        print("BLAS pool during calibration and runs: "
              + ("not controlled (no threadpoolctl)" if blas is None else f"{blas} thread(s)"))
    names = args.only or list(SIZES)
    graphs = {name: graph_from_text(source(name), f"{name}.tg") for name in names}
    interleaved = not (args.platform or args.sequential)
    runs: dict[str, Execution] = {}
    if interleaved:
        # every example mapped on the shipped dev-vm platform (one CPU: the schedule is a
        # topological order); the calibrated model prices the same tasks afterwards
        host = load_platform("dev-vm")
        for name, graph in graphs.items():
            runs[name] = Execution(compile_graph(graph, host, mapper="heft").result, check=False)
            runs[name].warm_up()

    def one_pass() -> None:
        for run in runs.values():
            run.timed_pass()

    if args.platform:
        plat = load_platform(args.platform)
        calibration = Path(args.platform).read_text()
        print(f"platform {plat.name} from {args.platform} (no calibration run)")
    else:
        settings = Settings.quick() if args.quick_calibration else Settings()
        if interleaved:
            settings = replace(settings, rounds=max(settings.rounds, 5), probe_passes=21)
            print("interleaved: one timed pass of every example after each calibration round and probe pass")
        cal = calibrate(settings, log=lambda s: print("  calibrate:", s, flush=True),
                        between=one_pass if interleaved else None)
        plat = calibrated_platform(cal)
        calibration = platform_toml(cal)
        print(f"calibration took {cal.seconds:.1f} s; platform file:\n")
        print(calibration)
    plain = replace(plat, devices=tuple(
        replace(d, efficiency=(), overhead_us=(), overhead_us_per_mib=(), half_length=()) for d in plat.devices))

    rows: list[dict] = []
    for name, graph in graphs.items():
        t1 = time.perf_counter()
        if not interleaved:
            runs[name] = Execution(compile_graph(graph, plat, mapper="heft").result, check=False)
            for _ in range(args.repeats):
                runs[name].timed_pass()
        trace = runs[name].trace()
        model = build_cost_table(graph, plat)
        default = build_cost_table(graph, plain)
        recs = []
        for r in trace.records:
            pred = model.time[r.task][0]
            err = (pred - r.measured) / r.measured if r.measured else None
            recs.append((r, pred, err))
        long = [(r, p, e) for r, p, e in recs if r.measured is not None and r.measured > ERROR_MIN_SECONDS]
        print(f"{name:10s} [{params(name)}] {len(trace.records)} tasks, {len(long)} > 1 ms, "
              f"{trace.repeats} timed passes" + ("" if interleaved else f", run {time.perf_counter() - t1:.1f} s"))
        print(f"           predicted sum {sum(p for _, p, _ in recs) * 1e3:9.2f} ms, "
              f"measured sum {sum(r.measured or 0 for r, _, _ in recs) * 1e3:9.2f} ms")
        print(f"           {dist([e for _, _, e in long])}")
        print(f"   vs best {dist([(p - r.best) / r.best for r, p, _ in long])}")
        for r, pred, err in recs:
            rows.append({"example": name, "task": r.name, "op": r.op, "class": op_class(r.op),
                         "bound": model.bound[r.task][0], "predicted": pred, "measured": r.measured, "error": err,
                         "best": r.best, "default": default.time[r.task][0],
                         "twin": f"{name}: {signature(graph.tasks[r.task])}"})

    long_rows = [r for r in rows if r["measured"] and r["measured"] > ERROR_MIN_SECONDS]
    print("\nper op class (CPU tasks > 1 ms):")
    for cls in sorted({r["class"] for r in long_rows}):
        errs = [r["error"] for r in long_rows if r["class"] == cls]
        print(f"  {cls:11s} {dist(errs)}")
    all_errs = [r["error"] for r in long_rows]
    print(f"\nALL        {dist(all_errs)}")
    print(f"vs best    {dist([(r['predicted'] - r['best']) / r['best'] for r in long_rows])}"
          "   <- against the fastest timed call instead of the median")
    print(f"defaults   {dist([(r['default'] - r['measured']) / r['measured'] for r in long_rows])}"
          "   <- the same platform without its per-class efficiencies and fixed times")
    floor = twin_floor(long_rows)
    if floor:
        print(f"\ntwins      {dist([e for e, _ in floor])}   <- each task with twins (the same op on the same "
              "shapes in its example) predicted by their median: a floor for any model")
        print(f"model      {dist([e for _, e in floor])}   <- the model on the same tasks")
    print(f"\ntotal {time.perf_counter() - t0:.1f} s; load average at end: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({"calibration": calibration, "tasks": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
