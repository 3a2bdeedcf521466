"""Megatron-Core's hierarchical context parallelism (``cp=a2a+p2p,cp_a2a=K``: an all-to-all over
``K`` consecutive context ranks, a ring over the other ``C / K``): its time against hand values, the
ring and Ulysses as its ends, its memory, where its groups lie, the combinations that exit 2, its
plan graph through the validator and the JSON report."""

from __future__ import annotations

import json

import pytest
from small_llama import LLAMA, assert_plan_graph_validates, llama_graph, plan_on, superpod

from mapper.cli import main
from mapper.cluster.search import _setup
from mapper.costing.fusion import fuse_for
from mapper.parallel.collectives import send
from mapper.parallel.layout import Layout

#: A small Llama: 2 layers, 8 heads of 32 (multi-head), 4,096-token sequences.
SIZES = {"LAYERS": 2, "HIDDEN": 256, "HEADS": 8, "KV_HEADS": 8, "FFN": 512, "VOCAB": 1000, "SEQ": 4096,
         "BATCH": 8}
DH = SIZES["HIDDEN"] // SIZES["HEADS"]


def _model(nodes=2, **over):
    plat = superpod(nodes)
    return _setup(llama_graph(SIZES, **over), plat, "adam", lambda x: fuse_for(x, plat)).model


def _args(layout, **over):
    return ["compile", LLAMA, *(x for k, v in {**SIZES, **over}.items() for x in ("--param", f"{k}={v}")),
            "--platform", "dgx-h100-superpod", "--nodes", "2", "--train", "--optimizer", "adam",
            "--parallel", layout, "-q"]


def _attention_blocks(pm, t, b, c):
    costs = pm.block_costs(t, b, c)
    return costs, [i for i, x in enumerate(costs) if x.attention > 0]


