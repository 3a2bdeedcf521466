"""Fused attention's backward pass: priced at its own share of the forward's rate (docs/cost_model.md)."""

from __future__ import annotations

import runpy
from dataclasses import replace
from pathlib import Path

import pytest

from mapper.costing.efficiency import ATTENTION_BACKWARD_SHARE, model_keys
from mapper.costing.latency import estimate
from mapper.costing.training import training_step
from mapper.frontend.load import graph_from_text
from mapper.platform.loader import load_platform

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "attention_rates.py"
TEXT = ("graph g {\n  input x : bf16[16384, 3072]\n"
        "  a = attention(x, heads = 8, seq = 16384, causal = 1)\n  output a\n}\n")


def _gpu(platform: str = "dgx-h100"):
    return next(d for d in load_platform(platform).devices if d.kind == "gpu")


def _attention():
    (task,) = graph_from_text(TEXT, "att.tg").tasks
    return task


def test_the_backward_share_is_the_benchmarks_fit():
    """The GPU share is the median backward-over-forward rate of cuDNN on a B200 that
    benchmarks/attention_rates.py fits, and it reads the cuDNN and FlashAttention-2 checks on an
    H200 within 0.1."""
    bench = runpy.run_path(str(BENCH))
    share = bench["fit_share"]()
    assert ATTENTION_BACKWARD_SHARE["gpu"] == pytest.approx(share)
    for _, _, fwd, bwd in bench["H200"]:
        assert abs(bwd / fwd - share) <= 0.15


def test_an_attention_gradient_has_its_own_variant_key_first():
    task = replace(_attention(), backward=True)
    assert model_keys(task, "attention")[:4] == ("attention.backward:bf16", "attention.backward",
                                                 "attention.causal:bf16", "attention.causal")
    assert "attention.backward" not in model_keys(_attention(), "attention")


@pytest.mark.parametrize("platform", ["dgx-h100", "dgx-b200"])
def test_a_gpu_runs_the_backward_at_the_share_of_the_forward_rate(platform):
    """Same kernel FLOPs, same waves and half-length: only the rate differs, by the share."""
    fwd = _attention()
    gpu = _gpu(platform)
    f, b = estimate(fwd, "attention", gpu), estimate(replace(fwd, backward=True), "attention", gpu)
    assert f.bound == b.bound == "compute"
    assert b.t_parallel == pytest.approx(f.t_parallel / ATTENTION_BACKWARD_SHARE["gpu"])


def test_a_devices_own_backward_efficiency_replaces_the_share():
    gpu = _gpu()
    own = replace(gpu, efficiency=(*gpu.efficiency, ("attention.backward", 0.3)))
    fwd = _attention()
    plain = estimate(fwd, "attention", own)
    back = estimate(replace(fwd, backward=True), "attention", own)
    # forward at the default 0.60 times the H100's half-length factor at 16,384 tokens, backward
    # at the device's own 0.30 (not 0.30 x the share; an own rate goes without the half-length)
    half = dict(gpu.half_length)["attention.causal"]
    assert back.t_parallel == pytest.approx(plain.t_parallel * 0.60 * 16384 / (16384 + half) / 0.30)


def test_a_cpu_has_no_backward_share():
    cpu = next(d for d in load_platform("dgx-h100").devices if d.kind == "cpu")
    fwd = _attention()
    assert estimate(replace(fwd, backward=True), "attention", cpu).t_parallel == pytest.approx(
        estimate(fwd, "attention", cpu).t_parallel)


def test_a_training_step_prices_attentions_gradient_below_the_forward_rate():
    """In a training step the attention's gradient task (2.5x the forward FLOPs) takes 2.5 / 0.80 of
    the forward's compute time on an H100."""
    step = training_step(graph_from_text(TEXT, "att.tg"), "sgd")
    fwd, grad = (next(t for t in step.tasks if t.name == n) for n in ("a", "a.grad"))
    assert grad.backward and grad.flops == pytest.approx(2.5 * fwd.flops)
    gpu = _gpu()
    ratio = estimate(grad, "attention", gpu).t_parallel / estimate(fwd, "attention", gpu).t_parallel
    assert ratio == pytest.approx(2.5 / ATTENTION_BACKWARD_SHARE["gpu"])


def test_a_platform_file_may_declare_the_backwards_own_efficiency():
    from mapper.platform.loader import parse_platform

    text = ('name = "p"\n[[device]]\nname = "gpu0"\nkind = "gpu"\npeak_gflops = { bf16 = 1000.0 }\n'
            'mem_bandwidth_gbs = 100.0\nefficiency = { "attention.backward" = 0.4 }\n')
    (gpu,) = parse_platform(text, "p.toml").devices
    assert dict(gpu.efficiency) == {"attention.backward": 0.4}
