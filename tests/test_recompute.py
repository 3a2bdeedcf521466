"""Per-module recomputation (recompute=MOD+MOD) and uneven end chunks (first=, last=)."""

from __future__ import annotations

import pytest

from mapper.cli import main
from mapper.cluster.blocks import block_graph, cut_blocks
from mapper.cluster.layers import chunk_starts, layer_counts
from mapper.cluster.model import PlanModel
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.profile import Profile
from mapper.cluster.recompute import BIT, mask, tag_block
from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.errors import OptionsError
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.mapping.pipeline import pipelined
from mapper.parallel.collectives import network, send
from mapper.parallel.layout import Layout, LayoutSpec, parse_layout
from mapper.pipeline import compile_graph
from mapper.platform.cluster import domain_view, with_nodes
from mapper.platform.loader import load_platform

S, H, A, F, G = 1024, 1024, 16, 2816, 4  # sequence, hidden, heads, FFN, key-value groups
LLAMA = "examples/llama.tg"


def _llama(layers=2, batch=4):
    return load_graph(ModelFile(LLAMA, params=(("LAYERS", layers), ("HIDDEN", H), ("HEADS", A), ("KV_HEADS", G),
                                               ("FFN", F), ("SEQ", S), ("VOCAB", 4096), ("BATCH", batch))))


def _model(g):
    """The plan model of ``g`` on one Selene node (8 GPUs), f32 gradients."""
    plat = with_nodes(load_platform("selene"), 1)
    prof = Profile(g, plat, "gpu0", lambda x: fuse_for(x, plat), "adam")
    samples = prof.batch // S
    return PlanModel(prof, network(domain_view(plat)), samples, "adam", 80 * 2**30, "fp32"), prof, plat


def _plan(g, nodes, **keys):
    plat = with_nodes(load_platform("selene"), nodes)
    given = LayoutSpec(**{"micro_batch": 1, "zero": 1, "sequence": False, **keys})
    return plan_cluster(g, plat, given, "adam", lambda x: fuse_for(x, plat), precision="bf16").best


@pytest.mark.parametrize("recompute, saved", [
    ("selective", 4 * A * S),  # core_attn: FlashAttention's log-sum-exp rows (its Q, K, V are the checkpoint's)
    ("mlp", 2 * S * H + 6 * S * F),  # the MLP's insides; its input (the norm's) is kept by the checkpoint
    ("layernorm", 4 * S * H),  # the copies of both norms' outputs the GEMMs after them keep
    ("layernorm+mlp", 4 * S * H + 6 * S * F),
    ("core_attn+layernorm+mlp", 4 * A * S + 4 * S * H + 6 * S * F),
])
def test_module_recomputation_frees_what_the_hand_count_says(recompute, saved):
    """One sequence per micro-batch through one pipeline stage: the activations of a layer are
    Korthikanti's count without scores (tests/test_training_memory.py); recomputing modules frees
    exactly their insides (and, checkpointed without output, the copies of their output) in each
    of the ``L`` layers."""
    layers = 2
    g = _llama(layers, batch=8)
    none = _plan(g, 1, tensor=1, pipeline=1, data=8, recompute="none")
    est = _plan(g, 1, tensor=1, pipeline=1, data=8, recompute=recompute)
    assert none.memory["activations"] - est.memory["activations"] == pytest.approx(layers * saved, rel=1e-9)


def test_module_recomputation_costs_its_forward_again():
    """The MLP's kernels (its norm, GEMMs and SwiGLU; the residual add is fused into the last GEMM)
    run again before each backward: the step grows by ``m L`` times their forward."""
    g = _llama(2, batch=8)
    none = _plan(g, 1, tensor=1, pipeline=1, data=8, recompute="none")
    est = _plan(g, 1, tensor=1, pipeline=1, data=8, recompute="mlp")
    _, prof, _ = _model(g)
    mlp = [b for b in prof.blocks if any(g.tasks[t].op == "swiglu" for t in b.tasks)]
    redo = sum(prof.cost(b.signature, 1, 8).forward for b in mlp)  # a micro-batch: 1 of 8 sequences
    assert est.pipeline - none.pipeline == pytest.approx(none.micro_batches * redo, rel=1e-9)


def test_deepseek_modules_are_megatron_cores():
    g = load_graph(ModelFile("examples/deepseek_v3.tg", params=(("LAYERS", 2), ("DENSE_LAYERS", 1), ("SEQ", 128),
                                                                 ("EXPERTS", 8), ("TOPK", 2), ("HIDDEN", 256),
                                                                 ("HEADS", 4), ("VOCAB", 512))))
    names = {}
    for b in cut_blocks(g):
        sub = block_graph(g, b)
        names.update({t.name: {m for m, bit in BIT.items() if bit & bits} for t, bits in zip(sub.tasks, tag_block(sub))})
    assert names["h1.r1.hn"] == {"layernorm"} and names["h1.r1.att"] == {"core_attn"}
    assert names["h1.r1.q"] == names["h1.r1.q.rmsnorm"] == names["h1.r1.kv"] == {"mla_up_proj"}
    assert names["h1.r1.q.matmul"] == names["h1.r1.kr"] == set()  # the down projections are not up_proj's
    assert names["h1.mlp.swiglu"] == {"mlp"} and names["h1.mlp.rmsnorm"] == {"mlp", "layernorm"}
    assert names["h2.router.matmul"] == names["h2.up"] == names["h2.m0"] == {"moe"}
    assert names["h2.ys.swiglu"] == {"moe", "moe_act"}
    assert names["h2.m1.swiglu"] == {"moe", "shared_experts"}
    assert names["h2.out"] == names["logits"] == names["logits.rmsnorm"] == set()


