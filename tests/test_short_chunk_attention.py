"""Fused causal attention on Ampere and Hopper runs below its long-sequence rate on short
sequences: the half-lengths benchmarks/attention_rates.py fits (FlashAttention-2 on an A100,
cuDNN 9.19 on an H200), on every A100, H100 and H200 platform, and what they do to context
parallelism's short chunks (docs/cost_model.md)."""

from __future__ import annotations

import runpy
from dataclasses import replace
from pathlib import Path

import pytest

from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.costing.latency import estimate
from mapper.frontend.load import graph_from_text, load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import LayoutSpec
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "attention_rates.py"
A100 = ["dgx-a100", "selene", "a100-mig", "cpu-gpu-fpga", "workstation", "mixed-gpu", "fleet-a100-v100"]
HOPPER = ["dgx-h100", "dgx-h200", "h100-mig", "dgx-h100-superpod", "dgx-h200-superpod"]


@pytest.fixture(scope="module")
def bench():
    return runpy.run_path(str(BENCH))


def _halves(platform: str) -> set[float]:
    """The ``attention.causal`` half-lengths of ``platform``'s GPUs but its V100s (80 SMs)."""
    devices = load_platform(platform).devices
    return {dict(d.half_length)["attention.causal"] for d in devices
            if d.kind == "gpu" and d.compute_units != 80}  # not a V100


def test_the_fits_are_pinned(bench):
    share = bench["fit_share"]()
    assert bench["fit_a100"](share) == 240.0
    assert bench["fit_hopper"](share) == 270.0


@pytest.mark.parametrize("platform", A100)
def test_every_a100_platform_carries_the_a100_fit(platform):
    assert _halves(platform) == {240.0}


@pytest.mark.parametrize("platform", HOPPER)
def test_every_hopper_platform_carries_the_hopper_fit(platform):
    assert _halves(platform) == {270.0}


def test_the_checks_hold(bench):
    """Fitted on one sweep, each reads its check within 0.8-1.25: FlashAttention-2 at head dimension
    64 on the A100, cuDNN 9.1 (2024) on the H200."""
    share = bench["fit_share"]()
    a100, hopper = bench["fit_a100"](share), bench["fit_hopper"](share)
    for head, seq, tf in bench["A100"]:
        if head != bench["A100_FIT_HEAD"]:
            assert 0.8 <= bench["model"](seq, a100, share) / (tf / bench["PEAK"]["A100"]) <= 1.25, seq
    for src, seq, fwd, bwd in bench["H200"]:
        if src.startswith("cuDNN 9.1 "):
            assert 0.8 <= bench["model"](seq, hopper, share) / bench["h200_reach"](fwd, bwd) <= 1.25, seq


def _attention_time(platform: str, seq: int, rows: int = 16384) -> float:
    """Seconds of a causal attention over ``rows`` tokens in sequences of ``seq`` on one GPU."""
    text = (f"graph g {{\n  input x : bf16[{rows}, 6144]\n"
            f"  a = attention(x, heads = 16, seq = {seq}, causal = 1)\n  output a\n}}\n")
    (task,) = graph_from_text(text, "att.tg").tasks
    gpu = next(d for d in load_platform(platform).devices if d.kind == "gpu")
    return estimate(task, "attention", gpu).t_parallel / task.flops


@pytest.mark.parametrize("platform,half", [("dgx-a100", 240.0), ("dgx-h100", 270.0)])
def test_a_short_sequence_runs_below_the_long_rate(platform, half):
    """Time per FLOP at 512 tokens over that at 2,048: Hockney's (512 + s_1/2) / 512 x 2,048 / (2,048 + s_1/2)."""
    ratio = _attention_time(platform, 512) / _attention_time(platform, 2048)
    assert ratio == pytest.approx((512 + half) / 512 * 2048 / (2048 + half), rel=0.01)  # beside the waves


def _plan(given: dict, half: bool = True):
    """The best plan of a 4-layer GPT (hidden 2,048, 2,048-token sequences, 64 of them) on 16 A100s,
    with the platform's half-lengths or without them."""
    params = (("LAYERS", 4), ("HIDDEN", 2048), ("HEADS", 16), ("SEQ", 2048), ("VOCAB", 51200), ("BATCH", 64))
    graph = load_graph(ModelFile("examples/gpt.tg", params=params))
    plat = with_nodes(load_platform("selene"), 2)
    if not half:
        plat = replace(plat, devices=tuple(replace(d, half_length=()) for d in plat.devices))
    return plan_cluster(graph, plat, LayoutSpec(**given), "adam", lambda g: fuse_for(g, plat)).best


def test_short_chunk_context_parallelism_loses_at_2k_tokens():
    """Context parallelism 2 cuts each 2,048-token sequence into 1,024-token ring steps, whose
    attention runs below the 2,048-token rate: it is slower than no context parallelism, which auto
    keeps, and the half-length costs it more than it costs the layout without (0.8 % slower
    without the half-length, 1.8 % with it)."""
    auto, cp = _plan({}), _plan({"context": 2})
    assert auto.layout.context == 1
    assert cp.step > auto.step
    flat, flat_cp = _plan({"context": 1}, half=False), _plan({"context": 2}, half=False)
    assert cp.step / flat_cp.step > auto.step / flat.step
