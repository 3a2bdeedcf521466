"""Memory as training frameworks lay it out, and --precision (issue: today's LLM training)."""

from __future__ import annotations

import json

import pytest

from mapper.cli import main
from mapper.cluster.model import FRAGMENTATION
from mapper.cluster.profile import Profile
from mapper.cluster.search import Framework, _setup, plan_cluster
from mapper.cluster.states import state_bytes
from mapper.costing.cost import build_cost_table
from mapper.costing.fusion import fuse_for
from mapper.costing.precision import ELEMENT_BYTES, gemm_bytes, with_precision
from mapper.errors import OptionsError
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import Layout, LayoutSpec, parse_layout
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

S, H, A, B = 1024, 1024, 16, 2  # sequence, hidden, heads, sequences per micro-batch


def _layer_stash(model: str, flash: int, extra=(), precision=None) -> tuple[float, float]:
    """Activation bytes one micro-batch of ``B`` sequences leaves in one Transformer layer (its
    attention and MLP blocks), and of those the attention scores."""
    params = (("LAYERS", 2), ("HIDDEN", H), ("HEADS", A), ("SEQ", S), ("VOCAB", 4096), ("BATCH", 2 * B),
              ("FLASH", flash), *extra)
    g = with_precision(load_graph(ModelFile(model, params=params)), precision)
    plat = load_platform("dgx-a100")
    prof = Profile(g, plat, "gpu0", lambda x: fuse_for(x, plat), "adam")
    layer = [b for b in prof.blocks if any(g.tasks[t].op in ("attention", "gelu", "swiglu") for t in b.tasks)][:2]
    costs = [prof.cost(b.signature, 1, 2) for b in layer]  # the batch in 2 micro-batches of B
    return sum(c.stash for c in costs), sum(c.scores for c in costs)


def test_fused_attention_layer_keeps_korthikanti_less_the_scores():
    """Korthikanti et al. (MLSys 2023, eq. 1): 34 s b h + 5 a s^2 b bytes per layer in 16-bit. The
    graph has no dropout, so its two masks (2 s b h) are not kept; FlashAttention keeps no
    scores, only an f32 log-sum-exp per head and query row (4 a s b)."""
    fused, scores = _layer_stash("examples/gpt.tg", 1)
    assert scores == 0.0
    assert fused == pytest.approx((34 - 2) * S * B * H + 4 * A * S * B, rel=1e-9)
    unfused, scores = _layer_stash("examples/gpt.tg", 0)
    assert scores == pytest.approx(5 * A * S * S * B, rel=1e-9)
    assert unfused == pytest.approx((34 - 2) * S * B * H + 5 * A * S * S * B, rel=1e-9)


def test_fused_llama_layer_counts_its_swiglu_inputs():
    """A Llama layer without scores: two RMSNorm inputs (2 sbh each), the QKV GEMM's input (2 sbh),
    Q, K and V (2 sbh (1 + 2 g/a)), the output projection's input (2 sbh), the MLP's first GEMM
    input (2 sbh), SwiGLU's input (4 sbF) and the last GEMM's input (2 sbF), plus the log-sum-exp."""
    f, g = 2816, 4
    kept, scores = _layer_stash("examples/llama.tg", 1, (("FFN", f), ("KV_HEADS", g)))
    assert scores == 0.0
    want = 2 * S * B * (H + H + H * (1 + 2 * g / A) + H + H + H) + 6 * S * B * f + 4 * A * S * B
    assert kept == pytest.approx(want, rel=1e-9)
    # in FP8 the four GEMMs keep their inputs as they cast them, a byte an element
    fp8, _ = _layer_stash("examples/llama.tg", 1, (("FFN", f), ("KV_HEADS", g)), "fp8")
    assert fp8 == pytest.approx(want - S * B * (3 * H + f), rel=1e-9)


