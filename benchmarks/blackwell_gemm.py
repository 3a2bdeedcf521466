"""Block-scaled GEMMs on a B200: the share of the MXFP8 and NVFP4 tensor peaks they reach, fitted
on published kernel microbenchmarks.

    python benchmarks/blackwell_gemm.py

One parameter per format is fitted: the platform's ``gemm:mxfp8`` and ``gemm:nvfp4`` efficiency,
the share of ``tensor_gflops[format]`` a large GEMM reaches before the tile model's tile and wave
quantization (mapper/costing/tiles.py). It is the value at which the geometric mean of predicted
over measured time is 1 over the rows marked ``fit`` (the compute-bound ones: at least 512 rows),
found by bisection on the cost model itself. Rows with fewer rows (decode batches) are printed as
a check of the tile model's dependence on M, not fitted: a block-scaled GEMM issues 128-row MMAs
and is not split along K (mapper/costing/work.py, ``SCALED_MMA_ROWS``), so a GEMM of 8 to 128 token
rows costs one wave of whole 128-row tiles. A second source, not used by the fit, checks the same
regime with the TensorRT-LLM kernels that FlashInfer's ``mm_fp4`` wraps (the serving runtime's own).
Each check row is printed twice: the model's time as the cost model charges it (a kernel launch,
``launch_us``, included) and without the launch, since both benchmarks time the GPU's work with
CUDA events after the launch was queued.

Sources (B200 SXM, one GEMM timed alone, TFLOP/s as published):

* NVFP4, vLLM's CUTLASS kernel, Llama 3.1 8B's QKV shape N 6,144 x K 4,096, M 16 to 16,384
  without the activation quantization (vllm-project/vllm pull request 20578,
  ``benchmarks/kernels/bench_nvfp4_gemm.py``, column ``nvfp4-noquant``);
* NVFP4, FlashInfer ``mm_fp4``, M 1,024 x N 7,168 x K 4,608, the auto backend on CUDA 13 and
  cuDNN 9.15 (flashinfer-ai/flashinfer pull request 1979);
* NVFP4, cuBLAS through ``torch._scaled_mm``, cubes 4,096 to 8,192 (pytorch/ao pull request 2427,
  ``benchmarks/float8/bench_matmul.py --recipe nvfp4``);
* MXFP8, FlashInfer ``mm_mxfp8`` (CUTLASS, autotuned), four shapes (flashinfer-ai/flashinfer pull
  request 2464);
* check only, NVFP4 at M 1 to 16, FlashInfer ``mm_fp4`` with its TensorRT-LLM backend on SM100
  (B200), N 7,168 x K 2,048 (vllm-project/vllm pull request 42235, "FlashInfer NVFP4 GEMM
  Results", SM100 table, column TRTLLM).

The B200's 16-bit efficiency (0.753) and FP8 one (0.741) rest on other measurements
(stas00/ml-engineering's Maximum Achievable Matmul FLOPS, in platforms/dgx-b200.toml); the GB200
tray's block-scaled entries are the B200's fitted ones times the trays' 16-bit ratio, 0.708 / 0.753
(the same kernels on a higher-clocked part whose measured 16-bit share is lower). The end-to-end
checks these are not fitted to: ``python benchmarks/serving_blackwell.py`` (TensorRT-LLM v1.0,
NVFP4) and the B200/GB200 rows of ``python benchmarks/recipes.py`` (MXFP8, NVFP4 training).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mapper.core.graph import Task
from mapper.costing.latency import estimate
from mapper.frontend.load import graph_from_text
from mapper.platform.loader import Device, load_platform

VLLM = "vllm-project/vllm#20578 (CUTLASS, nvfp4-noquant)"
FI_FP4 = "flashinfer-ai/flashinfer#1979 (mm_fp4 auto, CUDA 13)"
TORCHAO = "pytorch/ao#2427 (cuBLAS torch._scaled_mm)"
FI_MX = "flashinfer-ai/flashinfer#2464 (mm_mxfp8 CUTLASS autotuned)"
FI_TRT = "vllm-project/vllm#42235 (FlashInfer mm_fp4, TRTLLM backend, SM100)"
#: (format, M, N, K, measured TFLOP/s, source)
ROWS = (
    *(("nvfp4", m, 6144, 4096, t, VLLM) for m, t in (
        (16, 71.2), (64, 282.0), (128, 549.5), (256, 1102.0), (512, 2188.0), (1024, 2895.0),
        (2048, 3411.5), (4096, 3645.6), (8192, 3778.8), (16384, 3904.3))),
    ("nvfp4", 1024, 7168, 4608, 3840.7, FI_FP4),
    *(("nvfp4", s, s, s, t, TORCHAO) for s, t in ((4096, 4460.0), (6144, 5500.0), (8192, 5370.0))),
    *(("nvfp4", m, 7168, 2048, t, FI_TRT) for m, t in ((1, 8.87), (2, 16.72), (4, 33.14), (8, 70.36),
                                                        (16, 130.30))),
    ("mxfp8", 1024, 2048, 1024, 790.0, FI_MX),
    ("mxfp8", 1024, 4096, 4096, 2014.9, FI_MX),
    ("mxfp8", 8192, 8192, 4096, 3200.9, FI_MX),
    ("mxfp8", 16384, 16384, 16384, 3099.7, FI_MX),
)
#: rows at least this tall are compute-bound and fitted on; shorter ones are a check
FIT_ROWS = 512


def gemm_task(m: int, n: int, k: int, fmt: str) -> Task:
    """``[m, k] x [k, n]`` in bf16 with its GEMM marked ``fmt`` (``--precision``)."""
    text = f"graph g {{\n input x : bf16[{m}, {k}]\n y = matmul(x, weight bf16[{k}, {n}])\n  output y\n}}\n"
    return replace(graph_from_text(text).tasks[0], precision=fmt)


def b200() -> Device:
    """The DGX B200's GPU as the platform file declares it."""
    return next(d for d in load_platform("dgx-b200").devices if d.kind == "gpu")


