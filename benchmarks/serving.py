"""In-flight batching against TensorRT-LLM's published offline throughput (``mapper serve``).

    python benchmarks/serving.py [--quick | --speed]

Source: NVIDIA/TensorRT-LLM, docs/source/performance/perf-overview.md at release v0.17 ("All data in
the table below was generated using version 0.17"): ``trtllm-bench throughput`` fed every request at
once (``--rate inf``), fixed input/output lengths, total output tokens per second. Llama 3.1 8B at
TP1 and Llama 3.1 70B at TP 1, 2, 4 and 8, on H100 and H200 in FP8 and on A100-SXM4-80GB in FP16.

Each row is simulated as

    mapper serve examples/llama.tg [70B params] --platform dgx-a100 --workload isl=I,osl=O,requests=R
        --rate inf --parallel tensor=T,pipeline=1,replicas=1 --runtime trtllm --kv-fraction 0.95

with the request counts of the doc (its ``$num_requests`` table) and its KV-cache fraction ("In
majority of cases, we also use a higher KV cache percentage by setting
``--kv_cache_free_gpu_mem_fraction 0.95``"); the engine limits are ``trtllm-build``'s defaults
(max batch 2,048, max tokens 8,192), not the bench's per-dataset heuristics. The H100 and H200
rows add ``--precision fp8 --kv-precision fp8`` on ``dgx-h100`` and ``dgx-h200`` (the doc: FP8
quantisation sets an FP8 KV cache). Nothing is fitted to these rows. ``--quick`` caps each row at
1,000 requests (fewer steps in the steady state).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mapper.errors import InfeasibleError  # noqa: E402
from mapper.frontend.sources import ModelFile  # noqa: E402
from mapper.serving.disagg import DisaggPlan, Pool, run_disaggregated  # noqa: E402
from mapper.serving.metrics import Slo  # noqa: E402
from mapper.serving.runtimes import RUNTIMES  # noqa: E402
from mapper.serving.serve import server_for  # noqa: E402
from mapper.serving.workload import Arrival, arrivals  # noqa: E402

LLAMA = str(ROOT / "examples" / "llama.tg")
SOURCE = "NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md, v0.17"
#: Llama 3.1 (Grattafiori et al., arXiv 2407.21783, Table 3): examples/llama.tg's defaults are 8B.
MODELS = {"8B": (), "70B": (("LAYERS", 80), ("HIDDEN", 8192), ("HEADS", 64), ("KV_HEADS", 8), ("FFN", 28672))}
#: (input, output) -> the doc's $num_requests
REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (2048, 128): 3000, (2048, 2048): 1500,
            (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000}
PAIRS = ((128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (2048, 128), (2048, 2048),
         (5000, 500), (20000, 2000))


def _col(*values: float | None) -> tuple[tuple[tuple[int, int], float], ...]:
    return tuple((p, v) for p, v in zip(PAIRS, values) if v is not None)


#: (model, tensor, GPU, precision) -> published output tokens/s per (input, output)
PUBLISHED = {
    ("8B", 1, "A100", "FP16"): _col(6627.27, 5255.99, 3453.79, 4276.58, 3786.83, 799.61, 2424.16, 825.13, 330.04),
    ("70B", 2, "A100", "FP16"): _col(1313.96, 531.26, None, 439.41, 472.94, 148.96, 261.1, 121.47, None),
    ("70B", 4, "A100", "FP16"): _col(2733.48, 2811.27, 1976.49, 2275.79, 1921.77, 325.15, 1393.64, 392.62, 212.08),
    ("70B", 8, "A100", "FP16"): _col(4717.62, 5241.5, 3724.67, 4445.37, 3320.41, 542.38, 2553.71, 696.34, 413.38),
    ("8B", 1, "H100", "FP8"): _col(28836.77, 21109.38, 13593.65, 16500.69, 15244.78, 3556.73, 9488.42, 3559.36,
                                   1401.31),
    ("70B", 1, "H100", "FP8"): _col(3378.03, 911.62, 426.32, 775.57, 839.97, 343.29, None, 245.34, None),
    ("70B", 2, "H100", "FP8"): _col(6645.12, 6169.58, 3897.06, 4972.57, 4390.53, 772.66, 2898.16, 919.73, 443.01),
    ("70B", 4, "H100", "FP8"): _col(11127.53, 11511.93, 7439.41, 9836.7, 7430.99, 1302.6, 5480.03, 1602.78, 920.19),
    ("70B", 8, "H100", "FP8"): _col(14730.69, 17061.82, 14171.43, 14679.33, 11451.16, 1923.41, 8801.95, 2457.42,
                                    1512.6),
    ("8B", 1, "H200", "FP8"): _col(29526.04, 25398.86, 17370.8, 21020.81, 17537.96, 3794.14, 11968.5, 3987.79,
                                   1804.1),
    ("70B", 1, "H200", "FP8"): _col(4020.75, 4165.68, 2651.75, 3018.39, 2823.45, 465.99, 1913.8, 560.16, 279.52),
    ("70B", 2, "H200", "FP8"): _col(6823.01, 8290.35, 6526.67, 6848.02, 5164.76, 809, 4183.88, 1025.38, 640.62),
    ("70B", 4, "H200", "FP8"): _col(11098.63, 14156, 10574.06, 12452.79, 8911.29, 1358.06, 7130.44, 1811.55,
                                    1199.68),
    ("70B", 8, "H200", "FP8"): _col(15355.84, 21195.88, 16941.52, 17278.4, 13181.24, 1983.03, 11142.47, 2717.83,
                                    1920.45),
}
#: GPU -> a shipped platform with it, for the precisions it has rates for
PLATFORMS = {("A100", "FP16"): "dgx-a100", ("H100", "FP8"): "dgx-h100", ("H200", "FP8"): "dgx-h200"}
KV_FRACTION = 0.95


def speed() -> None:
    """A 1,000-request trace on 8 GPUs: one plan, then ``--parallel auto`` (seconds depend on the load)."""
    rng = random.Random(1)
    reqs = [Arrival(None, rng.randint(50, 3000), rng.randint(20, 1500)) for _ in range(1000)]
    reqs = arrivals(reqs, 20.0, 0)
    slo = Slo(0.5, 0.05, 99.0)
    t0 = time.perf_counter()
    server = server_for(LLAMA, "dgx-h100", RUNTIMES["trtllm"])
    out = server.run(server.plan({"tensor": 2, "pipeline": 2}), reqs, slo)
    t1 = time.perf_counter()
    best, tried = server.auto({}, reqs, slo)
    t2 = time.perf_counter()
    print("1,000 requests (prompts 50-3,000, outputs 20-1,500, Poisson 20/s) on dgx-h100, Llama 3.1 8B:")
    print(f"  tensor 2 x pipeline 2, 2 replicas: {t1 - t0:.1f} s (pricing included), "
          f"{out.metrics['output_tokens_per_s']:,.0f} output tokens/s")
    print(f"  --parallel auto: {tried} plans in {t2 - t1:.1f} s, chose {best.plan.label()}")
    balanced = server_for(LLAMA, "dgx-h100", replace(RUNTIMES["trtllm"], dispatch="least-loaded"))
    t3 = time.perf_counter()
    least = balanced.run(balanced.plan({"tensor": 2, "pipeline": 2}), reqs, slo)
    t4 = time.perf_counter()
    print(f"  the same plan, --dispatch least-loaded: {t4 - t3:.1f} s (pricing included), "
          f"{least.metrics['output_tokens_per_s']:,.0f} output tokens/s, TTFT p99 "
          f"{least.metrics['ttft']['p99']:.2f} s (round-robin {out.metrics['ttft']['p99']:.2f} s)")  # type: ignore[index]
    plan = DisaggPlan(Pool(2, 1, 2), Pool(2, 1, 2), RUNTIMES["trtllm"].chunk, RUNTIMES["trtllm"].max_batch)
    for name, srv in (("round-robin", server), ("least-loaded", balanced)):
        t5 = time.perf_counter()
        got = run_disaggregated(srv, plan, reqs, slo)
        t6 = time.perf_counter()
        m = got.metrics
        print(f"  --disaggregate {plan.label()}, --dispatch {name}: {t6 - t5:.1f} s, "
              f"{m['output_tokens_per_s']:,.0f} output tokens/s, TTFT p99 {m['ttft']['p99']:.3f} s, "  # type: ignore[index]
              f"TPOT p99 {m['tpot']['p99'] * 1e3:.1f} ms, e2e p99 {m['e2e']['p99']:.2f} s, "  # type: ignore[index]
              f"goodput {m['goodput']:.2f} requests/s")
    print(f"  load average {os.getloadavg()[0]:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="at most 1,000 requests a row")
    ap.add_argument("--speed", action="store_true", help="time a 1,000-request trace on 8 GPUs and the auto search")
    args = ap.parse_args()
    if args.speed:
        speed()
        return 0
    runtime = RUNTIMES["trtllm"]

    runtime = replace(runtime, kv_fraction=KV_FRACTION)
    ratios: list[float] = []
    skipped = 0
    start = time.perf_counter()
    print(f"{SOURCE}: output tokens/s, trtllm runtime, --kv-fraction {KV_FRACTION}, --rate inf")
    servers: dict[tuple[str, str], object] = {}
    for (model, tensor, gpu, precision), cells in PUBLISHED.items():
        platform = PLATFORMS.get((gpu, precision))
        if platform is None:
            skipped += len(cells)
            print(f"\nLlama 3.1 {model} TP{tensor} {gpu} {precision}: {len(cells)} rows not priced (no shipped "
                  f"platform with a {gpu})")
            continue
        key = (model, platform)  # one precision per platform here
        if key not in servers:
            fmt = precision.lower()
            servers[key] = server_for(ModelFile(LLAMA, params=MODELS[model]), platform, runtime, "auto", fmt, fmt)
        server = servers[key]
        params = "".join(f" --param {k}={v}" for k, v in MODELS[model])
        print(f"\nLlama 3.1 {model} TP{tensor} {gpu} {precision}: mapper serve examples/llama.tg{params} --platform "
              f"{platform} --workload isl=I,osl=O,requests=R --rate inf --parallel tensor={tensor},pipeline=1,"
              f"replicas=1 --kv-fraction {KV_FRACTION} --precision {precision.lower()} --kv-precision "
              f"{precision.lower()}")
        print(f"  {'ISL/OSL':>11} {'requests':>8} {'published':>10} {'predicted':>10} {'ratio':>6} "
              f"{'kv tokens':>10} {'concurrent':>10}")
        for (isl, osl), published in cells:
            n = REQUESTS[(isl, osl)]
            if args.quick:
                n = min(n, 1000)
            reqs = arrivals([Arrival(None, isl, osl)] * n, float("inf"), 0)
            plan = server.plan({"tensor": tensor, "pipeline": 1, "replicas": 1})  # type: ignore[attr-defined]
            try:
                out = server.run(plan, reqs, Slo())  # type: ignore[attr-defined]
            except InfeasibleError as err:
                print(f"  {isl:>5}/{osl:<5} {n:>8,} {published:>10,.0f} {'-':>10} {'-':>6}  ({err})")
                continue
            got = out.metrics["output_tokens_per_s"]
            ratio = got / published
            ratios.append(ratio)
            print(f"  {isl:>5}/{osl:<5} {n:>8,} {published:>10,.0f} {got:>10,.0f} {ratio:>6.2f} "
                  f"{out.metrics['kv_capacity_tokens']:>10,} {out.metrics['max_concurrency']:>10,}")
    if ratios:
        within = sum(1 for r in ratios if 0.8 <= r <= 1.25)
        outside = sum(1 for r in ratios if not 0.67 <= r <= 1.5)
        geo = statistics.geometric_mean(ratios)
        print(f"\n{len(ratios)} rows priced ({skipped} rows without a platform): {within} within 0.8-1.25x "
              f"({100 * within / len(ratios):.0f} %), {outside} outside 0.67-1.5x; geometric mean ratio {geo:.2f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}")
    print(f"simulated in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
