"""Context parallelism in the cluster planner (``--parallel ...,context=C``): memory against a
hand formula, the ring's K/V sends against hand values, the plan graph through the validator,
the JSON report, and bad ``context=`` values exiting 2."""

from __future__ import annotations

import json

import pytest
from small_llama import LLAMA, assert_plan_graph_validates, llama_graph, plan_on, superpod

from mapper.cli import main
from mapper.cluster.context import context_graph
from mapper.cluster.search import _setup
from mapper.costing.fusion import fuse_for
from mapper.parallel.collectives import send
from mapper.parallel.layout import Layout, LayoutSpec, parse_layout

#: A small grouped-query Llama: 2 layers, 8 heads of 32 of which 2 key-value heads, 1,024-token sequences.
SIZES = {"LAYERS": 2, "HIDDEN": 256, "HEADS": 8, "KV_HEADS": 2, "FFN": 512, "VOCAB": 1000, "SEQ": 1024,
         "BATCH": 16}
DH = SIZES["HIDDEN"] // SIZES["HEADS"]


def _graph():
    return llama_graph(SIZES)


def _setup_on(nodes=2):
    plat = superpod(nodes)
    return plat, _setup(_graph(), plat, "adam", lambda x: fuse_for(x, plat)).model


def _plan(layout, nodes=2):
    return plan_on(_graph(), layout, nodes)


def test_layout_keys_parse():
    assert parse_layout("tensor=2,context=4") == LayoutSpec(tensor=2, context=4)
    lay = Layout(2, 1, 4, context=2)
    assert lay.gpus == 16 and lay.replicas == 8 and "context 2" in lay.label()
    assert lay.to_json()["context"] == 2 and Layout(2, 1, 4).to_json()["context"] == 1


def test_context_graph_cuts_sequences():
    g = context_graph(_graph(), 4)
    att = next(t for t in g.tasks if t.op == "attention")
    assert att.attr("seq") == SIZES["SEQ"] // 4
    base = next(t for t in _graph().tasks if t.op == "attention")
    assert att.flops == pytest.approx(base.flops / 4, rel=0.01)  # a quarter of the pairs of each sequence