def test_composite_norm_and_swiglu_keep_their_saved_tensors():
    """PyTorch's composite RMSNorm (``norm(x.float()).type_as(x) * weight``, the LLaMA reference
    code) keeps its input in f32 (4 sbh) and its output before the gain (2 sbh) instead of its
    16-bit input (2 sbh): 4 sbh more for each of a layer's two norms; its composite SwiGLU
    (``silu(gate) * up``) keeps silu's output too (2 sbF)."""
    f, g = 2816, 4
    fused, _ = _layer_stash("examples/llama.tg", 1, (("FFN", f), ("KV_HEADS", g)))
    plain, _ = _layer_stash("examples/llama.tg", 1, (("FFN", f), ("KV_HEADS", g), ("FUSED_NORM", 0),
                                                      ("FUSED_SWIGLU", 0)))
    assert plain - fused == pytest.approx(2 * 4 * S * B * H + 2 * S * B * f, rel=1e-9)
    norm_only, _ = _layer_stash("examples/llama.tg", 1, (("FFN", f), ("KV_HEADS", g), ("FUSED_NORM", 0)))
    assert norm_only - fused == pytest.approx(2 * 4 * S * B * H, rel=1e-9)


@pytest.mark.parametrize("tensor", [1, 2])
def test_the_loss_keeps_f32_logits_of_the_ranks_vocabulary(tensor):
    """The LM head's block (the final norm is a block of its own) keeps the head's input (2 sbh) and
    the loss's logits in f32, cut by the vocabulary over the tensor ranks (Korthikanti et al., 4.3:
    4 s b v / t)."""
    v = 4096
    params = (("LAYERS", 2), ("HIDDEN", H), ("HEADS", A), ("SEQ", S), ("VOCAB", v), ("BATCH", 2 * B))
    g = load_graph(ModelFile("examples/llama.tg", params=params))
    plat = load_platform("dgx-a100")
    prof = Profile(g, plat, "gpu0", lambda x: fuse_for(x, plat), "adam")
    head = prof.cost(prof.blocks[-1].signature, tensor, 2)
    assert head.stash == pytest.approx(2 * S * B * H + 4 * S * B * v / tensor, rel=1e-9)
    inference = Profile(g, plat, "gpu0", lambda x: fuse_for(x, plat), None)
    assert inference.cost(inference.blocks[-1].signature, tensor, 2).stash == pytest.approx(2 * S * B * H)


def test_the_allocators_fragmentation_is_a_share_of_the_activations():
    """With allocator=caching the allocator holds FRAGMENTATION of the activations' memory beside
    them (GMLake's measured 15 %), a part of its own; with expandable segments (the default) none;
    the memory floor of the layout search stays below the peak."""
    params = (("LAYERS", 4), ("HIDDEN", H), ("HEADS", A), ("SEQ", S), ("VOCAB", 4096), ("BATCH", 64))
    g = load_graph(ModelFile("examples/llama.tg", params=params))
    plat = with_nodes(load_platform("selene"), 1)
    model = _setup(g, plat, "adam", lambda x: fuse_for(x, plat), Framework(allocator="caching")).model
    assert _setup(g, plat, "adam", lambda x: fuse_for(x, plat)).model.fragmentation == 0.0  # expandable
    for lay in (Layout(2, 2, 2, 2, 1, "none", 1, False), Layout(1, 4, 2, 1, 1, "full", 1, False)):
        est = model.estimate(lay)
        assert est is not None
        whole = est.memory["activations"] + est.memory["fragmentation"]
        assert FRAGMENTATION["caching"] == 0.15
        assert est.memory["fragmentation"] == pytest.approx(FRAGMENTATION["caching"] * whole, rel=1e-12)
        assert model.memory_floor(lay) <= est.peak


def test_13b_at_2048_tokens_fits_with_flash_attention():
    """The layout-sweep case: Llama 13B, 2,048 tokens, TP 1, PP 4, micro-batch 1 ran in 80 GB; with
    the scores charged it was called out of memory at 46 GiB of activations."""
    params = (("LAYERS", 40), ("HIDDEN", 5120), ("HEADS", 40), ("KV_HEADS", 40), ("FFN", 13824), ("SEQ", 2048),
              ("VOCAB", 32000), ("BATCH", 256))
    g = load_graph(ModelFile("examples/llama.tg", params=params))
    plat = with_nodes(load_platform("selene"), 8)
    lay = {"tensor": 1, "pipeline": 4, "micro_batch": 1, "recompute": "none", "zero": 1, "interleave": 1}
    est = plan_cluster(g, plat, LayoutSpec(**lay), "adam", lambda x: fuse_for(x, plat), precision="bf16").best
    assert est.fits
    assert est.memory["activations"] < 16 * 2**30


