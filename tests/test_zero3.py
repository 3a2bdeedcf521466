"""ZeRO-3 / FSDP at scale (mapper.cluster.zero3): the per-block overlap against hand values, the
sharded collectives over the actual group, the plan model's wiring, plan graphs and --parallel auto."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mapper.cluster import zero3
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.collectives import GB, collective, network
from mapper.parallel.layout import Layout, LayoutSpec
from mapper.pipeline import compile_graph
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform


def _gpt(layers=4, batch=64, hidden=1024, heads=16):
    return load_graph(ModelFile("examples/gpt.tg", params=(("LAYERS", layers), ("HIDDEN", hidden), ("HEADS", heads),
                                                          ("BATCH", batch), ("SEQ", 1024))))


def _selene(nodes):
    return with_nodes(load_platform("selene"), nodes)


def test_forward_hides_each_gather_under_the_block_before():
    # g0 exposed, then max(f_i, g_{i+1}): 0.5 + max(1, 2) + max(1, 0.5) + max(1, 0)
    assert zero3.forward([1.0, 1.0, 1.0], [0.5, 2.0, 0.5]) == pytest.approx(4.5)
    assert zero3.forward([], []) == 0.0
    # compute-bound: only the first gather shows
    assert zero3.forward([5.0, 5.0], [1.0, 1.0]) == pytest.approx(11.0)


def test_backward_hides_the_next_scatter_and_the_previous_gather():
    # g_n + r_0 + max(b_0, r_1) + max(b_1, r_2 + g_0) + max(b_2, g_1) = 1 + 1 + 2 + 2 + 2
    assert zero3.backward([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) == pytest.approx(8.0)
    # communication-bound: every gather and scatter back to back on their stream
    assert zero3.backward([1.0, 1.0, 1.0], [3.0, 3.0, 3.0], [3.0, 3.0, 3.0]) == pytest.approx(18.0)
    # one block: its gather, its backward, its scatter
    assert zero3.backward([2.0], [0.5], [0.25]) == pytest.approx(2.75)


def test_two_neighbouring_blocks_are_live():
    assert zero3.live([1.0, 5.0, 2.0, 4.0]) == pytest.approx(7.0)
    assert zero3.live([3.0]) == pytest.approx(3.0)


def test_sharded_collectives_over_the_group():
    net = network(_selene(192))
    n = 3.6e9  # one 175B GPT-3 layer in 16 bits
    # inside a node: the collective model's own
    assert zero3.sharded(net, "allgather", n, 8, 8) == collective(net, "allgather", n, 8, 8)[0]
    # across nodes: a ring of every rank, each at its share of the node's NICs times the efficiency,
    # the fabric's latency at each of its k - 1 steps (Patarasuk and Yuan's ring)
    for d in (768, 1536):
        rate = net.node_gbs / net.gpus_per_node * zero3.SHARDED_EFFICIENCY * GB
        hand = net.launch + (d - 1) / d * n / rate + (d - 1) * net.inter_latency
        assert zero3.sharded(net, "allgather", n, d, 8) == pytest.approx(hand)
        assert zero3.sharded(net, "reducescatter", n, d, 8) == pytest.approx(hand)
    # bound by a per-GPU rate: doubling the ranks adds only latency
    assert zero3.sharded(net, "allgather", n, 1536, 8) / zero3.sharded(net, "allgather", n, 768, 8) < 1.05
    assert zero3.sharded(net, "allgather", n, 1, 8) == 0.0


def test_the_plan_model_prices_each_block_gather_and_scatter():
    plat = _selene(4)
    g = _gpt()
    fixed = dict(tensor=1, pipeline=1, data=32, micro_batch=2, interleave=1, recompute="full", sequence=False)
    z0 = plan_cluster(g, plat, LayoutSpec(**fixed, zero=0), "adam", lambda x: fuse_for(x, plat))
    z3 = plan_cluster(g, plat, LayoutSpec(**fixed, zero=3), "adam", lambda x: fuse_for(x, plat))
    model = z3.best  # the same blocks and chunk, one of each
    lay = Layout(1, 1, 32, 2, 1, "full", 3, False)
    pm = _model(g, plat)
    fw, bw = pm._block_times(lay)
    costs = pm.block_costs(1, 2)
    gathers, scatters = pm._sharded(lay, costs, range(len(fw)))
    assert sum(gathers) > 0 and sum(scatters) > 0
    f, b = model.chunk_times[0]
    assert f == pytest.approx(zero3.forward(fw, gathers))
    assert b == pytest.approx(zero3.backward(bw, gathers, scatters))
    # the pipeline of ZeRO 0 is the same compute without them
    f0, b0 = z0.best.chunk_times[0]
    assert f0 == pytest.approx(sum(fw)) and b0 == pytest.approx(sum(bw))


def _model(g, plat):
    from mapper.cluster.model import GIB, PlanModel
    from mapper.cluster.profile import Profile
    from mapper.platform.cluster import domain_view

    profile = Profile(g, plat, "gpu0", lambda x: fuse_for(x, plat), "adam")
    return PlanModel(profile, network(domain_view(plat)), 64, "adam", 80 * GIB)


@pytest.mark.parametrize("pipeline", [1, 2])
def test_a_zero3_plan_graph_passes_the_validator(pipeline):
    plat = _selene(4)
    g = _gpt()
    est = plan_cluster(g, plat, LayoutSpec(tensor=1, pipeline=pipeline, micro_batch=1, interleave=1,
                                           recompute="full", zero=3), "adam", lambda x: fuse_for(x, plat)).best
    assert est.layout.zero == 3 and est.layout.data == 32 // pipeline
    graph = plan_graph(est, g.name)
    result = compile_graph(graph, replica_platform(plat, "gpu0", pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)


def test_auto_never_picks_zero3_where_another_layout_is_faster():
    """One sequence per GPU over many nodes (SC'21 5.2's regime): ZeRO-3 without model parallelism
    loses to a layout that keeps the weights in place, and --parallel auto never keeps a slower
    ZeRO-3 layout."""
    plat = _selene(16)
    g = _gpt(layers=8, batch=128, hidden=2048, heads=16)
    choice = plan_cluster(g, plat, LayoutSpec(micro_batch=1, interleave=1, sequence=False), "adam",
                          lambda x: fuse_for(x, plat))
    fitting = [e for e in choice.ranked if e.fits]
    others = min(e.step for e in fitting if e.layout.zero != 3)
    if choice.best.layout.zero == 3:
        assert choice.best.step <= others
    z3 = plan_cluster(g, plat, LayoutSpec(tensor=1, pipeline=1, micro_batch=1, recompute="full", zero=3), "adam",
                      lambda x: fuse_for(x, plat)).best
    assert z3.fits and z3.step > choice.best.step


def test_efficiency_is_a_share():
    assert 0.0 < zero3.SHARDED_EFFICIENCY <= 1.0
    net = network(_selene(2))
    slow = replace(net, node_gbs=net.node_gbs * zero3.SHARDED_EFFICIENCY)
    assert zero3.sharded(net, "allgather", 1e9, 16, 8) == collective(slow, "allgather", 1e9, 16, 1, rings=True)[0]


def test_rings_alone_as_nccl_runs_a_gather():
    net = network(_selene(16))
    for n in (1e3, 1e6, 1e9):
        ring, algo = collective(net, "allgather", n, 128, 8, rings=True)
        assert algo == "ring" and ring >= collective(net, "allgather", n, 128, 8)[0]
