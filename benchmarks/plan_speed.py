"""How long ``--parallel auto`` takes to plan today's largest training runs, as whole processes.

    python benchmarks/plan_speed.py [--rows 1,2,3]

Each row runs ``mapper compile ... --train --parallel auto --json OUT -q`` as a separate
process (import, graph building, block pricing, the layout search, the plan's task graph,
its schedule and validation, the report) and prints its wall seconds, its CPU seconds, its
peak resident memory, the load average before and after (the machine is shared: a wall
time is only as good as the load beside it), the layouts scored and the layout kept. The
goal is under 120 s a row on a 2-core machine.

Rows: Llama 3.1 405B (``examples/llama.tg`` at the released config, Grattafiori et al.,
arXiv 2407.21783, Table 3; 2,048 sequences of 8,192 tokens, the 16M-token batch of
section 3.4.1) on 8,192 H100s (``dgx-h100-superpod --nodes 1024``), BF16 as it was
trained; DeepSeek-V3 (``examples/deepseek_v3.tg``; 15,360 sequences of 4,096 tokens, its
final batch, arXiv 2412.19437 section 4.2) on 2,048 GPUs in FP8 as it was trained, on H100s
(256 DGX nodes; DeepSeek used H800s) and on GB200 NVL72 racks (512 trays).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

LLAMA31_405B = ["examples/llama.tg", "--param", "LAYERS=126", "--param", "HIDDEN=16384", "--param", "HEADS=128",
                "--param", "KV_HEADS=8", "--param", "FFN=53248", "--param", "VOCAB=128256", "--param", "SEQ=8192",
                "--param", "BATCH=2048"]
DEEPSEEK_V3 = ["examples/deepseek_v3.tg", "--param", "SEQ=4096", "--param", "BATCH=15360"]
ROWS = [
    ("Llama 3.1 405B", LLAMA31_405B, "dgx-h100-superpod", "1024", "bf16"),
    ("DeepSeek-V3", DEEPSEEK_V3, "dgx-h100-superpod", "256", "fp8"),
    ("DeepSeek-V3", DEEPSEEK_V3, "gb200-nvl72", "512", "mxfp8"),
]
GOAL = 120.0


def run(model: list[str], platform: str, nodes: str, precision: str) -> dict:
    """One planning process: wall and CPU seconds, peak MiB, load before and after, the plan."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        cmd = [sys.executable, "-m", "mapper", "compile", *model, "--platform", platform, "--nodes", nodes,
               "--train", "--precision", precision, "--parallel", "auto", "--json", out, "-q"]
        before = os.getloadavg()[0]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err = proc.stderr.read().decode() if proc.stderr else ""
        row = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "mib": usage.ru_maxrss / 1024,
               "load": (before, os.getloadavg()[0])}
        if os.waitstatus_to_exitcode(status) != 0:
            return {**row, "error": err.strip()[-300:]}
        with open(out) as f:
            par = json.load(f)["parallel"]
        return {**row, "scored": par["plans_scored"], "label": par["label"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="", help="comma-separated row numbers (1-based); all by default")
    args = ap.parse_args()
    pick = {int(x) for x in args.rows.split(",") if x.strip()}
    print(f"{'#':>2} {'model':<15} {'platform':<18} {'GPUs':>6} {'wall s':>7} {'cpu s':>6} {'MiB':>6} "
          f"{'load':>9} {'scored':>7}  layout")
    for i, (name, model, platform, nodes, precision) in enumerate(ROWS, 1):
        if pick and i not in pick:
            continue
        r = run(model, platform, nodes, precision)
        gpus = int(nodes) * (4 if platform.startswith("gb200") else 8)
        load = f"{r['load'][0]:.1f}-{r['load'][1]:.1f}"
        tail = r.get("error") or r["label"]
        scored = f"{r['scored']:,}" if "scored" in r else "-"
        print(f"{i:>2} {name:<15} {platform:<18} {gpus:>6,} {r['wall']:>7.1f} {r['cpu']:>6.1f} {r['mib']:>6.0f} "
              f"{load:>9} {scored:>7}  {tail}" + ("" if r["wall"] <= GOAL else f"  (over {GOAL:.0f} s)"), flush=True)


if __name__ == "__main__":
    main()