@pytest.mark.parametrize("grad, zero, per_param", [
    ("", 0, 20.0), ("", 1, 4 + 16 / 8), ("fp32", 0, 18.0), ("fp32", 1, 6 + 12 / 8), ("bf16", 1, 4 + 16 / 8),
    ("fp32", 2, 2 + 16 / 8), ("fp32", 3, 18 / 8)])
def test_state_bytes_are_megatron_cores(grad, zero, per_param):
    """Megatron-Core's distributed optimizer guide: bytes per parameter with Adam, d = 8."""
    n = 1e9
    parts = state_bytes(n, 2 * n, 2, grad, zero, 8)
    assert sum(parts.values()) == pytest.approx(per_param * n)


def test_f32_weights_keep_no_master_copy():
    assert sum(state_bytes(1.0, 4.0, 2, "fp32", 0, 1).values()) == pytest.approx(16.0)


def test_grad_key_parses_and_rejects():
    assert parse_layout("tensor=2,grad=bf16") == LayoutSpec(tensor=2, grad="bf16")
    with pytest.raises(OptionsError):
        parse_layout("grad=fp16")


def test_allocator_key_parses_rejects_and_reaches_the_report(tmp_path, capsys):
    assert parse_layout("tensor=2,allocator=caching") == LayoutSpec(tensor=2, allocator="caching")
    with pytest.raises(OptionsError):
        parse_layout("allocator=cuda")
    out = tmp_path / "r.json"
    base = ["compile", "examples/llama.tg", "--param", "LAYERS=2", "--param", "BATCH=16", "--platform", "selene",
            "--nodes", "2", "--train", "--optimizer", "adam", "--json", str(out), "--parallel"]
    peaks = {}
    for mode in ("caching", "expandable"):
        assert main([*base, f"tensor=1,pipeline=1,zero=1,allocator={mode}"]) == 0
        par = json.loads(out.read_text())["parallel"]
        assert par["plan"]["allocator"] == mode
        peaks[mode] = par["peak_memory"]
    assert peaks["expandable"]["fragmentation"] == 0.0
    assert peaks["caching"]["fragmentation"] == pytest.approx(peaks["caching"]["activations"] * 0.15 / 0.85)
    assert main([*base, "allocator=none"]) == 2
    assert "allocator" in capsys.readouterr().err


# -- precision -----------------------------------------------------------------------------------

def _llama(layers=2, batch=8):
    return load_graph(ModelFile("examples/llama.tg", params=(("LAYERS", layers), ("BATCH", batch),
                                                              ("SEQ", 1024))))


def test_fp8_marks_the_linear_layers_only():
    g = with_precision(_llama(), "fp8")
    marked = {t.name for t in g.tasks if t.precision}
    assert marked and all(g.tasks[[t.name for t in g.tasks].index(n)].op == "matmul" for n in marked)
    assert "logits" not in marked  # the LM head stays in 16-bit
    assert not any(t.precision for t in g.tasks if t.op in ("attention", "embedding", "rmsnorm"))
    assert with_precision(_llama(), "bf16") == _llama()


def test_fp8_gemm_runs_at_the_fp8_rate_with_its_casts():
    plat = load_platform("dgx-h100")
    g16 = fuse_for(_llama(), plat)
    g8 = fuse_for(with_precision(_llama(), "fp8"), plat)
    t16, t8 = build_cost_table(g16, plat), build_cost_table(g8, plat)
    d = plat.device_index("gpu0")
    i = next(t.index for t in g8.tasks if t.name == "h1.mlp.matmul")
    assert t8.time[i][d] < 0.7 * t16.time[i][d]  # about twice the rate, less the casts
    task = g8.tasks[i]
    acts = sum(o.type.numel for o in task.operands if o.kind != "weight")
    weights = sum(o.type.numel for o in task.operands if o.kind == "weight")
    assert gemm_bytes(task) == pytest.approx(task.bytes - 2 * (acts + weights) + acts * (2 + 2 * ELEMENT_BYTES["fp8"])
                                             + weights * ELEMENT_BYTES["fp8"])
    j = next(t.index for t in g8.tasks if t.op == "attention")
    assert t8.time[j][d] == t16.time[j][d]


