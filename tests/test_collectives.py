"""One collective model (mapper.parallel.collectives): the networks the task graphs and the plan
models see, the algorithms by hand, all-to-all, and a plan agreeing with the graph built from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mapper.frontend.sources import ModelFile
from mapper.mapping.base import MapOptions
from mapper.parallel.collectives import (
    COLLECTIVES,
    Network,
    alltoallv,
    bus_bandwidth,
    collective,
    group,
    launch_time,
    low_latency,
    network,
    send,
    step_latency,
)
from mapper.pipeline import compile_graph
from mapper.platform.cluster import flat_platform, with_nodes
from mapper.platform.loader import load_platform
from mapper.serving.driver import Serving

GPUS = tuple(f"gpu{i}" for i in range(8))
ROOT = Path(__file__).resolve().parents[1]
GPT = str(ROOT / "examples" / "gpt.tg")
MID = (("LAYERS", 8), ("HIDDEN", 4096), ("HEADS", 32), ("VOCAB", 51200))
SIZES = (1024.0, 12288.0, 2.0**20, 2.0**30)


@pytest.fixture(scope="module")
def dgx():
    return load_platform("dgx-a100")


def test_a_group_on_nvswitch_sees_the_switch_at_nccls_efficiency(dgx):
    net, per_node = group(dgx, GPUS)
    assert per_node == 8 and net.nodes == 1
    assert net.intra_gbs == pytest.approx(300 * 0.8) and net.intra_latency == pytest.approx(3e-6)
    n = 1e9
    t, alg = collective(net, "allreduce", n, 8, 8)
    assert alg == "ring" and t == pytest.approx(3e-6 + 2 * 7 / 8 * n / 240e9 + 14 * 3e-6)
    t, alg = collective(net, "allreduce", 1024, 8, 8)  # latency-bound: NCCL's low-latency ring
    assert alg == "ring-ll" and t == pytest.approx(3e-6 + low_latency("allreduce", 1024, 8, 0.47e-6, 1 / 240e9))
    t, alg = collective(net, "broadcast", n, 8, 8)  # pipelined down the ring: the whole tensor once
    assert alg == "ring" and t == pytest.approx(3e-6 + 7 * 3e-6 + n / 240e9)
    assert collective(net, "allreduce", n, 1, 1) == (0.0, "local")
    assert bus_bandwidth("broadcast", n, t - 3e-6 - 21e-6, 8) == pytest.approx(240)


def test_the_low_latency_ring_where_the_switch_gives_its_step(dgx):
    step = step_latency(dgx, GPUS)
    assert step == pytest.approx(0.47e-6)  # the NVSwitch's step_latency_us
    assert step_latency(dgx, ("cpu0", "gpu0")) is None  # the PCIe switches give none
    ll = low_latency("allreduce", 1024, 8, step, 1 / 300e9)
    assert ll == pytest.approx(3.6e-6 + 14 * 0.47e-6 + 2 * 7 / 8 * 1024 / (300e9 / 4))
    assert low_latency("broadcast", 1024, 8, step, 1 / 300e9) is None  # an LL ring reduces or gathers
    assert low_latency("alltoall", 1024, 8, step, 1 / 300e9) is None
    assert launch_time(dgx, GPUS) == pytest.approx(3e-6)


def test_a_group_no_fast_switch_joins_pays_its_slowest_hop(dgx):
    net, per_node = group(dgx, ("cpu0", "gpu0"))  # one PCIe switch joins them
    assert per_node == 2 and net.intra_gbs == pytest.approx(25) and net.intra_step is None
    t, alg = collective(net, "allreduce", 1e8, 2, 2)  # no low-latency step: recursive doubling is a choice
    ring, tree = 2 * 1 / 2 * 1e8 / 25e9 + 2 * 10e-6, 1 * (10e-6 + 1e8 / 25e9)
    assert alg == "tree" and t == pytest.approx(3e-6 + min(ring, tree))
    net, _ = group(dgx, ("cpu0", "gpu0", "gpu2"))  # no switch joins all three: the ring's slowest route
    assert net.intra_gbs == pytest.approx(25) and net.intra_latency == pytest.approx(10e-6)


def test_alltoall_by_hand_in_a_node_and_across():
    """Pairwise exchange in a node; across nodes the cheaper of pairwise and the 2-D (hierarchical)
    exchange of DeepSpeed-MoE and Tutel."""
    net = network(with_nodes(load_platform("selene"), 4))
    launch, a_in, a_out, b_in, b_out = 3e-6, 3e-6, 5e-6, 240e9, 24e9
    n = 2.0**20  # what one rank dispatches to all the experts
    t, alg = collective(net, "alltoall", n, 8, 8)
    assert alg == "pairwise" and t == pytest.approx(launch + 7 * (a_in + n / 8 / b_in))
    flat = 7 * (a_in + n / 32 / b_in) + 24 * (a_out + n / 32 / b_out)
    two_d = 7 * (a_in + n / 8 / b_in) + 3 * (a_out + n / 4 / b_out)
    t, alg = collective(net, "alltoall", n, 32, 8)
    assert alg == "hierarchical" and two_d < flat and t == pytest.approx(launch + two_d)
    t, alg = collective(net, "alltoall", 2.0**32, 32, 8)  # bandwidth-bound: the fabric's bytes are alike,
    assert alg == "pairwise"  # the 2-D exchange's extra pass inside the node no longer pays
    t, alg = collective(net, "alltoall", n, 4, 1)  # one rank per node: every step crosses the fabric
    assert alg == "pairwise" and t == pytest.approx(launch + 3 * (a_out + n / 4 / b_out))
    assert bus_bandwidth("alltoall", n, 1.0, 8) == pytest.approx(n / 1e9 * 7 / 8)


def _alltoallv_by_steps(net, blocks, g):
    """An unequal all-to-all played step by step: pairwise, rank r sends to r+s and receives from
    r-s at step s, each rank's port busy for the bytes it moves on each kind of link; hierarchical,
    every block routed by its hops (to its node's rank on the destination's lane, then across)."""
    k = len(blocks)
    nodes = k // g
    b_in, b_out = net.intra_gbs * 1e9, net.rank_gbs * 1e9
    ranks = []
    for r in range(k):
        moved = {True: [0.0, 0.0], False: [0.0, 0.0]}  # inside? -> [sent, received]
        lat = 0.0
        for step in range(1, k):
            to, frm = (r + step) % k, (r - step) % k
            moved[to // g == r // g][0] += blocks[r][to]
            moved[frm // g == r // g][1] += blocks[frm][r]
            lat += net.intra_latency if to // g == r // g else net.inter_latency
        ranks.append(lat + max(moved[True]) / b_in + max(moved[False]) / b_out)
    flat = max(ranks)
    if nodes == 1 or g == 1:
        return net.launch + flat
    stage = [np.zeros((k, 2)), np.zeros((k, 2))]  # per stage, per rank: sent, received
    for i in range(k):
        for j in range(k):
            if i == j:
                continue
            hops = [i, (i // g) * g + j % g, j]
            for h, (a, b) in enumerate(zip(hops, hops[1:])):
                if a != b:
                    stage[h][a, 0] += blocks[i][j]
                    stage[h][b, 1] += blocks[i][j]
    two_d = (g - 1) * net.intra_latency + stage[0].max() / b_in \
        + (nodes - 1) * net.inter_latency + stage[1].max() / b_out
    return net.launch + min(flat, two_d)


@pytest.mark.parametrize("k,g", [(2, 2), (4, 4), (4, 2), (4, 1), (6, 3), (6, 2), (8, 4)])
def test_the_unequal_alltoall_against_brute_force(k, g):
    net = Network(g, 240.0, 3e-6, 8 * 24.0, 5e-6, k // g, None, 3e-6)
    rng = np.random.default_rng(k * 10 + g)
    for scale in (1e3, 1e6, 1e9):  # latency-bound to bandwidth-bound
        for _ in range(5):
            blocks = (rng.random((k, k)) * scale * rng.integers(0, 2, (k, k))).tolist()
            blocks[0][k - 1] = scale  # never all zero
            assert alltoallv(net, blocks, g)[0] == pytest.approx(_alltoallv_by_steps(net, blocks, g), rel=1e-12)


@pytest.mark.parametrize("k,g", [(8, 8), (32, 8), (4, 1), (16, 4), (3, 3)])
def test_equal_blocks_are_the_alltoall(k, g):
    net = network(with_nodes(load_platform("selene"), max(1, k // 8)))
    net = Network(g, net.intra_gbs, net.intra_latency, net.node_gbs,
                  net.inter_latency, k // g, net.intra_step, net.launch)
    for n in SIZES + (2.0**32,):
        blocks = [[n / k] * k for _ in range(k)]
        t, alg = collective(net, "alltoall", n, k, g)
        assert alltoallv(net, blocks, g) == (pytest.approx(t, rel=1e-12), alg)


def test_an_alltoall_of_nothing_or_a_ragged_matrix():
    net = Network(4, 240.0, 3e-6, 96.0, 5e-6, 1)
    assert alltoallv(net, [[5.0, 0.0], [0.0, 5.0]], 2) == (0.0, "local")  # only to themselves
    with pytest.raises(ValueError, match="square"):
        alltoallv(net, [[0.0, 1.0], [1.0]], 2)


def test_a_flattened_cluster_prices_every_collective_as_the_plan_models_do():
    """The task graphs see a cluster's nodes flattened (one NVSwitch each, the fabric between them);
    their network is the plan models' network of the cluster."""
    cluster = with_nodes(load_platform("selene"), 4)
    flat = flat_platform(cluster)
    plan = network(cluster)
    for ranks, per_node in ((16, 8), (32, 8), (4, 1), (8, 2), (8, 8)):
        names = [f"n{i // per_node}_gpu{i % per_node}" for i in range(ranks)]
        net, got = group(flat, names)
        assert got == per_node
        for kind in COLLECTIVES:
            for n in SIZES:
                want = collective(plan, kind, n, ranks, per_node)
                seen = collective(net, kind, n, ranks, per_node)
                assert seen[1] == want[1] and seen[0] == pytest.approx(want[0], rel=1e-9), (kind, n, ranks)
        assert send(net, 1e6, per_node < ranks) == pytest.approx(send(plan, 1e6, per_node < ranks))


