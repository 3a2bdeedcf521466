"""A training step's quantisation casts: kernels of their own before the backward GEMMs
(mapper.costing.precision, "Casts of a training step")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mapper.costing.efficiency import EFF_MEMORY, op_class
from mapper.costing.fusion import fuse_for
from mapper.costing.latency import estimate
from mapper.costing.precision import AMAX_PASS, CAST_MEMORY_SHARE, ELEMENT_BYTES, cast_bytes, with_precision
from mapper.costing.training import training_step
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.platform.loader import load_platform

S, H, F, B = 1024, 1024, 2816, 2


def _step(fmt: str | None):
    g = load_graph(ModelFile("examples/llama.tg", params=(("LAYERS", 1), ("HIDDEN", H), ("HEADS", 8), ("KV_HEADS", 8),
                                                          ("FFN", F), ("SEQ", S), ("BATCH", B), ("VOCAB", 4096))))
    return training_step(with_precision(g, fmt), "adam")


def _task(g, name):
    return next(t for t in g.tasks if t.name == name)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp8", "nvfp4"])
def test_casts_by_hand(fmt):
    g = _step(fmt)
    fwd = next(t for t in g.tasks if t.precision and not t.backward and t.operands[0].type.numel == S * B * F)
    e = ELEMENT_BYTES[fmt]
    per = 2 * (2 if fmt in AMAX_PASS else 1) + 2 * e  # read 16-bit (and once more for the amax), write two copies
    wgrad, dgrad = _task(g, f"{fwd.name}.wgrad"), _task(g, f"{fwd.name}.dgrad")
    assert cast_bytes(wgrad) == pytest.approx(S * B * F * per)  # the MLP's down projection: its [T, F] input
    assert cast_bytes(dgrad) == pytest.approx(S * B * H * per)  # and its [T, H] output gradient
    assert cast_bytes(fwd) == 0.0  # a forward (or serving) GEMM keeps its casts under its roofline
    assert all(cast_bytes(t) == 0.0 for t in g.tasks if not t.precision)


def test_fp8_is_current_scaling_and_block_formats_scale_in_the_cast():
    assert AMAX_PASS == {"fp8"}
    assert all(cast_bytes(t) == 0.0 for t in _step("bf16").tasks)
    assert all(cast_bytes(t) == 0.0 for t in _step(None).tasks)


def test_a_cast_adds_to_the_gemm_time_rather_than_hiding_under_it():
    plat = load_platform("dgx-h100")
    gpu = next(d for d in plat.devices if d.kind == "gpu")
    g = fuse_for(_step("fp8"), plat)
    wgrad = next(t for t in g.tasks if t.name.endswith(".wgrad") and t.precision)
    cls = op_class(wgrad.op, wgrad.span)
    with_cast = estimate(wgrad, cls, gpu).time
    without = estimate(replace(wgrad, name=wgrad.name + "_"), cls, gpu).time  # not a wgrad: no cast charged
    want = gpu.launch_us / 1e6 + cast_bytes(wgrad) / (EFF_MEMORY["gpu"] * gpu.mem_bandwidth_gbs * 1e9)
    assert with_cast - without == pytest.approx(want, rel=1e-9)


def test_an_mxfp8_cast_runs_at_its_measured_share_of_the_bandwidth():
    """Transformer Engine's MXFP8 quantiser on a B200 (module docstring): an 8,192 x 8,192 BF16
    tensor, row- and column-wise, is 67,108,864 x (2 + 2 x 33/32) = 272,629,760 bytes; 3 us of
    launch plus those bytes at 0.691 x 8,000 GB/s is 52.32 us (measured: 52.34 us)."""
    assert CAST_MEMORY_SHARE == {"mxfp8": 0.691}
    n = 8192 * 8192
    nbytes = n * (2 + 2 * ELEMENT_BYTES["mxfp8"])
    assert nbytes == 272_629_760
    assert 3.0 + nbytes / (0.691 * 8000e9) * 1e6 == pytest.approx(52.32, abs=0.01)
    plat = load_platform("dgx-b200")
    gpu = next(d for d in plat.devices if d.kind == "gpu")
    assert gpu.mem_bandwidth_gbs == 8000.0 and gpu.launch_us == 3.0
    for fmt, share in (("mxfp8", 0.691), ("fp8", EFF_MEMORY["gpu"])):  # FP8 keeps the streaming share
        g = fuse_for(_step(fmt), plat)
        wgrad = next(t for t in g.tasks if t.name.endswith(".wgrad") and t.precision)
        cls = op_class(wgrad.op, wgrad.span)
        added = estimate(wgrad, cls, gpu).time - estimate(replace(wgrad, name=wgrad.name + "_"), cls, gpu).time
        assert added == pytest.approx(3e-6 + cast_bytes(wgrad) / (share * 8000e9), rel=1e-9)