@pytest.mark.parametrize("c, k", [(4, 2), (8, 2), (8, 4)])
def test_all_to_all_then_ring_against_hand_values(c, k):
    """On one node: four all-to-alls over K ranks a pass (launch + (K-1) (latency + n/K / B) each),
    then a ring of P = C/K steps whose attention is priced over S/P positions on heads/(t K) heads
    beside sends of that step's K and V (latency + n / B):
    forward A + a'_f + (P-1) max(a'_f, send(n)), backward A + 2 max(a'_b, send(n)) + (P-2)
    max(a'_b, send(2n)); the block holds one ring step at S/C already."""
    pm = _model()
    t, b, s, h, p = 1, 1, SIZES["SEQ"], SIZES["HIDDEN"], c // k
    rings = pm.rings(Layout(t, 1, 16 // c, context=c, cp="a2a+p2p", cp_a2a=k))
    costs, attn = _attention_blocks(pm, t, b, c)
    assert len(attn) == SIZES["LAYERS"]
    net = pm.net
    each = h // t * 2.0 * b * s // c  # Q, K, V and the output of the rank's S/C positions, 16-bit
    a2a = 4 * (net.launch + (k - 1) * (net.intra_latency + each / k / (net.intra_gbs * 1e9)))
    n = 2 * (SIZES["KV_HEADS"] // (t * k)) * DH * 2.0 * b * s // p  # K and V of heads/(t K) over S/P
    s1 = net.intra_latency + n / (net.intra_gbs * 1e9)
    s2 = net.intra_latency + 2 * n / (net.intra_gbs * 1e9)
    assert (s1, s2) == (pytest.approx(send(net, n, False), rel=1e-12), pytest.approx(send(net, 2 * n, False), rel=1e-12))
    task = next(x for x in pm.profile.graph.tasks if x.op == "attention")
    a_f, a_b = pm.attend(task, t * k, s // p, b)
    fwd = a2a + a_f + (p - 1) * max(a_f, s1)
    bwd = a2a + 2 * max(a_b, s1) + (p - 2) * max(a_b, s2)
    for i in attn:
        r, x = rings[i], costs[i]
        assert r.forward == pytest.approx(fwd - x.attention, rel=1e-12)
        assert r.backward == pytest.approx(bwd - x.attention_backward, rel=1e-12)
        assert r.exposed_forward == pytest.approx(a2a + (p - 1) * (max(a_f, s1) - a_f), rel=1e-12)
        assert r.exposed_backward == pytest.approx(bwd - p * a_b, rel=1e-12)
        assert r.buffers == pytest.approx(4 * each + max(p, 4) * n) and r.kept == pytest.approx(each)
    assert all(r.forward == 0.0 for i, r in enumerate(rings) if i not in attn)


def test_the_ring_and_ulysses_are_its_ends():
    """cp_a2a=1 is the ring (no all-to-all; its step priced at S/C is the block's own), cp_a2a=C
    Ulysses (one step over the whole sequence): the same times, buffers and kept bytes."""
    pm = _model()
    for c in (2, 4, 8):
        lay = Layout(1, 1, 16 // c, context=c)
        for ends, kind in ((1, "ring"), (c, "a2a")):
            ours = pm.rings(Layout(1, 1, 16 // c, context=c, cp="a2a+p2p", cp_a2a=ends))
            theirs = pm.rings(Layout(1, 1, 16 // c, context=c, cp=kind))
            for x, y in zip(ours, theirs):
                for f in ("forward", "backward", "exposed_forward", "exposed_backward", "buffers", "kept"):
                    assert getattr(x, f) == pytest.approx(getattr(y, f), rel=1e-12, abs=1e-18), (c, kind, f)
        assert pm.estimate(lay) is not None


def test_inside_a_node_and_a_ring_across():
    """16 context ranks on two nodes of 8: all-to-alls over the 8 ranks of a node (no fabric), a
    ring of 2 whose sends cross it (latency + n / the rank's NIC share)."""
    pm = _model(HEADS=16, KV_HEADS=16)
    c, k, b, s, h = 16, 8, 1, SIZES["SEQ"], SIZES["HIDDEN"]
    assert pm.shares(Layout(1, 1, 1, context=c, cp="a2a+p2p", cp_a2a=k), "cp_a2a") == (8,)
    assert pm.shares(Layout(1, 1, 1, context=c, cp="a2a+p2p", cp_a2a=k), "cp_p2p") == (1,)
    r = pm.rings(Layout(1, 1, 1, context=c, cp="a2a+p2p", cp_a2a=k))
    costs, attn = _attention_blocks(pm, 1, b, c)
    net = pm.net
    each = h * 2.0 * b * s // c
    a2a = 4 * (net.launch + (k - 1) * (net.intra_latency + each / k / (net.intra_gbs * 1e9)))
    n = 2 * (16 // k) * (h // 16) * 2.0 * b * s // 2
    s1 = net.inter_latency + n / (net.node_gbs / net.gpus_per_node * 1e9)
    task = next(x for x in pm.profile.graph.tasks if x.op == "attention")
    a_f, _ = pm.attend(task, k, s // 2, b)
    assert r[attn[0]].forward == pytest.approx(a2a + a_f + max(a_f, s1) - costs[attn[0]].attention, rel=1e-12)


def test_memory_one_pass_of_all_to_alls_beside_the_ring_buffers():
    """Against the ring of C = 8 (max(8, 4) n of buffers): the all-to-alls' one pass q + k + v + o
    and the ring of P = 4's max(4, 4) n of the same n, and each layer keeps its output once more."""
    pm = _model()
    c, k, s, h = 8, 2, SIZES["SEQ"], SIZES["HIDDEN"]
    ring = pm.estimate(Layout(1, 1, 2, context=c))
    ours = pm.estimate(Layout(1, 1, 2, context=c, cp="a2a+p2p", cp_a2a=k))
    assert ring is not None and ours is not None
    pos = s // c
    n = 2 * SIZES["KV_HEADS"] * DH * 2.0 * pos  # the ring's step over S/C on all heads = ours over S/P on 1/K
    one_pass = 4 * h * 2.0 * pos
    diff = ours.memory["activations"] - ring.memory["activations"]
    assert diff == pytest.approx(one_pass + 4 * n - 8 * n + SIZES["LAYERS"] * h * 2.0 * pos, rel=1e-9)
    assert ours.memory["reserve"] > ring.memory["reserve"]  # two more communicators' NCCL buffers


@pytest.mark.parametrize("layout, words", [
    ("context=4,cp=a2a+p2p,cp_a2a=3", "cp_a2a=3 must divide context=4"),
    ("context=4,cp_a2a=2", "give cp=a2a+p2p with it"),
    ("context=4,cp=ring,cp_a2a=2", "give cp=a2a+p2p with it"),
    ("tensor=4,context=4,cp=a2a+p2p,cp_a2a=2", "tensor x cp_a2a = 4 x 2 ranks whole heads"),
    ("context=1,cp=a2a+p2p", "context=1 has none"),
])
def test_what_it_cannot_take_exits_2(layout, words, capsys):
    assert main(_args(layout, KV_HEADS=4)) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and "OptionsError" not in err


def test_the_planner_chooses_cp_a2a_when_it_is_not_given():
    _, ch = plan_on(llama_graph(SIZES), {"tensor": 1, "pipeline": 1, "context": 8, "cp": "a2a+p2p"})
    assert {e.layout.cp_a2a for e in ch.ranked} <= {1, 2, 4, 8} and ch.best.layout.cp == "a2a+p2p"
    steps = {}
    for k in (1, 2, 4, 8):
        _, one = plan_on(llama_graph(SIZES), {"tensor": 1, "pipeline": 1, "context": 8, "cp": "a2a+p2p", "cp_a2a": k})
        steps[k] = one.best.step
    assert ch.best.step == pytest.approx(min(steps.values()), rel=1e-12)


def test_plan_graph_passes_the_validator_and_reports(tmp_path):
    plat, ch = plan_on(llama_graph(SIZES), {"tensor": 1, "pipeline": 2, "context": 4, "cp": "a2a+p2p", "cp_a2a": 2,
                                            "micro_batch": 1, "interleave": 1})
    lay = ch.best.layout
    assert (lay.cp, lay.cp_a2a) == ("a2a+p2p", 2) and "(a2a 2 + p2p 2)" in lay.label()
    assert_plan_graph_validates(plat, ch, "a2a_p2p.")
    out = tmp_path / "o.json"
    assert main([*_args("tensor=1,pipeline=2,context=4,cp=a2a+p2p,cp_a2a=2"), "--json", str(out)]) == 0
    plan = json.loads(out.read_text())["parallel"]["plan"]
    assert (plan["context"], plan["cp"], plan["cp_a2a"]) == (4, "a2a+p2p", 2)