@pytest.mark.parametrize("text, want", [("recompute=mlp+core_attn", "core_attn+mlp"), ("recompute=moe_act", "moe_act"),
                                        ("recompute=selective", "selective")])
def test_recompute_modules_parse_in_order(text, want):
    assert parse_layout(text).recompute == want
    assert mask("selective") == mask("core_attn") == BIT["core_attn"]


@pytest.mark.parametrize("text", ["recompute=attn", "recompute=mlp+mlp", "recompute=mlp+", "first=-1", "first=x",
                                  "last=1.5"])
def test_bad_recompute_and_end_keys(text):
    with pytest.raises(OptionsError):
        parse_layout(text)


@pytest.mark.parametrize("layout, needle", [
    ("tensor=1,pipeline=2,recompute=attn", "recompute"),
    ("tensor=1,pipeline=2,first=1,last=2", "equal share"),  # 8 layers: 5 left for 0 other chunks
    ("tensor=1,pipeline=1,first=8,last=0", "two pipeline chunks"),
])
def test_bad_keys_exit_2(layout, needle, capsys):
    code = main(["compile", LLAMA, "--param", "LAYERS=8", "--param", "BATCH=16", "--platform", "selene",
                 "--nodes", "1", "--train", "--parallel", layout])
    assert code == 2 and needle in capsys.readouterr().err


def test_layer_counts_and_chunk_starts():
    assert layer_counts(126, 64, 1, 1) == (1,) + (2,) * 62 + (1,)  # Llama 3.1 405B on PP16 VP4
    assert layer_counts(61, 16, 4, 1) == (4,) * 15 + (1,)  # DeepSeek-V3's (4, 4) layout
    assert layer_counts(8, 4, 2, None) == (2, 2, 2, 2)
    assert isinstance(layer_counts(8, 4, 1, 2), str)  # 5 layers left for 2 chunks
    assert isinstance(layer_counts(8, 2, 3, 4), str)  # 1 layer left for none
    # blocks: embedding, 2 per layer, final norm, head; layers begin at 1, 3, 5, 7
    starts = (1, 3, 5, 7)
    assert chunk_starts(starts, (1, 2, 1), 11) == (0, 3, 7)
    assert chunk_starts(starts, (0, 4, 0), 11) == (0, 1, 9)  # the embedding alone, the head and its norm alone


def test_uneven_end_chunks_give_the_hand_pipeline_time():
    """8 layers on 2 stages, first=3,last=5: rank 0 holds the embedding and layers 0-2, rank 1 the
    rest and the head; each rank's time is its blocks' forward and backward and the send between,
    and the step ``m T_max + (sum T - T_max)`` plus the gradient synchronisation."""
    g = _llama(8, batch=8)
    model, prof, plat = _model(g)
    est = model.estimate(Layout(1, 2, 4, 1, 1, "none", 1, False, first=3, last=5))
    layer_at = [i for i, b in enumerate(prof.blocks) if any(g.tasks[t].op == "attention" for t in b.tasks)]
    cut = layer_at[3]
    assert est.chunks == (0, cut)
    costs = [prof.cost(b.signature, 1, 8) for b in prof.blocks]
    hop = 2 * send(network(domain_view(plat)), prof.blocks[cut - 1].out_bytes / 8, False)
    t0 = sum(c.forward + c.backward for c in costs[:cut]) + hop
    t1 = sum(c.forward + c.backward for c in costs[cut:])
    assert est.rank_times == pytest.approx((t0, t1), rel=1e-9)
    assert est.pipeline == pytest.approx(pipelined(t0 + t1, max(t0, t1), est.micro_batches), rel=1e-9)
    assert est.layout.first == 3 and "first chunk 3 layers" in est.layout.label()


def test_uneven_interleaved_chunks_and_memory_per_stage():
    """4 chunks over 2 ranks with the ends one layer each: the middle chunks 3 layers each; the
    interleaved closed form over the ranks' sums; the first rank keeps more in flight."""
    g = _llama(8, batch=8)
    est = _model(g)[0].estimate(Layout(1, 2, 4, 1, 2, "none", 1, False, first=1, last=1))
    per = [est.chunks[i + 1] - est.chunks[i] for i in range(3)]
    assert per == [1 + 2, 6, 6]  # embedding + one layer, three layers, three layers
    ranks = est.rank_times
    assert est.pipeline == pytest.approx(pipelined(sum(ranks), max(ranks), est.micro_batches, 2), rel=1e-9)
    assert len(est.rank_memory) == 2 and est.rank_memory[0] > est.rank_memory[1]


@pytest.mark.parametrize("layout", ["tensor=2,pipeline=2,first=3,last=5,recompute=layernorm+mlp",
                                    "tensor=1,pipeline=2,interleave=2,first=1,last=1,recompute=core_attn"])
def test_plan_graphs_of_new_keys_pass_the_validator(layout):
    g = _llama(8, batch=8)
    plat = with_nodes(load_platform("selene"), 1)
    est = plan_cluster(g, plat, parse_layout(layout + ",micro_batch=1"), "adam", lambda x: fuse_for(x, plat),
                       precision="bf16").best
    graph = plan_graph(est, g.name)
    result = compile_graph(graph, replica_platform(plat, "gpu0", est.layout.pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)


@pytest.mark.parametrize("text", ["first=1", "last=0", "recompute=mlp"])
def test_serving_layouts_refuse_the_training_keys(text):
    from mapper.serving.search import layouts as serving_layouts

    with pytest.raises(OptionsError, match="training layouts"):
        serving_layouts(8, 32, 10, 8, parse_layout("tensor=2," + text))