def with_efficiency(dev: Device, fmt: str, value: float) -> Device:
    """``dev`` with its ``gemm:fmt`` efficiency set to ``value``."""
    table = tuple((k, v) for k, v in dev.efficiency if k != f"gemm:{fmt}") + ((f"gemm:{fmt}", value),)
    return replace(dev, efficiency=table)


def ratio(dev: Device, fmt: str, m: int, n: int, k: int, tflops: float, launch: bool = True) -> float:
    """Predicted over measured time of one row on ``dev`` (without the kernel launch unless ``launch``)."""
    predicted = estimate(gemm_task(m, n, k, fmt), "gemm", dev).time - (0.0 if launch else dev.launch_us * 1e-6)
    return predicted / (2.0 * m * n * k / (tflops * 1e12))


def fit(dev: Device, fmt: str) -> float:
    """The ``gemm:fmt`` efficiency at which the fitted rows' geometric-mean ratio is 1."""
    rows = [r for r in ROWS if r[0] == fmt and r[1] >= FIT_ROWS]
    lo, hi = 0.05, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        trial = with_efficiency(dev, fmt, mid)
        g = statistics.geometric_mean([ratio(trial, fmt, m, n, k, t) for _, m, n, k, t, _ in rows])
        lo, hi = (mid, hi) if g > 1.0 else (lo, mid)
    return (lo + hi) / 2


def main() -> int:
    dev = b200()
    declared = dict(dev.efficiency)
    print("B200 block-scaled GEMMs: ratio = predicted / measured time (model with the platform's entry)")
    for fmt in ("nvfp4", "mxfp8"):
        fitted = fit(dev, fmt)
        entry = declared.get(f"gemm:{fmt}")
        print(f"\n{fmt}: fitted gemm:{fmt} = {fitted:.3f} (platform file: {entry})")
        print("      M      N      K  measured  predicted  ratio  no launch  role   source")
        fitted_ratios: list[float] = []
        checks: dict[str, list[tuple[float, float]]] = {}
        for f, m, n, k, t, src in ROWS:
            if f != fmt:
                continue
            r, bare = ratio(dev, fmt, m, n, k, t), ratio(dev, fmt, m, n, k, t, launch=False)
            role = "fit" if m >= FIT_ROWS else "check"
            if role == "fit":
                fitted_ratios.append(r)
            else:
                checks.setdefault(src, []).append((r, bare))
            print(f"  {m:5d}  {n:5d}  {k:5d}  {t:8.1f}  {t / r:9.1f}  {r:5.2f}  {bare if role == 'check' else r:9.2f}"
                  f"  {role:<5}  {src}")
        print(f"  fitted rows: geometric mean {statistics.geometric_mean(fitted_ratios):.2f}, "
              f"range {min(fitted_ratios):.2f}-{max(fitted_ratios):.2f}")
        for src, rs in checks.items():
            print(f"  checks, M < {FIT_ROWS}, {src}: range {min(r for r, _ in rs):.2f}-{max(r for r, _ in rs):.2f}, "
                  f"without the launch {min(b for _, b in rs):.2f}-{max(b for _, b in rs):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
