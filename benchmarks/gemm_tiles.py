"""GEMM times from tiles, waves and bandwidth (mapper/costing/tiles.py) against published timings.

    python benchmarks/gemm_tiles.py

One parameter is fitted per format: the share of the tensor-core peak GEMMs reach. 16-bit:
0.78 (mapper/costing/efficiency.py), from cuBLAS at 4096^3 on an A100 (238.8 of 312 TFLOP/s,
DefTruth/CUDA-Learn-Notes hgemm table) and an H100 (783 of 989, XLA's measured matmul table);
FP8: 0.78 times the ratio of the FP8 to the BF16 Maximum Achievable Matmul FLOPS measured on the
same GPU over the peaks' ratio of 2 (stas00/ml-engineering; the platforms' ``gemm:fp8``
efficiency). The rows they come from are printed first (``fitted``). Everything else is a check
on sources nothing was fitted to:

* LLMCompass's real-hardware GEMMs on an A100-80GB (Zhang et al., ISCA 2024;
  PrincetonUniversity/LLMCompass ae/figure5/ab/real_hardware/matmul_A100.csv): FP16,
  ``M x 12,288`` times ``12,288 x 12,288`` for ``M`` 64 to 32,768 (decode batches, prefill
  chunks and whole prompts against a GPT-3 175B weight), and ``8,192 x K`` times ``K x K``
  for ``K`` 64 to 32,768, each timed alone from PyTorch;
* the 16-bit Maximum Achievable Matmul FLOPS of an A100 and an H100 at their best shapes
  (stas00/ml-engineering compute/accelerator/README.md).

Each GEMM is one task on the platform's first GPU, priced by the cost model alone (its launch
included). LLMCompass timed each GEMM alone from eager PyTorch, so a call also costs at least
the framework's dispatch (``EAGER_DISPATCH_US``, the eager runtime's per-call floor, fitted on
another source, benchmarks/inference.py): the table prints the kernel and the call. The model
before the tile model (the roofline blend of docs/cost_model.md over the whole call) priced
M = 64 to 1,024 at 1.26, 1.41, 1.38, 1.28 and 1.24 times the measured.

Predictions do not depend on the machine's load.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mapper.costing.latency import estimate
from mapper.costing.tiles import tile_time
from mapper.costing.work import gemm_dims
from mapper.frontend.load import graph_from_text
from mapper.platform.loader import load_platform
from mapper.serving.request import EAGER_DISPATCH_US

LLMCOMPASS = "LLMCompass (ISCA 2024) ae/figure5/ab/real_hardware/matmul_A100.csv, A100-80GB, FP16"
MAMF = "stas00/ml-engineering compute/accelerator/README.md, Maximum Achievable Matmul FLOPS"
#: (M, N, K, measured ms): LLMCompass's rows
ROWS = ((64, 12288, 12288, 0.1900), (128, 12288, 12288, 0.2003), (256, 12288, 12288, 0.3185),
        (512, 12288, 12288, 0.6118), (1024, 12288, 12288, 1.1990), (2048, 12288, 12288, 2.3586),
        (4096, 12288, 12288, 4.4576), (8192, 12288, 12288, 8.6216), (16384, 12288, 12288, 17.0307),
        (32768, 12288, 12288, 35.4407), (8192, 64, 64, 0.0296), (8192, 128, 128, 0.0310),
        (8192, 256, 256, 0.0356), (8192, 512, 512, 0.0471), (8192, 1024, 1024, 0.0927),
        (8192, 2048, 2048, 0.2818), (8192, 4096, 4096, 1.0210), (8192, 8192, 8192, 3.9614),
        (8192, 16384, 16384, 15.0087), (8192, 32768, 32768, 61.1346))
#: (what, platform, M, N, K, dtype, format, measured TFLOP/s, source, fitted)
RATES = (("cuBLAS 4096^3", "dgx-a100", 4096, 4096, 4096, "f16", "", 238.8, "DefTruth/CUDA-Learn-Notes hgemm", True),
         ("cuBLAS 4096^3", "dgx-h100", 4096, 4096, 4096, "bf16", "", 783.0, "XLA matmul_interpolator_data.h", True),
         ("MAMF BF16", "dgx-h100", 2048, 2048, 13312, "bf16", "", 794.5, MAMF, True),
         ("MAMF FP8", "dgx-h100", 1024, 9216, 14336, "bf16", "fp8", 1402.6, MAMF, True),
         ("MAMF FP8", "dgx-h200", 1280, 4096, 12032, "bf16", "fp8", 1453.4, MAMF, True),
         ("MAMF BF16", "dgx-a100", 1024, 10240, 5120, "bf16", "", 271.2, MAMF, False))


def gemm(platform: str, m: int, n: int, k: int, dtype: str = "f16", fmt: str = ""):
    """(estimate, tile plan) of ``[m, k] x [k, n]`` on the platform's first GPU."""
    gpu = next(d for d in load_platform(platform).devices if d.kind == "gpu")
    task = graph_from_text(f"graph g {{\n input x : {dtype}[{m}, {k}]\n y = matmul(x, weight {dtype}[{k}, {n}])\n"
                           "  output y\n}\n").tasks[0]
    if fmt:
        task = replace(task, precision=fmt)
    return estimate(task, "gemm", gpu), tile_time(task, gemm_dims(task) or (1, m, n, k), gpu, 1.0)


def main() -> None:
    print("achievable rates (TFLOP/s; ratio = predicted time / measured): the rows fitted on, then a check")
    for what, plat, m, n, k, dtype, fmt, tflops, source, fitted in RATES:
        est, _ = gemm(plat, m, n, k, dtype, fmt)
        got = 2 * m * n * k / est.time / 1e12
        tag = "fitted " if fitted else "checked"
        print(f"  {tag} {what:<14} {plat:<9} {m}x{n}x{k} {fmt or dtype:<5} measured {tflops:7.1f}  "
              f"predicted {got:7.1f}  ratio {tflops / got:.2f}  ({source})")
    print(f"\nchecked: {LLMCOMPASS} (ms; ratio = predicted / measured)")
    print("      M      N      K  measured    kernel  ratio  eager call  ratio  tile    waves  bound")
    mid, calls = [], []
    floor = EAGER_DISPATCH_US * 1e-3
    for m, n, k, ms in ROWS:
        est, plan = gemm("dgx-a100", m, n, k)
        kernel = est.time * 1e3
        call = max(kernel, floor)
        if n == 12288 and m <= 1024:
            mid.append(kernel / ms)
        calls.append(call / ms)
        tile = f"{plan.tile[0]}x{plan.tile[1]}" + (f"/{plan.split}" if plan.split > 1 else "")
        print(f"  {m:5d}  {n:5d}  {k:5d}  {ms:8.4f}  {kernel:8.4f}  {kernel / ms:5.2f}  {call:10.4f}  {call / ms:5.2f}"
              f"  {tile:<7} {plan.waves:5d}  {est.bound}")
    within = sum(0.8 <= r <= 1.25 for r in calls)
    print(f"\nM 64-1,024 against 12,288 x 12,288: kernel ratios {min(mid):.2f}-{max(mid):.2f}")
    print(f"all {len(calls)} rows as eager calls: {within} within 0.8-1.25x, geometric mean "
          f"{statistics.geometric_mean(calls):.2f}, range {min(calls):.2f}-{max(calls):.2f}")


if __name__ == "__main__":
    main()