def test_activation_memory_divides_by_context_plus_ring_buffers():
    """Activations of S/C tokens a rank (Korthikanti et al.'s per-token terms are linear in the
    tokens; fused attention keeps no scores), plus the ring's buffers of one step's S/C positions on
    the rank's KV_HEADS/t heads: max(C, 4) of them (C received forward, K, V and their gradients
    double-buffered backward)."""
    base = {"tensor": 2, "pipeline": 1, "micro_batch": 1, "zero": 1, "recompute": "none", "sequence": True}
    one = _plan({**base, "data": 8, "context": 1})[1].best.memory
    four = _plan({**base, "data": 2, "context": 4})[1].best.memory
    step = 2 * (SIZES["KV_HEADS"] // 2) * DH * 2.0 * SIZES["SEQ"] / 4  # K and V, 16-bit, of S/C positions
    assert four["activations"] == pytest.approx(one["activations"] / 4 + 4 * step, rel=1e-9)
    eight = _plan({**base, "data": 1, "context": 8})[1].best.memory
    assert eight["activations"] == pytest.approx(one["activations"] / 8 + 8 * step / 2, rel=1e-9)
    # the weights are held whole; the optimizer sharded over data x context = 8 replicas both times
    assert four["weights"] == pytest.approx(one["weights"])
    assert four["optimizer"] == pytest.approx(one["optimizer"])


def test_ring_sends_against_hand_values():
    _, pm = _setup_on(2)
    inside = Layout(2, 1, 4, context=2)  # t c = 4 ranks: the ring stays inside a node
    rings = pm.rings(inside)
    costs = pm.block_costs(2, 1, 2)
    attn = [i for i, c in enumerate(costs) if c.attention > 0]
    assert len(attn) == SIZES["LAYERS"]
    n = 2 * (SIZES["KV_HEADS"] // 2) * DH * 2.0 * SIZES["SEQ"] / 2  # one step: the rank's K and V of S/2 positions
    net = pm.net
    k = net.intra_latency + n / (net.intra_gbs * 1e9)
    assert send(net, n, False) == pytest.approx(k)
    for i in attn:
        r, c = rings[i], costs[i]
        assert r.step_bytes == pytest.approx(n)
        assert r.forward == pytest.approx(max(c.attention, k))  # C - 1 = 1 more step, the send under it
        # C = 2: K and V on during the first step, the finished dK and dV home during the second
        assert r.backward == pytest.approx(2 * max(c.attention_backward, k) - c.attention_backward)
        assert r.exposed_forward == pytest.approx(max(0.0, k - c.attention))
    assert all(r.forward == 0.0 for i, r in enumerate(rings) if i not in attn)
    # C = 4 inside a node (t c = 8): 3 more forward steps; backward 2 single sends and 2 double ones
    four, c4 = pm.rings(Layout(2, 1, 2, context=4))[attn[0]], pm.block_costs(2, 1, 4)[attn[0]]
    n4, ab = n / 2, c4.attention_backward
    k4, k42 = net.intra_latency + n4 / (net.intra_gbs * 1e9), net.intra_latency + 2 * n4 / (net.intra_gbs * 1e9)
    assert four.forward == pytest.approx(3 * max(c4.attention, k4))
    assert four.backward == pytest.approx(2 * max(ab, k4) + 2 * max(ab, k42) - ab)
    # t c = 16 > 8 GPUs of a node: the ring's hops cross the fabric at a rank's NIC share
    across = pm.rings(Layout(8, 1, 1, context=2))
    n8 = 2 * 1 * DH * 2.0 * SIZES["SEQ"] / 2  # 2 KV heads over 8 ranks: each keeps one whole head
    c8 = pm.block_costs(8, 1, 2)[attn[0]]
    assert across[attn[0]].forward == pytest.approx(max(c8.attention, net.inter_latency + n8 / (net.rank_gbs * 1e9)))


def test_causal_ring_step_is_half_a_block():
    """Under load balancing every step covers half of an S/C x S/C block: the priced step (a causal
    attention over S/C tokens) runs about half the FLOPs of the same block unmasked."""
    g = context_graph(_graph(), 2)
    att = next(t for t in g.tasks if t.op == "attention")
    from mapper.costing.work import kernel_flops

    s = SIZES["SEQ"] // 2
    assert kernel_flops(att) / att.flops == pytest.approx((s + 1) / (2 * s))


def test_context_plan_graph_passes_the_validator():
    plat, ch = _plan({"tensor": 2, "pipeline": 2, "context": 2, "micro_batch": 1, "interleave": 2})
    assert ch.best.layout.context == 2 and ch.best.layout.data == 2
    assert_plan_graph_validates(plat, ch, "ring.")


def test_context_in_the_json_report(tmp_path):
    out = tmp_path / "o.json"
    assert main(["compile", LLAMA, *(x for k, v in SIZES.items() for x in ("--param", f"{k}={v}")),
                 "--platform", "dgx-h100-superpod", "--nodes", "2", "--train", "--optimizer", "adam",
                 "--parallel", "tensor=2,pipeline=2,context=2", "-q", "--json", str(out)]) == 0
    par = json.loads(out.read_text())["parallel"]
    assert par["plan"]["context"] == 2 and par["plan"]["data"] == 2 and par["gpus"] == 16


@pytest.mark.parametrize("key, words", [("context=3", "does not cut into 2 x 3"),
                                        ("tensor=8,context=4", "does not divide the 16 GPUs"),
                                        ("context=0", "expected an integer from 1"),
                                        ("context=2,cp=tree", "cp='tree': choose one of ring, allgather"),
                                        ("context=1,cp=allgather", "context=1 has none")])
def test_bad_context_exits_2(key, words, capsys):
    args = ["compile", LLAMA, *(x for k, v in SIZES.items() for x in ("--param", f"{k}={v}")),
            "--platform", "dgx-h100-superpod", "--nodes", "2", "--train", "--optimizer", "adam",
            "--parallel", key, "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_training_keeps_logits_cut_by_the_vocabulary():
    """Megatron's vocabulary-parallel cross entropy: the LM head's logits are not all-gathered in a
    training step (a 1M-token sequence's logits would outgrow a GPU)."""
    _, pm = _setup_on(1)
    head = pm.block_costs(2, 1)[-1]
    assert head.params == SIZES["HIDDEN"] * SIZES["VOCAB"] / 2  # the head cut by columns
    assert not [c for c in head.collectives if c[0] == "allgather"]


def test_context_in_an_inference_layout_exits_2(capsys):
    sizes = {k: v for k, v in SIZES.items() if k not in ("SEQ", "BATCH")}
    assert main(["compile", LLAMA, *(x for k, v in sizes.items() for x in ("--param", f"{k}={v}")),
                 "--platform", "dgx-h100-superpod", "--nodes", "1", "--inference", "prefill=128,decode=16,batch=4",
                 "--parallel", "tensor=2,context=2", "-q"]) == 2
    assert "context applies to training layouts" in capsys.readouterr().err
