"""``--parallel auto`` searching context parallelism and recomputation module sets, and the
all-gather form of context parallelism (``cp=allgather``, Llama 3 section 3.3.2): the pruned
search against a full sweep, CP chosen where it wins under the model and not where it does not,
the all-gather's collectives against hand values, its memory, plan graph and report."""

from __future__ import annotations

import json

import pytest
from small_llama import LLAMA, llama_graph, plan_on

import mapper.cluster.sweep as sweep
from mapper.cli import main
from mapper.cluster.model import PlanModel
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.recompute import ladder, module_flops
from mapper.cluster.search import _setup
from mapper.cluster.space import contexts
from mapper.costing.fusion import fuse_for
from mapper.parallel.layout import Layout
from mapper.pipeline import compile_graph
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

#: A small grouped-query Llama: 2 layers, 8 heads of 32 of which 2 key-value heads, 1,024-token sequences.
SIZES = {"LAYERS": 2, "HIDDEN": 256, "HEADS": 8, "KV_HEADS": 2, "FFN": 512, "VOCAB": 1000, "SEQ": 1024,
         "BATCH": 16}
DH = SIZES["HIDDEN"] // SIZES["HEADS"]


def _graph(**over):
    return llama_graph(SIZES, **over)


def _plan(given, nodes=2, **over):
    return plan_on(_graph(**over), given, nodes)[1]


def test_context_degrees_and_the_recompute_ladder():
    assert contexts(16, 1024) == [1, 2, 4]  # 2C chunks of at least 128 tokens
    assert contexts(16, 0) == [1] and contexts(6, 1024) == [1, 2]
    g = _graph()
    plat = load_platform("dgx-h100")
    prof = _setup(g, plat, "adam", lambda x: fuse_for(x, plat)).model.profile
    present = 0
    for bits, _ in module_flops(g, prof.blocks, prof.rep):
        present |= bits
    assert ladder(present) == ("none", "selective", "core_attn+layernorm", "full")


def test_auto_searches_context_and_module_sets():
    ch = _plan({})
    space = {(e.layout.context, e.layout.recompute) for e in ch.ranked}
    assert {c for c, _ in space} >= {1, 2} and "core_attn+layernorm" in {r for _, r in space}
    assert ch.scored > _plan({"context": 1}).scored


def test_pruned_search_is_a_full_sweep(monkeypatch):
    """The memory and time floors set layouts aside without changing the choice: with neither
    (every layout estimated), the same layout and step."""
    pruned = _plan({}, SEQ=2048, BATCH=8)
    monkeypatch.setattr(sweep, "KEPT", 10**9)
    monkeypatch.setattr(PlanModel, "memory_floor", lambda self, lay: 0.0)
    full = _plan({}, SEQ=2048, BATCH=8)
    assert full.best.layout == pruned.best.layout and full.best.step == pytest.approx(pruned.best.step, rel=1e-12)
    assert len(full.ranked) >= len(pruned.ranked)


def test_auto_picks_context_where_it_wins_and_not_where_it_does_not():
    """Long sequences and a small batch (2 sequences of 16K tokens on 16 GPUs): data parallelism
    cannot use the GPUs, and auto cuts each sequence over context ranks, faster than the best
    layout without; short sequences and a large batch: no context parallelism, which is slower."""
    long = {"SEQ": 16384, "BATCH": 2}
    auto = _plan({}, **long)
    without = _plan({"context": 1}, **long)
    assert auto.best.fits and auto.best.layout.context > 1
    assert auto.best.step < without.best.step
    short = {"SEQ": 512, "BATCH": 64}
    auto = _plan({}, **short)
    forced = _plan({"context": 2}, **short)
    assert auto.best.layout.context == 1 and forced.best.step > auto.best.step


def test_allgather_against_hand_values():
    """cp=allgather: forward C a_f + allgather(C n), backward C a_b + allgather(C n) +
    reducescatter(C n), n a rank's K and V of S/C positions; a ring all-gather inside a node is
    launch + (C-1)/C (C n)/B + (C-1) latency (NVLink, large enough to leave NCCL's low-latency ring)."""
    big = {"SEQ": 8192, "BATCH": 4, "KV_HEADS": 8}
    plat = with_nodes(load_platform("dgx-h100-superpod"), 2)
    pm = _setup(_graph(**big), plat, "adam", lambda x: fuse_for(x, plat)).model
    c, t = 4, 2
    lay = Layout(t, 1, 2, context=c, cp="allgather")
    gathers, costs = pm.rings(lay), pm.block_costs(t, 1, c)
    attn = [i for i, x in enumerate(costs) if x.attention > 0]
    n = 2 * (8 // t) * DH * 2.0 * big["SEQ"] / c  # K and V of a rank's S/C positions, 16-bit
    net = pm.net
    hand = net.launch + (c - 1) / c * (c * n) / (net.intra_gbs * 1e9) + (c - 1) * net.intra_latency
    for i in attn:
        g, x = gathers[i], costs[i]
        assert g.forward == pytest.approx((c - 1) * x.attention + hand, rel=1e-9)
        assert g.exposed_forward == pytest.approx(hand, rel=1e-9)
        assert g.backward == pytest.approx((c - 1) * x.attention_backward + 2 * hand, rel=1e-9)  # RS = AG here
        assert g.step_bytes == pytest.approx(c * n) and g.buffers == pytest.approx(2 * c * n)
    ring = pm.rings(Layout(t, 1, 2, context=c))
    assert all(ring[i].forward != gathers[i].forward for i in attn)


def test_allgather_plan_graph_passes_the_validator_and_reports(tmp_path):
    plat = with_nodes(load_platform("dgx-h100-superpod"), 2)
    ch = _plan({"tensor": 2, "pipeline": 2, "context": 2, "cp": "allgather", "micro_batch": 1})
    est = ch.best
    assert est.layout.cp == "allgather" and "(allgather)" in est.layout.label()
    graph = plan_graph(est, "llama")
    assert [t for t in graph.tasks if t.name.startswith("ring.")]
    result = compile_graph(graph, replica_platform(plat, "gpu0", est.layout.pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)
    out = tmp_path / "o.json"
    assert main(["compile", LLAMA, *(x for k, v in SIZES.items() for x in ("--param", f"{k}={v}")),
                 "--platform", "dgx-h100-superpod", "--nodes", "2", "--train", "--optimizer", "adam",
                 "--parallel", "tensor=2,pipeline=2,context=2,cp=allgather", "-q", "--json", str(out)]) == 0
    plan = json.loads(out.read_text())["parallel"]["plan"]
    assert plan["context"] == 2 and plan["cp"] == "allgather"