def test_a_gpu_without_the_format_exits_2(capsys):
    rc = main(["compile", "examples/llama.tg", "--param", "LAYERS=2", "--param", "BATCH=8", "--platform",
               "selene", "--nodes", "1", "--train", "--optimizer", "adam", "--parallel", "tensor=1",
               "--precision", "fp8"])
    err = capsys.readouterr().err
    assert rc == 2 and "gpu0" in err and "fp8" in err and "Traceback" not in err
    rc = main(["compile", "examples/llama.tg", "--platform", "selene", "--precision", "fp4"])
    assert rc == 2 and "unknown precision" in capsys.readouterr().err


def test_plan_reports_precision_and_grad(tmp_path):
    out = tmp_path / "r.json"
    rc = main(["compile", "examples/llama.tg", "--param", "LAYERS=2", "--param", "BATCH=16", "--platform",
               "selene", "--nodes", "2", "--train", "--optimizer", "adam", "--parallel",
               "tensor=1,pipeline=1,zero=1", "--precision", "bf16", "--json", str(out)])
    assert rc == 0
    par = json.loads(out.read_text())["parallel"]
    assert par["plan"]["precision"] == "bf16" and par["plan"]["grad"] == "fp32"
    rc = main(["compile", "examples/llama.tg", "--param", "LAYERS=2", "--param", "BATCH=16", "--platform",
               "selene", "--nodes", "2", "--train", "--optimizer", "adam", "--parallel",
               "tensor=1,pipeline=1,zero=1", "--json", str(out)])
    plan = json.loads(out.read_text())["parallel"]["plan"]
    assert plan["precision"] == "fp16" and plan["grad"] == "fp16"


# -- reports -------------------------------------------------------------------------------------

def test_model_flops_are_nvidias_formula():
    """dgxc-benchmarking's per-sequence count: s [12 L h^2 (1 + g/a + s/h) + 18 L F h k + 6 V h]."""
    from mapper.cluster.flops import model_flops

    L, h, a, g, f, v, s, b = 3, 1024, 16, 4, 2816, 8000, 512, 4
    graph = load_graph(ModelFile("examples/llama.tg", params=(
        ("LAYERS", L), ("HIDDEN", h), ("HEADS", a), ("KV_HEADS", g), ("FFN", f), ("VOCAB", v), ("SEQ", s),
        ("BATCH", b))))
    want = b * s * (12 * L * h * h * (1 + g / a + s / h) + 18 * L * f * h + 6 * v * h)
    assert model_flops(graph) == pytest.approx(want, rel=1e-12)


def test_tokens_per_s_is_the_whole_jobs(tmp_path):
    out = tmp_path / "r.json"
    assert main(["compile", "examples/llama.tg", "--param", "LAYERS=2", "--param", "BATCH=32", "--param", "SEQ=1024",
                 "--platform", "selene", "--nodes", "2", "--train", "--optimizer", "adam", "--parallel",
                 "tensor=2,pipeline=2", "--json", str(out)]) == 0
    par = json.loads(out.read_text())["parallel"]
    assert par["tokens_per_s"] == pytest.approx(32 * 1024 / par["step_time"])
    assert par["gpus"] == 16


# -- platforms -----------------------------------------------------------------------------------

def test_nvl72_is_one_nvlink_domain_of_18_trays():
    from mapper.parallel.collectives import network
    from mapper.platform.cluster import domain_view, flat_platform

    plat = with_nodes(load_platform("gb200-nvl72"), 36)
    assert plat.cluster.nodes == 36 and sum(d.kind == "gpu" for d in plat.devices) == 4
    net = network(domain_view(plat))
    assert net.gpus_per_node == 72 and net.nodes == 2
    assert net.intra_gbs == pytest.approx(900 * 0.824)  # NVLink across the trays of a rack
    assert net.node_gbs == pytest.approx(18 * 4 * 50 * 0.96)  # the rack's NICs
    small = flat_platform(with_nodes(load_platform("gb200-nvl72"), 2))
    domain = next(sw for sw in small.switches if sw.name == "domain0")
    assert len(domain.ports) == 8 and domain.bandwidth_gbs == 900.0
    part = network(domain_view(with_nodes(load_platform("gb200-nvl72"), 64)))  # 256 GPUs: 4 segments of 16 trays
    assert part.gpus_per_node == 64 and part.nodes == 4