def test_an_unknown_collective_is_refused():
    with pytest.raises(ValueError, match="unknown collective"):
        collective(network(load_platform("dgx-a100")), "scan", 1.0, 8, 8)


@pytest.mark.parametrize("platform, parallel", [("dgx-h100", "tensor=8"), ("selene", "tensor=16")])
def test_the_serving_plan_and_its_decode_step_price_each_all_reduce_alike(platform, parallel):
    """The layout's estimate (the serving model) and the decode step's task graph (its Gantt) price
    the same tensor-parallel all-reduce within 1 %."""
    got = compile_graph(ModelFile(GPT, params=MID), platform, mapper="heft", options=MapOptions(),
                        parallel=parallel, serving=Serving.parse("prefill=64,decode=4", "graph"))
    step = got.serving.step
    assert step is not None
    graph = step.schedule.cost.graph
    plat = load_platform(platform)
    net = network(plat)
    t = got.serving.best.layout.tensor
    per_node = min(t, net.gpus_per_node)
    ars = [task for task in graph.tasks if task.op == "allreduce"]
    assert ars
    for task in ars:
        plan_price = collective(net, "allreduce", task.output.nbytes, t, per_node)[0]
        (_, graph_price), = task.explicit_cost
        assert graph_price == pytest.approx(plan_price, rel=0.01)
