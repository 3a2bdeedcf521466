"""The Blackwell platforms' rates against the datasheets and measurements their comments cite."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from mapper.costing.efficiency import EFF_COMPUTE
from mapper.platform.loader import load_platform

#: Maximum Achievable Matmul FLOPS (TFLOP/s, mean of 100 runs at the best shape) and the peaks they
#: are measured against (stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable
#: Matmul FLOPS comparison table").
MAMF = {
    "h100": {"bf16": (794.5, 989.0)},
    "b200": {"bf16": (1745.0, 2250.0), "fp8": (3432.5, 4500.0)},
    "gb200": {"bf16": (1822.0, 2500.0), "fp8": (3615.6, 5000.0)},
}
#: Dense tensor-core peaks (TFLOP/s): NVIDIA HGX B200 datasheet (per GPU at 1,000 W) and the GB200 NVL72
#: datasheet's rack figures over 72 GPUs, the sparse rates halved.
DENSE = {
    "b200": {"bf16": 2250.0, "fp8": 4500.0, "mxfp8": 4500.0, "nvfp4": 9000.0, "tf32": 1100.0},
    "gb200": {"bf16": 360e3 / 72 / 2, "fp8": 720e3 / 72 / 2, "mxfp8": 720e3 / 72 / 2,
              "nvfp4": 1440e3 / 72 / 2, "tf32": 180e3 / 72 / 2},
}
GPU = {"b200": "dgx-b200", "gb200": "gb200-tray"}


def _gpu(system: str):
    return next(d for d in load_platform(GPU[system]).devices if d.name == "gpu0")


def _reach(system: str, fmt: str) -> float:
    got, peak = MAMF[system][fmt]
    return got / peak


@pytest.mark.parametrize("system", sorted(GPU))
def test_dense_tensor_peaks_are_the_datasheets(system):
    gpu = _gpu(system)
    for fmt, tflops in DENSE[system].items():
        assert gpu.tensor_peak(fmt) == pytest.approx(tflops * 1e3), fmt


@pytest.mark.parametrize("system", sorted(GPU))
def test_gemm_efficiency_scales_the_h100_default_by_measured_reach(system):
    """16-bit: the GPU default (validated on the H100) times the device's measured BF16 reach over the
    H100's; FP8: that times the measured FP8 reach over the BF16 reach."""
    eff = dict(_gpu(system).efficiency)
    bf16 = EFF_COMPUTE["gpu"]["gemm"] * _reach(system, "bf16") / _reach("h100", "bf16")
    assert eff["gemm"] == pytest.approx(bf16, abs=6e-4)
    assert eff["gemm:fp8"] == pytest.approx(bf16 * _reach(system, "fp8") / _reach(system, "bf16"), abs=6e-4)
    assert eff["gemm"] < EFF_COMPUTE["gpu"]["gemm"]


def test_attention_half_length_is_the_cudnn_fit():
    """The fused causal attention's half-length on both Blackwell platforms is the parameter
    benchmarks/attention_rates.py fits to cuDNN on a B200 (with the backward's fitted share of the
    forward's rate), and the fit tracks the measured forward-plus-backward reach over the fitted
    sequences within 25 %."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "attention_rates.py"
    bench = runpy.run_path(str(path))
    share = bench["fit_share"]()
    half = bench["fit"](share)
    for system in GPU:
        assert dict(_gpu(system).half_length)["attention.causal"] == pytest.approx(half)
    lo, hi = bench["FIT"]
    for seq, *row in bench["ROWS"]:
        if lo <= seq <= hi:
            assert 0.8 <= bench["model"](seq, half, share) / bench["reach"](*row) <= 1.25, seq
