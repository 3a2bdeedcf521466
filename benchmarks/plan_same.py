"""Two versions of ``--parallel auto`` side by side: the same plans, byte for byte, and how long each takes.

    python benchmarks/plan_same.py --before TREE [--repeats 3] [--rows 1,2,3] [--small-only]

``TREE`` is a source tree of the other version (e.g. ``git archive <commit> | tar -x -C TREE``),
run with its ``mapper`` package first on the import path (``python -P``, so that the working
directory, this checkout, does not come first); the other side is this checkout. Each
case runs ``mapper compile ... --train --parallel auto --json OUT -q`` once per version and
repeat, the versions alternating (before, after, before, after, ...) so that both see the same
load, and its JSON reports must be byte-identical: a speed-up may change no choice and no
number. One count is let differ: the windows that the plan graph's mapping (its LNS, bounded by
a deadline in wall seconds, ``mapper/mapping/lns.py``) got through, which varies from run to run
of the same version under load. The planning rows of ``benchmarks/plan_speed.py`` are timed
(wall and CPU seconds, the median of the repeats, the load average beside them); a few small
models (dense with context parallelism, mixture-of-experts, MLA, a GPT on NVL72 trays) are
compared and timed once.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from plan_speed import ROWS

SMALL = [
    ("small Llama, long context", ["examples/llama.tg", "--param", "LAYERS=2", "--param", "HIDDEN=256", "--param",
                                   "HEADS=8", "--param", "KV_HEADS=2", "--param", "FFN=512", "--param", "VOCAB=1000",
                                   "--param", "SEQ=16384", "--param", "BATCH=2"], "dgx-h100-superpod", "2", "bf16"),
    ("small MoE", ["examples/moe.tg", "--param", "LAYERS=4", "--param", "HIDDEN=512", "--param", "HEADS=8",
                   "--param", "KV_HEADS=2", "--param", "HEAD_DIM=64", "--param", "EXPERTS=16", "--param", "TOPK=2",
                   "--param", "EXPERT_FFN=256", "--param", "VOCAB=4096", "--param", "SEQ=4096", "--param",
                   "BATCH=64"], "dgx-h100-superpod", "4", "fp8"),
    ("small DeepSeek", ["examples/deepseek_v3.tg", "--param", "LAYERS=5", "--param", "DENSE_LAYERS=1", "--param",
                        "HIDDEN=1024", "--param", "HEADS=32", "--param", "EXPERTS=32", "--param", "EXPERT_FFN=256",
                        "--param", "FFN=2048", "--param", "VOCAB=8192", "--param", "SEQ=2048", "--param",
                        "BATCH=128"], "gb200-nvl72", "8", "mxfp8"),
    ("GPT 1.3B", ["examples/gpt.tg", "--param", "BATCH=256"], "gb200-nvl72", "4", "bf16"),
]

#: The one count of a report that wall time decides (module docstring).
WINDOWS = re.compile(rb"(LNS on the full graph:) \d+ windows")


def run(tree: str | None, model: list[str], platform: str, nodes: str, precision: str,
        out: str) -> tuple[float, float, bytes, str]:
    """One planning process of the version in ``tree`` (None: this checkout): wall and CPU seconds,
    its JSON report, and its error output when it failed."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.path.abspath(tree) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-P", "-m", "mapper", "compile", *model, "--platform", platform, "--nodes", nodes, "--train",
           "--precision", precision, "--parallel", "auto", "--json", out, "-q"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        return wall, usage.ru_utime + usage.ru_stime, b"", err.strip()[-300:] or "failed"
    with open(out, "rb") as f:
        return wall, usage.ru_utime + usage.ru_stime, WINDOWS.sub(rb"\1 N windows", f.read()), ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="source tree of the version to compare with")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each version per timed row (default 3)")
    ap.add_argument("--rows", default="", help="plan_speed rows to time, comma-separated, 1-based; all by default")
    ap.add_argument("--small-only", action="store_true", help="compare the small models only")
    args = ap.parse_args()
    pick = {int(x) for x in args.rows.split(",") if x.strip()}
    cases = [(name, m, pl, n, pr, 1) for name, m, pl, n, pr in SMALL]
    if not args.small_only:
        cases += [(name, m, pl, n, pr, args.repeats) for i, (name, m, pl, n, pr) in enumerate(ROWS, 1)
                  if not pick or i in pick]
    print(f"{'case':<27} {'platform':<18} {'before wall/cpu s':>18} {'after wall/cpu s':>17} {'cpu x':>6} "
          f"{'load':>9}  JSON")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, platform, nodes, precision, repeats in cases:
            times: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
            seen: dict[str, set[bytes]] = {"before": set(), "after": set()}
            errors = []
            loads = [os.getloadavg()[0]]
            for _ in range(repeats):
                for side, tree in (("before", args.before), ("after", None)):
                    wall, cpu, text, err = run(tree, model, platform, nodes, precision, os.path.join(tmp, "p.json"))
                    times[side].append((wall, cpu))
                    seen[side].add(text)
                    errors += [f"{side}: {err}"] if err else []
            loads.append(os.getloadavg()[0])
            same = not errors and len(seen["before"]) == 1 and seen["before"] == seen["after"]
            bad += not same
            med = {s: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                   for s, v in times.items()}
            ratio = med["before"][1] / med["after"][1] if med["after"][1] else 0.0
            print(f"{name:<27} {platform:<18} {med['before'][0]:>8.1f}/{med['before'][1]:<9.1f} "
                  f"{med['after'][0]:>7.1f}/{med['after'][1]:<9.1f} {ratio:>5.2f}x {loads[0]:>4.1f}-{loads[1]:<4.1f} "
                  f"{'identical' if same else 'DIFFERENT'}" + (f"  ({errors[0]})" if errors else ""), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
