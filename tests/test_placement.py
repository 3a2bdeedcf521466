"""Where a layout's parallel groups land on nodes (mapper.cluster.placement): Megatron-Core's
rank order checked against every rank, and what a group straddling two NVL72 racks costs."""

from __future__ import annotations

import itertools

import pytest

from mapper.cluster.placement import Ranks, groups
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.search import _setup, plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.collectives import network
from mapper.parallel.layout import Layout, LayoutSpec
from mapper.pipeline import compile_graph
from mapper.platform.cluster import domain_size, domain_view, with_nodes
from mapper.platform.loader import load_platform

#: ``(tensor, context, data, pipeline, expert, expert_tensor)``: aligned and straddling layouts on nodes of 8 and 72
LAYOUTS = [(4, 2, 2, 8, 1, 4), (4, 1, 4, 8, 4, 1), (8, 1, 2, 8, 2, 4), (2, 2, 4, 4, 4, 2), (16, 1, 2, 4, 8, 2),
           (1, 1, 8, 16, 8, 1), (4, 2, 1, 16, 2, 4), (3, 1, 4, 6, 2, 3), (1, 4, 18, 2, 6, 2), (2, 1, 9, 8, 3, 2)]


def _brute(lay: Layout, per_node: int) -> dict[str, dict[int, set[int]]]:
    """Every group of each kind, found by numbering every rank in Megatron-Core's orders (dense
    tp-cp-dp-pp, experts etp-ep-edp-pp; the hierarchical context groups as
    ``create_hierarchical_groups`` cuts the context ranks, ``cp_a2a`` consecutive ones, then rings
    of those ``cp_a2a`` apart), as each stage's set of group shares."""
    t, c, d, e, et, k = lay.tensor, lay.context, lay.data, lay.expert, lay.etp, lay.cp_a2a
    ed = t * c * d // (e * et)
    members: dict[tuple, list[int]] = {}
    for r in range(lay.gpus):
        tp, cp, dp, pp = r % t, r // t % c, r // (t * c) % d, r // (t * c * d)
        etp, ep, edp = r % et, r // et % e, r // (et * e) % ed
        for kind, key in (("tensor", (cp, dp, pp)), ("context", (tp, dp, pp)), ("data", (tp, pp)),
                          ("expert_tensor", (ep, edp, pp)), ("expert", (etp, edp, pp)), ("expert_data", (etp, ep, pp)),
                          ("cp_a2a", (tp, cp // k, dp, pp)), ("cp_p2p", (tp, cp % k, dp, pp))):
            members.setdefault((kind, key), []).append(r)
    out: dict[str, dict[int, set[int]]] = {}
    for (kind, key), ranks in members.items():
        counts = [sum(1 for r in ranks if r // per_node == n) for n in {r // per_node for r in ranks}]
        out.setdefault(kind, {}).setdefault(key[-1], set()).add(len(ranks) if len(counts) == 1 else min(counts))
    return out


@pytest.mark.parametrize("per_node", [8, 72])
@pytest.mark.parametrize("dims", LAYOUTS)
def test_group_shares_match_every_rank(per_node, dims):
    t, c, d, p, e, et = dims
    lay = Layout(tensor=t, context=c, data=d, pipeline=p, expert=e, expert_tensor=et, cp="a2a+p2p" if c > 1 else "ring",
                 cp_a2a=2 if c > 1 else 1)
    ranks, brute = Ranks(lay.gpus, per_node), _brute(lay, per_node)
    for kind, (stride, size) in groups(lay).items():
        every = set().union(*brute[kind].values())
        assert set(ranks.shares(stride, size)) == every, kind
        for s in range(p):
            assert set(ranks.shares(stride, size, s, p)) == brute[kind][s], (kind, s)
    span = lay.gpus // p
    for a, b in itertools.product(range(p), repeat=2):
        cross = any((a * span + j) // per_node != (b * span + j) // per_node for j in range(span))
        assert ranks.send_crosses(a, b, p) == cross, (a, b)


def test_layouts_aligned_to_nodes_of_8_lie_as_before():
    """On DGX nodes of 8 with power-of-two degrees every group of a kind lies alike, as the planner
    priced it before it looked: ``min(k, 8 / stride)`` a node; tensor groups never straddle; a
    pipeline send crosses where the stages are 8 or more ranks apart, and else only at a node's edge."""
    for t, c, d, p in itertools.product((1, 2, 4, 8), (1, 2, 4), (1, 2, 4, 8, 16), (1, 2, 4, 8)):
        lay = Layout(tensor=t, context=c, data=d, pipeline=p)
        ranks = Ranks(lay.gpus, 8)
        for kind in ("tensor", "context", "data"):
            stride, size = groups(lay)[kind]
            assert ranks.shares(stride, size) == (min(size, max(1, 8 // stride)),), (t, c, d, p, kind)
        span = t * c * d
        for s in range(p - 1):
            assert ranks.send_crosses(s, s + 1, p) == (span >= 8 or (s + 1) * span % 8 == 0)


def _llama(layers: int = 16, batch: int = 64):
    params = (("LAYERS", layers), ("HIDDEN", 1024), ("HEADS", 8), ("KV_HEADS", 8), ("FFN", 2816), ("VOCAB", 32000),
              ("SEQ", 2048), ("BATCH", batch))
    return load_graph(ModelFile("examples/llama.tg", params=params))


def test_a_job_runs_on_equal_segments_of_a_rack():
    """Megatron-Bridge's launcher asks Slurm for segments of the largest divisor of the trays up to 18."""
    for trays, segment in ((2, 2), (18, 18), (19, 1), (32, 16), (36, 18), (40, 10), (64, 16), (54, 18)):
        assert domain_size(with_nodes(load_platform("gb200-nvl72"), trays).cluster) == segment
    net = network(domain_view(with_nodes(load_platform("gb200-nvl72"), 32)))
    assert net.gpus_per_node == 64 and net.nodes == 2  # 128 GPUs: two segments of 16 trays
    assert network(domain_view(with_nodes(load_platform("dgx-h100-superpod"), 32))).gpus_per_node == 8


def test_a_data_group_across_two_racks_is_priced_over_the_fabric():
    """Llama 3.1 405B's layout with a ninth stage on two full NVL72 racks (36 trays, 144 GPUs, TP4 PP9
    CP2 DP2): stage 4 holds ranks 64-79, so its data x context groups (ranks 4 apart: 64, 68 | 72, 76)
    have two GPUs on each rack. A 1 GB all-reduce over one, by hand: hierarchical, a ring of 2 inside the
    rack at NVLink's 900 x 0.824 = 741.6 GB/s, 2 (1/2) 1e9 / 741.6e9 + 2 x 3 us, then the 0.5 GB
    shard across the two racks at a GPU's NIC share 50 x 0.96 = 48 GB/s, 2 (1/2) 0.5e9 / 48e9 + 2 x 5 us,
    plus the 3 us launch: 11.784 ms (a flat ring at min(741.6, 2 x 48) GB/s: 15.66 ms). Stage 3's
    groups (ranks 48-63) stay in the rack: a ring of 4 at 741.6 GB/s, 2.044 ms."""
    plat = with_nodes(load_platform("gb200-nvl72"), 36)
    setup = _setup(_llama(9, 72), plat, "adam", lambda g: fuse_for(g, plat))
    model, lay = setup.model, Layout(tensor=4, pipeline=9, context=2, data=2)
    assert setup.per_node == 72 and lay.gpus == 144
    assert model.shares(lay, "data", 4) == (2,) and model.shares(lay, "data", 3) == (4,)
    assert model.shares(lay, "tensor") == (4,) and model.shares(lay, "context") == (2,)
    straddling = model._slowest("allreduce", 1e9, 4, model.shares(lay, "data", 4))
    assert straddling == pytest.approx(2 * 0.5 * 1e9 / 741.6e9 + 6e-6 + 2 * 0.5 * 0.5e9 / 48e9 + 10e-6 + 3e-6, rel=1e-9)
    assert straddling == pytest.approx(11.784e-3, rel=1e-4)
    inside = model._slowest("allreduce", 1e9, 4, model.shares(lay, "data", 3))
    assert inside == pytest.approx(2 * 0.75 * 1e9 / 741.6e9 + 18e-6 + 3e-6, rel=1e-9)
    assert model.shares(lay, "data") == (2, 4)  # of every stage: the slowest sets the time
    ranks = model.ranks(144)
    assert ranks.send_crosses(3, 4, 9) and ranks.send_crosses(4, 5, 9)
    assert not ranks.send_crosses(2, 3, 9) and not ranks.send_crosses(5, 6, 9)


def test_the_straddling_stage_is_the_slow_one_and_the_plan_graph_validates():
    plat = with_nodes(load_platform("gb200-nvl72"), 36)
    graph = _llama(18, 72)
    given = LayoutSpec(tensor=4, pipeline=9, context=2, data=2, micro_batch=1, zero=1)
    est = plan_cluster(graph, plat, given, "adam", lambda g: fuse_for(g, plat)).best
    sync = est.rank_sync
    assert sync[4] > 1.5 * max(sync[s] for s in range(9) if s != 4)  # its data groups over the fabric
    times = est.rank_times  # stages 1-7 hold alike layers; 3 and 4 send across the racks' boundary
    assert times[3] == pytest.approx(times[4]) and times[3] > times[2] == pytest.approx(times[5])
    result = compile_graph(plan_graph(est, graph.name), replica_platform(plat, None, 9, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)
    # stages of 72 ranks (TP4 PP2 CP2 DP9) tile the racks: no group straddles
    aligned = plan_cluster(graph, plat, LayoutSpec(tensor=4, pipeline=2, context=2, data=9, micro_batch=1, zero=1),
                           "adam", lambda g: fuse_for(g, plat)).best
    assert aligned.rank_sync[0] == pytest.approx(aligned.rank_sync[1], rel=0.05)