def test_new_platforms_and_their_formats():
    from mapper.costing.precision import require_format

    for name, memory, formats in [("dgx-h200", 140, ("fp8",)), ("dgx-b200", 179, ("fp8", "mxfp8", "nvfp4")),
                                  ("gb200-tray", 173, ("fp8", "mxfp8", "nvfp4")), ("dgx-h100", 80, ("fp8",))]:
        plat = load_platform(name)
        gpu = next(d for d in plat.devices if d.kind == "gpu")
        assert gpu.memory_gib == memory
        for fmt in formats:
            require_format(plat, fmt)
    for fmt in ("mxfp8", "nvfp4"):  # Hopper has no MX or NVFP4 tensor-core formats
        with pytest.raises(OptionsError, match=fmt):
            require_format(load_platform("dgx-h200"), fmt)
    assert with_nodes(load_platform("dgx-h100-superpod"), 1024).cluster.nodes == 1024
    for name in ("dgx-h200-superpod", "dgx-b200-superpod"):
        assert load_platform(name).cluster is not None


def test_the_cluster_planner_prices_fp8_blocks_at_the_fp8_rate():
    plat = with_nodes(load_platform("dgx-h100-superpod"), 2)
    steps = {}
    for fmt in ("bf16", "fp8"):
        g = with_precision(_llama(layers=16, batch=256), fmt)
        ch = plan_cluster(g, plat, LayoutSpec(tensor=1, pipeline=1, micro_batch=1, zero=1, recompute="none"),
                          "adam", lambda x: fuse_for(x, plat), precision=fmt)
        steps[fmt] = ch.best.step
        assert ch.to_json()["plan"]["precision"] == fmt
    # the GEMMs some 1.76x faster (FP8's measured share of its peak against BF16's), less their casts;
    # the LM head, attention and sync not at all
    assert steps["fp8"] < 0.85 * steps["bf16"]


def test_cost_takes_precision(capsys):
    args = ["cost", "examples/llama.tg", "--param", "LAYERS=1", "--param", "BATCH=2", "--param", "SEQ=4096",
            "--platform", "dgx-b200", "--json"]
    assert main(args) == 0
    base = json.loads(capsys.readouterr().out)
    assert main([*args, "--precision", "nvfp4"]) == 0
    low = json.loads(capsys.readouterr().out)

    def gemm_time(doc):
        row = next(t for t in doc["tasks"] if t["name"] == "h1.mlp.matmul")
        return min(x for x in row["time"] if x is not None)

    assert gemm_time(low) < 0.5 * gemm_time(base)
    assert main(["cost", "examples/llama.tg", "--platform", "dgx-h100", "--precision", "nvfp4"]) == 2
    assert "nvfp4" in capsys.readouterr().err


def test_a_router_stays_in_16_bit(tmp_path):
    src = tmp_path / "r.tg"
    src.write_text("graph r {\n  input x : f16[64, 128]\n  score = matmul(x, weight f16[128, 8])\n"
                   "  gate = softmax(score)\n  up = matmul(x, weight f16[128, 128])\n"
                   "  y = matmul(up, weight f16[128, 8])\n  out = add(y, gate)\n  output out\n}\n")
    g = with_precision(load_graph(ModelFile(str(src))), "mxfp8")
    assert {t.name: t.precision for t in g.tasks if t.op == "matmul"} == {"score": "", "up": "mxfp8", "y": "mxfp8"}


def test_run_takes_precision_as_compile_does(capsys):
    """``mapper run --precision`` prices the modelled GPUs' GEMMs in the format; a GPU without it exits 2."""
    from pathlib import Path

    from mapper.cli import main

    example = Path(__file__).resolve().parents[1] / "examples" / "gpt2_block.tg"
    args = ["run", str(example), "--param", "S=64", "--repeats", "1", "-q", "--no-check"]
    assert main([*args, "--platform", "dgx-h100", "--precision", "fp8"]) == 0
    capsys.readouterr()
    assert main([*args, "--platform", "dgx-a100", "--precision", "fp8"]) == 2
    assert "no fp8 tensor rate" in capsys.readouterr().err
