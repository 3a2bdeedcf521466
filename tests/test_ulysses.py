"""Ulysses context parallelism (``cp=a2a``, DeepSpeed-Ulysses, Jacobs et al., arXiv 2309.14509):
its four all-to-alls a pass against hand values and volumes, its attention priced over whole
sequences on heads/(t C) heads at that length's rate (hand-worked under the half-length), what it
keeps in memory, the heads it needs (exit 2 otherwise), its plan graph through the validator, the
JSON report, and ``--parallel auto`` choosing among the ring, the all-gather, the all-to-all and
the hierarchical a2a+p2p as a full sweep would; and auto's uneven first and last pipeline chunks
(Megatron-Core's cuts by layers)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from small_llama import LLAMA, assert_plan_graph_validates, llama_graph, plan_on, superpod

import mapper.cluster.sweep as sweep
from mapper.cli import main
from mapper.cluster.context import a2a_heads, a2a_reason
from mapper.cluster.layers import auto_ends, layer_counts
from mapper.cluster.model import PlanModel
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.profile import Profile
from mapper.cluster.search import _setup, plan_cluster
from mapper.cluster.space import Variants, layouts
from mapper.cluster.ulysses import AttentionPrices, cut_attention
from mapper.costing.fusion import fuse_for
from mapper.costing.latency import estimate
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.collectives import collective
from mapper.parallel.layout import Layout, LayoutSpec
from mapper.pipeline import compile_graph
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

#: A small Llama: 2 layers, 8 heads of 32, 4 key-value heads (grouped-query), 4,096-token sequences.
SIZES = {"LAYERS": 2, "HIDDEN": 256, "HEADS": 8, "KV_HEADS": 4, "FFN": 512, "VOCAB": 1000, "SEQ": 4096,
         "BATCH": 8}
DH = SIZES["HIDDEN"] // SIZES["HEADS"]


def _graph(**over):
    return llama_graph(SIZES, **over)


def _model(nodes=2, **over):
    plat = superpod(nodes)
    return _setup(_graph(**over), plat, "adam", lambda x: fuse_for(x, plat)).model


def _plan(given, nodes=2, **over):
    return plan_on(_graph(**over), given, nodes)[1]


def _args(layout, **over):
    return ["compile", LLAMA, *(x for k, v in {**SIZES, **over}.items() for x in ("--param", f"{k}={v}")),
            "--platform", "dgx-h100-superpod", "--nodes", "2", "--train", "--optimizer", "adam",
            "--parallel", layout, "-q"]


@pytest.mark.parametrize("kv", [8, 4])
def test_alltoalls_against_hand_values(kv):
    """A rank holds b S/C positions of its heads/t query and output heads and kv/t key and value
    heads; each all-to-all inside a node is launch + (C-1) (latency + n/C / B). Multi-head attention
    (kv = heads): a rank sends 4 x b S h/(t C) x (C-1)/C x 2 bytes a layer forward; fewer with
    grouped-query attention (K and V of kv/heads the width)."""
    pm = _model(KV_HEADS=kv)
    t, c, b, s, h = 2 if kv == 8 else 1, 4, 1, SIZES["SEQ"], SIZES["HIDDEN"]  # t C divides the heads
    lay = Layout(t, 1, 2, context=c, cp="a2a")
    rings, costs = pm.rings(lay), pm.block_costs(t, b, c)
    attn = [i for i, x in enumerate(costs) if x.attention > 0]
    assert len(attn) == SIZES["LAYERS"]
    pos = b * s // c
    q = o = h // t * 2.0 * pos  # heads/t x head_dim, 16-bit, over the rank's S/C positions
    k = v = kv * DH // t * 2.0 * pos
    net = pm.net

    def hand(n):
        return net.launch + (c - 1) * (net.intra_latency + n / c / (net.intra_gbs * 1e9))

    comm = hand(q) + hand(k) + hand(v) + hand(o)
    assert comm == pytest.approx(sum(collective(net, "alltoall", n, c, c)[0] for n in (q, k, v, o)), rel=1e-12)
    sent = (q + k + v + o) * (c - 1) / c  # what a rank sends a layer forward (as much backward)
    if kv == SIZES["HEADS"]:
        assert sent == pytest.approx(4 * b * s * h / (t * c) * (c - 1) / c * 2)
    else:
        assert sent == pytest.approx(2 * b * s * h / (t * c) * (1 + kv / SIZES["HEADS"]) * (c - 1) / c * 2)
    task = next(x for x in pm.profile.graph.tasks if x.op == "attention")
    whole_f, whole_b = pm.attend(task, t * c, s, b)  # whole sequences on heads/(t C) heads
    assert pm.attend(task, t, s // c, b) == (costs[attn[0]].attention, costs[attn[0]].attention_backward)
    for i in attn:
        r, x = rings[i], costs[i]
        assert r.exposed_forward == pytest.approx(comm, rel=1e-12)
        assert r.exposed_backward == pytest.approx(comm, rel=1e-12)
        # the block holds one ring step's attention (S/C on heads/t); Ulysses runs the whole sequence instead
        assert r.forward == pytest.approx(whole_f - x.attention + comm, rel=1e-12)
        assert r.backward == pytest.approx(whole_b - x.attention_backward + comm, rel=1e-12)
        assert r.step_bytes == pytest.approx(q + k + v + o) and r.buffers == pytest.approx(q + k + v + o)
        assert r.kept == pytest.approx(o)
    assert all(r.forward == 0.0 for i, r in enumerate(rings) if i not in attn)
    # t C = 16 ranks over two nodes (16 heads): the collective model's all-to-all across them (pairwise or
    # hierarchical)
    across = _model(HEADS=16, KV_HEADS=16).rings(Layout(2, 1, 1, context=8, cp="a2a"))[attn[0]]
    pos8 = b * s // 8
    widths = (h // 2 * 2.0,) * 4
    assert across.exposed_forward == pytest.approx(sum(collective(net, "alltoall", w * pos8, 8, 4)[0]
                                                       for w in widths), rel=1e-12)


def test_a2a_memory_keeps_the_output_twice_and_one_pass_of_buffers():
    """Against the ring on the same layout (one stage, one micro-batch in flight): the ring's
    max(C, 4) buffers of K and V give way to one pass of the four all-to-alls' tensors, and each
    layer keeps its output in the heads' layout too; recomputing core_attn frees that copy."""
    pm = _model(KV_HEADS=8)
    t, c, s, h = 2, 4, SIZES["SEQ"], SIZES["HIDDEN"]
    pos = s // c
    ring = pm.estimate(Layout(t, 1, 2, context=c))
    a2a = pm.estimate(Layout(t, 1, 2, context=c, cp="a2a"))
    assert ring is not None and a2a is not None
    kv_step = 2 * (8 // t) * DH * 2.0 * pos
    one_pass = 4 * h // t * 2.0 * pos  # q, k, v and o of the rank's heads, multi-head attention
    out = h // t * 2.0 * pos
    diff = a2a.memory["activations"] - ring.memory["activations"]
    assert diff == pytest.approx(one_pass - max(c, 4) * kv_step + SIZES["LAYERS"] * out, rel=1e-9)
    redo_ring = pm.estimate(Layout(t, 1, 2, context=c, recompute="selective"))
    redo_a2a = pm.estimate(Layout(t, 1, 2, context=c, recompute="selective", cp="a2a"))
    assert redo_ring is not None and redo_a2a is not None
    diff = redo_a2a.memory["activations"] - redo_ring.memory["activations"]
    assert diff == pytest.approx(one_pass - max(c, 4) * kv_step, rel=1e-9)


def test_heads_the_all_to_all_needs():
    g = _graph(KV_HEADS=2)
    assert a2a_heads(g) == 2
    assert a2a_reason(g, 1, 2) == "" and a2a_reason(g, 2, 1) == ""
    why = a2a_reason(g, 2, 2)
    assert "8 heads and 2 key-value heads" in why and "divide by 4" in why
    assert a2a_heads(_graph(KV_HEADS=8)) == 8


@pytest.mark.parametrize("layout, words", [
    ("tensor=2,context=2,cp=a2a", "8 heads and 2 key-value heads, which do not divide by 4"),
    ("context=4,cp=a2a", "tensor x context = 1 x 4 ranks whole heads"),
])
def test_a2a_that_cannot_cut_the_heads_exits_2(layout, words, capsys):
    assert main(_args(layout, KV_HEADS=2)) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and "OptionsError" not in err


def test_auto_with_a2a_given_keeps_the_tensor_degrees_the_heads_allow():
    ch = _plan({"context": 2, "cp": "a2a"}, KV_HEADS=2)  # t C must divide 2: tensor 1 only
    assert ch.ranked and all(e.layout.tensor == 1 and e.layout.cp == "a2a" for e in ch.ranked)


def test_a2a_plan_graph_passes_the_validator_and_reports(tmp_path):
    plat, ch = plan_on(_graph(), {"tensor": 2, "pipeline": 2, "context": 2, "cp": "a2a", "micro_batch": 1,
                                  "interleave": 1})
    assert ch.best.layout.cp == "a2a" and "(a2a)" in ch.best.layout.label()
    assert_plan_graph_validates(plat, ch, "a2a.")
    out = tmp_path / "o.json"
    assert main([*_args("tensor=2,pipeline=2,context=2,cp=a2a"), "--json", str(out)]) == 0
    plan = json.loads(out.read_text())["parallel"]["plan"]
    assert plan["context"] == 2 and plan["cp"] == "a2a"


def test_auto_picks_the_fastest_kind_of_context_parallelism():
    """With the kind left to it, auto's choice is the fastest of the four kinds each planned alone
    (a brute force over the kind, a2a+p2p's all-to-all degree left to the planner); a given context
    degree without ``cp`` is the ring."""
    wide = {"SEQ": 4096, "BATCH": 2, "HIDDEN": 1024, "HEADS": 32, "KV_HEADS": 32}
    for given, over, kind, k in (({"tensor": 2}, {"SEQ": 16384, "BATCH": 2, "KV_HEADS": 8}, "ring", 1),
                                 # short sequences over 16 ranks on two nodes: the ring's sends outlast its steps,
                                 # and the all-to-all is cheaper inside a node (a2a 8) with a ring of 2 across
                                 ({"tensor": 1, "pipeline": 1, "data": 1}, wide, "a2a+p2p", 8)):
        auto = _plan(given, **over)
        alone = {cp: _plan({**given, "cp": cp}, **over).best for cp in ("ring", "allgather", "a2a", "a2a+p2p")}
        fitting = {cp: e.step for cp, e in alone.items() if e.fits}
        assert auto.best.fits and auto.best.step == pytest.approx(min(fitting.values()), rel=1e-12)
        assert auto.best.layout.context > 1 and auto.best.layout.cp == kind == min(fitting, key=fitting.__getitem__)
        assert auto.best.layout.cp_a2a == k
    fixed = _plan({"context": 16, "tensor": 1}, **wide)
    assert {e.layout.cp for e in fixed.ranked} == {"ring"}


def test_pruned_search_with_every_kind_is_a_full_sweep(monkeypatch):
    """The memory and time floors set layouts of every kind aside without changing the choice."""
    over = {"SEQ": 2048, "BATCH": 4, "KV_HEADS": 8}
    pruned = _plan({}, **over)
    monkeypatch.setattr(sweep, "KEPT", 10**9)
    monkeypatch.setattr(PlanModel, "memory_floor", lambda self, lay: 0.0)
    full = _plan({}, **over)
    assert {e.layout.cp for e in full.ranked if e.layout.context > 1} == {"ring", "allgather", "a2a", "a2a+p2p"}
    assert full.best.layout == pruned.best.layout and full.best.step == pytest.approx(pruned.best.step, rel=1e-12)


def test_uneven_ends_auto_tries():
    """Megatron-Core's cuts by layers: Llama 3 405B's 126 layers on 64 chunks, one layer less at each
    end; equal shares where the layers divide, and one more in the middle with lighter ends."""
    assert auto_ends(126, 64) == [(1, 1)]
    assert auto_ends(32, 4) == [(8, 8), (7, 7)]
    assert auto_ends(61, 16) == [(3, 2)]
    assert auto_ends(32, 2) == [] and auto_ends(32, 64) == []
    for layers, chunks in ((126, 64), (80, 8), (61, 16), (10, 3)):
        for first, last in auto_ends(layers, chunks):
            counts = layer_counts(layers, chunks, first, last)
            assert not isinstance(counts, str) and max(counts[1:-1]) >= max(first, last)


def test_the_variants_auto_tries_of_a_layout():
    """Uneven cuts only when the planner chooses the pipeline; the kinds of context parallelism
    only when it chooses the context degree, the all-to-all where tensor x context divides the heads,
    a2a+p2p at each all-to-all degree strictly between 1 and the context degree that tensor x cp_a2a
    divides the heads at."""
    lay = Layout(2, 4, 2)
    free = Variants(LayoutSpec(tensor=2), 8, 6)
    assert [(x.first, x.last) for x in free.all(lay)] == [(None, None), (1, 1), (0, 0)] and free.count(lay) == 3
    assert Variants(LayoutSpec(tensor=2, pipeline=4), 8, 6).all(lay) == [lay]
    ctx = Layout(2, 1, 2, context=4)
    assert [(x.cp, x.cp_a2a) for x in Variants(LayoutSpec(), 8, 6).all(ctx)] == [
        ("ring", 1), ("allgather", 1), ("a2a", 1), ("a2a+p2p", 2)]
    # 4 heads over 8 ranks: no Ulysses, but an all-to-all over 2 of the context ranks (tensor x cp_a2a = 4)
    assert [(x.cp, x.cp_a2a) for x in Variants(LayoutSpec(), 4, 6).all(ctx)] == [
        ("ring", 1), ("allgather", 1), ("a2a+p2p", 2)]
    assert [x.cp_a2a for x in Variants(LayoutSpec(), 16, 6).all(Layout(1, 1, 1, context=16))][3:] == [2, 4, 8]
    assert Variants(LayoutSpec(context=4), 8, 6).all(ctx) == [ctx]
    assert all(x.first is None for x in layouts(16, 8, 16, 12, LayoutSpec(tensor=2)))


def test_auto_picks_an_uneven_cut_where_it_is_faster():
    """A 70B Llama (80 layers) on 32 GPUs: 8 interleaved chunks of 7, 11 x 6 and 7 layers run a
    shorter step than the chunks cut by time; the planner's estimate is the pinned layout's."""
    plat = with_nodes(load_platform("dgx-h100-superpod"), 4)
    g = load_graph(ModelFile(LLAMA, params=(("LAYERS", 80), ("HIDDEN", 8192), ("HEADS", 64), ("KV_HEADS", 8),
                                            ("FFN", 28672), ("VOCAB", 128256), ("SEQ", 4096), ("BATCH", 32))))
    keys = {"tensor": 8, "recompute": "none", "zero": 1, "sequence": True}
    ch = plan_cluster(g, plat, LayoutSpec(**keys), "adam", lambda x: fuse_for(x, plat))
    lay = ch.best.layout
    assert ch.best.fits and (lay.first, lay.last) == (7, 7) and lay.pipeline * lay.interleave == 8
    by_time = next(e for e in ch.ranked if e.layout == replace(lay, first=None, last=None))
    assert ch.best.step < by_time.step
    pinned = plan_cluster(g, plat, LayoutSpec(**{**keys, "pipeline": lay.pipeline, "interleave": lay.interleave,
                                                 "data": lay.data, "micro_batch": lay.micro_batch, "first": 7,
                                                 "last": 7}), "adam", lambda x: fuse_for(x, plat))
    assert pinned.best.step == pytest.approx(ch.best.step, rel=1e-12)
    graph = plan_graph(ch.best, "llama")
    result = compile_graph(graph, replica_platform(plat, "gpu0", lay.pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(ch.best.step, rel=0.05)


def test_pruned_search_with_uneven_cuts_is_a_full_sweep(monkeypatch):
    over = {"LAYERS": 6, "SEQ": 1024, "BATCH": 16, "KV_HEADS": 8}
    pruned = _plan({"tensor": 2}, **over)
    monkeypatch.setattr(sweep, "KEPT", 10**9)
    monkeypatch.setattr(PlanModel, "memory_floor", lambda self, lay: 0.0)
    full = _plan({"tensor": 2}, **over)
    assert {(e.layout.first, e.layout.last) for e in full.ranked} > {(None, None)}
    assert full.best.layout == pruned.best.layout and full.best.step == pytest.approx(pruned.best.step, rel=1e-12)


def test_ulysses_attention_runs_whole_sequences_at_their_rate():
    """Hand-worked, cuDNN's causal attention on an H100 (0.60 x s / (s + 270) of 989.4 TFLOP/s
    forward, 0.80 of that backward, 2.5x the FLOPs): Llama 3 8B's attention (32 heads of 128, 8
    key-value heads), 33 sequences of S = 32,768 over C = 8 ranks (33 x 4 heads x 256 query tiles =
    256 waves of 132 SMs, as the ring step's 33 x 32 x 32). A ring step runs S/C positions on all 32
    heads, Ulysses all S on 4: FLOPs b h (4 dh + 5) s (s + 1) / 2 each, the same but for the causal
    diagonal, but Ulysses' kernel runs at s = 32,768's rate, the step's at 4,096's: 0.946x the time
    of C steps forward and backward."""
    plat = load_platform("dgx-h100")
    s, c, b, dh = 32768, 8, 33, 128
    graph = load_graph(ModelFile(LLAMA, params=(("LAYERS", 1), ("HIDDEN", 4096), ("HEADS", 32), ("KV_HEADS", 8),
                                                ("FFN", 14336), ("VOCAB", 1000), ("SEQ", s), ("BATCH", b))))
    attend = AttentionPrices(Profile(graph, plat, "gpu0", lambda g: fuse_for(g, plat), "adam"))
    task = next(t for t in graph.tasks if t.op == "attention")
    gpu = next(d for d in plat.devices if d.kind == "gpu")

    def hand(seq, heads):  # compute seconds forward and backward
        flops = b * heads * (4 * dh + 5) * seq * (seq + 1) / 2
        rate = 0.60 * seq / (seq + 270) * 989.4e12
        return flops / rate, 2.5 * flops / (0.80 * rate)

    whole, step = cut_attention(task, c, s, b), cut_attention(task, 1, s // c, b)
    for shape, (seq, heads) in ((whole, (s, 4)), (step, (s // c, 32))):
        est = estimate(shape, "attention", gpu)
        assert est.t_parallel == pytest.approx(hand(seq, heads)[0], rel=1e-9)
    u_f, u_b = attend(task, c, s, b)
    r_f, r_b = attend(task, 1, s // c, b)
    assert u_f == pytest.approx(estimate(whole, "attention", gpu).time, rel=1e-12)
    # Ulysses' compute over C steps': the FLOPs' (s + 1) / (s + C), each at (s + 270) / s against (s/C + 270) / (s/C)
    ratio = (s + 1) / (s + c) * ((s + 270) / s) / ((s // c + 270) / (s // c))
    assert ratio == pytest.approx(0.946, abs=5e-4)
    assert hand(s, 4)[0] / (c * hand(s // c, 32)[0]) == pytest.approx(ratio, rel=1e-12)
    assert hand(s, 4)[1] / (c * hand(s // c, 32)[1]) == pytest.approx(ratio, rel=1e-12)
    # the prices (launches and memory time besides) keep Ulysses under C ring steps both ways
    assert u_f < c * r_f and u_b < c * r_b
