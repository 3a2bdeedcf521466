"""PyTorch's composite RMSNorm and SwiGLU (``fused = 0``) priced as the kernels eager PyTorch
launches (mapper.costing.eager): their bytes by hand, a launch per kernel, not fused."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mapper.costing.eager import eager_kernels
from mapper.costing.efficiency import EFF_MEMORY, op_class
from mapper.costing.fusion import fuse
from mapper.costing.latency import estimate
from mapper.costing.training import training_step
from mapper.frontend.load import graph_from_text, load_graph
from mapper.frontend.sources import ModelFile
from mapper.platform.loader import load_platform
from mapper.serving.request import EAGER_OPS

S, H, F, B = 1024, 1024, 2816, 2
T = S * B


def _step(fused: int):
    g = load_graph(ModelFile("examples/llama.tg", params=(
        ("LAYERS", 1), ("HIDDEN", H), ("HEADS", 8), ("KV_HEADS", 8), ("FFN", F), ("SEQ", S), ("BATCH", B),
        ("VOCAB", 4096), ("FUSED_NORM", fused), ("FUSED_SWIGLU", fused), ("FUSED_ROPE", fused))))
    return training_step(g, "adam")


def _first(g, op, backward):
    return next(t for t in g.tasks if t.op == op and t.backward == backward)


def test_bytes_and_kernels_by_hand():
    g = _step(0)
    e, f = 2, 4  # bf16 activations, f32 inside the norm
    # RMSNorm forward: float (e+f), pow (2f), mean (f), x*r (2f), type_as (f+e), *weight (2e); 8 kernels
    assert eager_kernels(_first(g, "rmsnorm", False)) == (8, pytest.approx((e + f + 2 * f + f + 2 * f + f + e + 2 * e) * T * H))
    # backward: *weight (2e, 3e, e), type_as (e+f), x*r (2f, 3f, f), mean (f), pow (2f, 2f, 3f), sum (3f), float (f+e)
    back = 2 * e + 3 * e + e + e + f + 2 * f + 3 * f + f + f + 2 * f + 2 * f + 3 * f + 3 * f + f + e
    assert eager_kernels(_first(g, "rmsnorm", True)) == (16, pytest.approx(back * T * H))
    # SwiGLU on [T, 2F]: silu (2e) and the product (3e) per output element; backward 3 kernels of 3e
    assert eager_kernels(_first(g, "swiglu", False)) == (2, pytest.approx(5 * e * T * F))
    assert eager_kernels(_first(g, "swiglu", True)) == (3, pytest.approx(9 * e * T * F))
    # rotary on q and k (8 heads each, v untouched): per tensor 5 kernels of 10e forward, 8 of 15e backward
    assert eager_kernels(_first(g, "rotary", False)) == (10, pytest.approx(10 * e * T * 2 * H))
    assert eager_kernels(_first(g, "rotary", True)) == (16, pytest.approx(15 * e * T * 2 * H))
    fused = _step(1)
    assert all(eager_kernels(t) is None for t in fused.tasks)  # fused kernels are one each, priced as before


def test_forward_kernels_are_the_serving_runtimes_eager_ops():
    g = _step(0)
    for op in ("rmsnorm", "swiglu"):
        assert eager_kernels(_first(g, op, False))[0] == EAGER_OPS[op]


def test_each_kernel_pays_a_launch_and_moves_its_bytes_at_memory_rate():
    gpu = next(d for d in load_platform("dgx-a100").devices if d.kind == "gpu")
    g = _step(0)
    for backward in (False, True):
        task = _first(g, "rmsnorm", backward)
        kernels, nbytes = eager_kernels(task)
        est = estimate(task, op_class(task.op, task.span), gpu)
        want = kernels * gpu.launch_us / 1e6 + nbytes / (EFF_MEMORY["gpu"] * gpu.mem_bandwidth_gbs * 1e9)
        assert est.time == pytest.approx(want, rel=2e-3)  # its few FLOPs hide under the memory time
        one = estimate(replace(task, attrs=tuple((k, 1 if k == "fused" else v) for k, v in task.attrs)),
                       op_class(task.op, task.span), gpu)
        assert est.time > 5 * one.time  # the fused kernel moves 4 (forward) or 8 (backward) bytes an element


def test_grouped_query_rotary_rotates_q_and_the_kv_heads_keys_only():
    g = load_graph(ModelFile("examples/llama.tg", params=(
        ("LAYERS", 1), ("HIDDEN", H), ("HEADS", 8), ("KV_HEADS", 2), ("FFN", F), ("SEQ", S), ("BATCH", B),
        ("VOCAB", 4096), ("FUSED_ROPE", 0))))
    rot = _first(g, "rotary", False)
    assert rot.operands[0].type.numel == T * (8 + 2 * 2) * (H // 8)
    assert eager_kernels(rot)[1] == pytest.approx(10 * 2 * T * (8 + 2) * (H // 8))


def test_a_composite_norm_ends_no_elementwise_chain():
    text = ("graph g {\n  input x : bf16[64, 128]\n  z = rmsnorm(add(relu(x), x), fused = FUSED)\n"
            "  output z\n}\n")
    for fused in (0, 1):
        g = fuse(graph_from_text(text.replace("FUSED", str(fused))))
        assert [[p.op for p in t.parts] or [t.op] for t in g.tasks][-1] == (
            ["relu", "add", "rmsnorm"] if fused else ["rmsnorm"])
