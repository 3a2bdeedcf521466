"""Quantised GEMM weights as Transformer Engine and Megatron-Core hold and gather them (fp8_param / fp4_param)."""

from __future__ import annotations

import json

import pytest

from mapper.cli import main
from mapper.cluster.lowparam import LowParams
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.search import Framework, _setup, plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.costing.precision import with_precision
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import LayoutSpec
from mapper.pipeline import compile_graph
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

L, H, A, G, F, V = 2, 256, 4, 2, 512, 1000
#: GEMM weights the FP8 recipe quantises: QKV, attention output, gate/up/down of each layer (not the
#: embedding nor the LM head)
GEMM = L * (H * (H + 2 * G * H // A) + H * H + 3 * H * F)
N, E = 1_000_000.0, 300_000.0  # GEMM weights and other parameters, for the byte counts alone


@pytest.mark.parametrize("low, zero, held, gathered", [
    (LowParams("fp8", True), 1, E * 2 + N * 2, E * 2 + N * 1),  # Hopper: FP8 data and its transpose
    (LowParams("fp8", True, non_tn=True), 1, E * 2 + N * 1, E * 2 + N * 1),  # Blackwell: one buffer
    (LowParams("fp8", False), 1, E * 2 + N * 4, E * 2 + N * 2),  # 16-bit weights and TE's weight_fp8, weight_t_fp8
    (LowParams("fp8", True), 0, E * 2 + N * 4, E * 2 + N * 2),  # no distributed optimizer: no FP8 parameters
    (LowParams("mxfp8", True), 1, E * 2 + N * 2 * (1 + 1 / 32), E * 2 + N * 2),  # gathered in bf16 (grad buffer)
    (LowParams("mxfp8", False), 1, E * 2 + N * (2 + 2 * (1 + 1 / 32)), E * 2 + N * 2),
    (LowParams("nvfp4", True), 1, E * 2 + N * 2 * (0.5 + 1 / 16), E * 2 + N * 0.5),
    (LowParams(), 1, E * 2 + N * 2, E * 2 + N * 2),
])
def test_bytes_of_a_weight_held_and_gathered(low, zero, held, gathered):
    pbytes = 2 * (N + E)
    assert low.held(pbytes, N, 2 * N, zero) == pytest.approx(held)
    assert low.gathered(pbytes, N, 2 * N, zero) == pytest.approx(gathered)


def _plan(fp8: str | None, precision: str = "fp8", zero: int = 1, platform: str = "dgx-h100-superpod"):
    params = (("LAYERS", L), ("HIDDEN", H), ("HEADS", A), ("KV_HEADS", G), ("FFN", F), ("VOCAB", V), ("SEQ", 256),
              ("BATCH", 16))
    g = with_precision(load_graph(ModelFile("examples/llama.tg", params=params)), precision)
    plat = with_nodes(load_platform(platform), 2)
    keys = {"tensor": 1, "pipeline": 1, "data": 16, "micro_batch": 1, "zero": zero, "recompute": "none",
            **({"fp8_param": fp8} if fp8 else {})}
    return plan_cluster(g, plat, LayoutSpec(**keys), "adam", lambda x: fuse_for(x, plat), precision=precision), plat


def test_weights_gradients_and_optimizer_under_both_layouts():
    on, _ = _plan("on")
    off, _ = _plan("off")
    a, b = on.best.memory, off.best.memory
    every = 2 * V * H + GEMM  # the embedding, the LM head and the GEMMs' weights (the norms hold no gains here)
    # On Hopper FP8 parameters hold 1 byte and a 1-byte transpose: as many bytes as 16-bit weights
    assert a["weights"] == pytest.approx(2 * every)
    # Off: the 16-bit weights and Transformer Engine's two cached FP8 copies of each GEMM weight
    assert b["weights"] == pytest.approx(2 * every + 2 * GEMM)
    # f32 main gradients; Adam's f32 main params and two moments over the 16 replicas (distributed optimizer)
    for m in (a, b):
        assert m["gradients"] == pytest.approx(4 * every)
        assert m["optimizer"] == pytest.approx(12 * every / 16)


def test_blackwell_holds_one_fp8_buffer_and_both_mxfp8_copies():
    every = 2 * V * H + GEMM
    fp8, _ = _plan("on", platform="dgx-b200-superpod")
    assert fp8.best.memory["weights"] == pytest.approx(2 * every - GEMM)  # 1 byte a GEMM weight, no transpose
    mx, _ = _plan("on", precision="mxfp8", platform="dgx-b200-superpod")
    assert mx.best.memory["weights"] == pytest.approx(2 * every + GEMM / 16)  # 2 (1 + 1/32) a GEMM weight
    mx_off, _ = _plan("off", precision="mxfp8", platform="dgx-b200-superpod")
    assert mx_off.best.memory["weights"] == pytest.approx(2 * every + 2 * (1 + 1 / 32) * GEMM)


def test_the_parameter_all_gather_moves_half_the_bytes():
    """The distributed optimizer's all-gather of the GEMM weights: 1 byte each with FP8 parameters, 2 without."""
    lay = _plan("on")[0].best.layout
    g = with_precision(load_graph(ModelFile("examples/llama.tg", params=(
        ("LAYERS", L), ("HIDDEN", H), ("HEADS", A), ("KV_HEADS", G), ("FFN", F), ("VOCAB", V), ("SEQ", 256),
        ("BATCH", 16)))), "fp8")
    plat = with_nodes(load_platform("dgx-h100-superpod"), 2)
    for value, per in (("on", 1.0), ("off", 2.0)):
        low = LowParams("fp8", value == "on")
        model = _setup(g, plat, "adam", lambda x: fuse_for(x, plat), Framework("fp32", "", "deepspeed", low)).model
        gemm = sum(model.low.block(c, lay)[2] - (c.param_bytes - c.low[1]) for c in model.block_costs(1, 1))
        assert gemm == pytest.approx(per * GEMM)


def test_the_key_reaches_the_plan_and_defaults_to_megatron_bridges(tmp_path):
    out = tmp_path / "r.json"
    base = ["compile", "examples/llama.tg", "--param", "LAYERS=2", "--param", "BATCH=16", "--platform",
            "dgx-h100-superpod", "--nodes", "2", "--train", "--optimizer", "adam", "--json", str(out), "--parallel"]
    for layout, prec, want in (("tensor=1,pipeline=1,zero=1", "fp8", "on"),
                               ("tensor=1,pipeline=1,zero=0", "fp8", "off"),
                               ("tensor=1,pipeline=1,zero=1,fp8_param=off", "fp8", "off")):
        assert main([*base, layout, "--precision", prec]) == 0
        assert json.loads(out.read_text())["parallel"]["plan"]["fp8_param"] == want
    assert main([*base, "tensor=1,pipeline=1,zero=1", "--precision", "bf16"]) == 0
    assert "fp8_param" not in json.loads(out.read_text())["parallel"]["plan"]


@pytest.mark.parametrize("layout, prec, says", [
    ("tensor=1,fp8_param=on", "bf16", "needs --precision fp8 or mxfp8"),
    ("tensor=1,fp8_param=off", None, "needs --precision fp8 or mxfp8"),
    ("tensor=1,fp4_param=on", "fp8", "needs --precision nvfp4"),
    ("tensor=1,zero=0,fp8_param=on", "fp8", "zero=1 or more"),
    ("tensor=1,fp8_param=yes", "fp8", "choose one of on, off"),
])
def test_meaningless_keys_exit_2(layout, prec, says, capsys):
    rc = main(["compile", "examples/llama.tg", "--param", "LAYERS=2", "--param", "BATCH=16", "--platform",
               "dgx-h100-superpod", "--nodes", "2", "--train", "--optimizer", "adam", "--parallel", layout,
               *(["--precision", prec] if prec else [])])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and "Traceback" not in err and "OptionsError" not in err


@pytest.mark.parametrize("fp8", ["on", "off"])
def test_plan_graph_is_validated(fp8):
    ch, plat = _plan(fp8)
    est = ch.best
    graph = plan_graph(est, "llama")
    result = compile_graph(graph, replica_platform(plat, "gpu0", est.layout.pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)
