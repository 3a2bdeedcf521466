"""The Blackwell platforms' block-scaled GEMM rates (``gemm:mxfp8``, ``gemm:nvfp4``) against the
kernel microbenchmarks benchmarks/blackwell_gemm.py fits them on."""

from __future__ import annotations

import runpy
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from mapper.costing.latency import estimate
from mapper.frontend.load import graph_from_text
from mapper.platform.loader import load_platform

BENCH = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "blackwell_gemm.py"))
#: the per-format shares of the tensor peak the platform files declare (pinned)
B200 = {"gemm": 0.753, "gemm:fp8": 0.741, "gemm:mxfp8": 0.744, "gemm:nvfp4": 0.550}
GB200 = {"gemm": 0.708, "gemm:fp8": 0.702, "gemm:mxfp8": 0.700, "gemm:nvfp4": 0.517}


def _gpu(platform: str):
    return next(d for d in load_platform(platform).devices if d.name == "gpu0")


@pytest.mark.parametrize(("platform", "pinned"), [("dgx-b200", B200), ("gb200-tray", GB200)])
def test_gemm_rates_per_format_are_pinned(platform, pinned):
    eff = dict(_gpu(platform).efficiency)
    for key, value in pinned.items():
        assert eff[key] == pytest.approx(value), key


@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4"])
def test_b200_block_scaled_rates_are_the_microbenchmark_fit(fmt):
    """The B200's entry is the benchmark's fit (geometric-mean ratio 1 over the compute-bound rows),
    and every fitted row is then within 0.75-1.33x of its measured time."""
    gpu = BENCH["b200"]()
    fitted = BENCH["fit"](gpu, fmt)
    assert B200[f"gemm:{fmt}"] == pytest.approx(fitted, abs=6e-4)
    ratios = [BENCH["ratio"](gpu, fmt, m, n, k, t) for f, m, n, k, t, _ in BENCH["ROWS"]
              if f == fmt and m >= BENCH["FIT_ROWS"]]
    assert statistics.geometric_mean(ratios) == pytest.approx(1.0, abs=0.01)
    assert all(0.75 <= r <= 1.33 for r in ratios), ratios


@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4"])
def test_gb200_block_scaled_rates_scale_the_b200_fit_by_the_16_bit_ratio(fmt):
    assert GB200[f"gemm:{fmt}"] == pytest.approx(B200[f"gemm:{fmt}"] * GB200["gemm"] / B200["gemm"], abs=6e-4)


def _tflops(platform: str, fmt: str, size: int = 8192) -> float:
    text = (f"graph g {{\n input x : bf16[{size}, {size}]\n y = matmul(x, weight bf16[{size}, {size}])\n"
            "  output y\n}\n")
    task = graph_from_text(text).tasks[0]
    if fmt:
        task = replace(task, precision=fmt)
    return 2.0 * size ** 3 / estimate(task, "gemm", _gpu(platform)).time / 1e12


@pytest.mark.parametrize("platform", ["dgx-b200", "gb200-tray"])
def test_large_gemm_rates_order_by_format_below_the_peak_ratios(platform):
    """NVFP4 beats MXFP8 beats BF16 on a large GEMM, but by less than the peaks' 2x steps: the
    block-scaled FP4 kernels reach a smaller share of their peak."""
    bf16, mxfp8, nvfp4 = (_tflops(platform, f) for f in ("", "mxfp8", "nvfp4"))
    assert bf16 < mxfp8 < nvfp4
    assert 1.8 < mxfp8 / bf16 < 2.0
    assert 1.3 < nvfp4 / mxfp8 < 1.6


def test_b200_nvfp4_8192_cube_is_near_cublas():
    """cuBLAS's NVFP4 GEMM at 8,192^3 on a B200: 5,370 TFLOP/s (pytorch/ao pull request 2427)."""
    assert 0.8 <= _tflops("dgx-b200", "nvfp4") / 5370.0 <= 1.0


@pytest.mark.parametrize("platform", ["dgx-h100", "dgx-h200"])
def test_hopper_has_no_block_scaled_entries(platform):
    eff = dict(_gpu(platform).efficiency)
    assert "gemm:nvfp4" not in eff and "gemm:mxfp8" not in eff
