"""ZeRO-3's implementation as an input (``--parallel ...,zero=3,fsdp=deepspeed|megatron``,
mapper.cluster.zero3): Megatron-FSDP's gathers as the collective model's ring over the group as it
lies on the nodes, DeepSpeed's fitted rate unchanged by default, exit 2 without zero=3, plan graphs."""

from __future__ import annotations

import json

import pytest

from mapper.cli import main
from mapper.cluster import zero3
from mapper.cluster.model import GIB, PlanModel
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.profile import Profile
from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.collectives import network
from mapper.parallel.layout import Layout, LayoutSpec
from mapper.pipeline import compile_graph
from mapper.platform.cluster import domain_view, with_nodes
from mapper.platform.loader import load_platform

GPT = "examples/gpt.tg"


def _gpt(layers=4, batch=64, hidden=1024, heads=16):
    return load_graph(ModelFile(GPT, params=(("LAYERS", layers), ("HIDDEN", hidden), ("HEADS", heads),
                                             ("BATCH", batch), ("SEQ", 1024))))


def _selene(nodes):
    return with_nodes(load_platform("selene"), nodes)


def test_megatron_gather_by_hand_for_straddling_groups():
    # Selene: a rank's port 240 GB/s inside the node, a node's NICs 192 GB/s (24 a rank), 5 us a
    # fabric step, 3 us a kernel launch
    net = network(_selene(2))
    n = 1e9
    # 16 ranks, 8 a node: NCCL's ring at min(240, 8 x 24) = 192 GB/s, 15 steps
    hand16 = 3e-6 + 15 / 16 * n / 192e9 + 15 * 5e-6
    assert hand16 == pytest.approx(0.0049608125)
    assert zero3.sharded(net, "allgather", n, 16, 8, "megatron") == pytest.approx(hand16)
    assert zero3.sharded(net, "reducescatter", n, 16, 8, "megatron") == pytest.approx(hand16)
    # 8 ranks, 4 a node (a group that straddles two nodes half each): min(240, 4 x 24) = 96 GB/s
    hand8 = 3e-6 + 7 / 8 * n / 96e9 + 7 * 5e-6
    assert zero3.sharded(net, "allgather", n, 8, 4, "megatron") == pytest.approx(hand8)
    # DeepSpeed's fitted rate: one rank a node at 0.68 of its 24 GB/s
    deep = 3e-6 + 15 / 16 * n / (24e9 * zero3.SHARDED_EFFICIENCY) + 15 * 5e-6
    assert zero3.sharded(net, "allgather", n, 16, 8) == pytest.approx(deep)
    assert zero3.sharded(net, "allgather", n, 16, 8, "deepspeed") == pytest.approx(deep)
    # inside a node both are the collective model's own
    assert zero3.sharded(net, "allgather", n, 8, 8, "megatron") == zero3.sharded(net, "allgather", n, 8, 8)


def test_the_plan_model_prices_megatron_over_the_placed_group():
    plat = _selene(2)
    g = _gpt()
    profile = Profile(g, plat, "gpu0", lambda x: fuse_for(x, plat), "adam")
    pm = PlanModel(profile, network(domain_view(plat)), 64, "adam", 80 * GIB, fsdp="megatron")
    # tensor 4 x data 4 on two nodes of 8: each data group is 4 ranks 4 apart, 2 on each node
    lay = Layout(4, 1, 4, 1, 1, "full", 3, True)
    assert pm.shares(lay, "data", 0) == (2,)
    costs = pm.block_costs(4, 1)
    gathers, _ = pm._sharded(lay, costs, range(len(costs)))
    for cost, got in zip(costs, gathers):
        _, db, _, eb = pm.held(cost, lay)
        hand = 3e-6 + 3 / 4 * (db + eb) / 48e9 + 3 * 5e-6 if db + eb > 0 else 0.0  # min(240, 2 x 24) GB/s
        assert got == pytest.approx(hand)


def _plan(fsdp=None, pipeline=1, nodes=4):
    plat = _selene(nodes)
    spec = LayoutSpec(tensor=1, pipeline=pipeline, micro_batch=1, interleave=1, recompute="full", zero=3, fsdp=fsdp)
    return plat, plan_cluster(_gpt(), plat, spec, "adam", lambda x: fuse_for(x, plat))


def test_default_is_deepspeed_and_megatron_is_faster_across_nodes():
    _, default = _plan()
    _, deep = _plan("deepspeed")
    _, mega = _plan("megatron")
    assert default.best.step == deep.best.step  # today's figures, unchanged
    assert default.to_json()["plan"]["fsdp"] == "deepspeed"
    assert mega.to_json()["plan"]["fsdp"] == "megatron"
    assert mega.best.step < deep.best.step  # 32 ranks over 4 nodes: the NICs together, no fitted rate


@pytest.mark.parametrize("pipeline", [1, 2])
def test_a_megatron_plan_graph_passes_the_validator(pipeline):
    plat, choice = _plan("megatron", pipeline)
    est = choice.best
    graph = plan_graph(est, "gpt")
    result = compile_graph(graph, replica_platform(plat, "gpu0", pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)


@pytest.mark.parametrize("layout, needle", [
    ("data=8,fsdp=megatron", "give it with zero=3"),
    ("data=8,zero=1,fsdp=megatron", "zero=1"),
    ("data=8,zero=3,fsdp=torch", "choose one of deepspeed, megatron"),
])
def test_fsdp_without_zero3_exits_2(layout, needle, capsys):
    code = main(["compile", GPT, "--param", "LAYERS=2", "--platform", "selene", "--train", "--parallel", layout])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err


def test_json_plan_names_the_implementation(tmp_path):
    out = tmp_path / "o.json"
    assert main(["compile", GPT, "--param", "LAYERS=2", "--param", "BATCH=32", "--platform", "selene", "--nodes", "2",
                 "--train", "--optimizer", "adam", "--parallel", "tensor=1,pipeline=1,recompute=full,zero=3,"
                 "fsdp=megatron", "-q", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["parallel"]["plan"]["fsdp"] == "megatron"
