"""Expert parallelism in the cluster planner (``--parallel ...,expert=E``): the all-to-all volumes
of each MoE layer against hand values, expert-sharded memory, the plan graph through the
validator, and a bad ``expert=`` exiting 2."""

from __future__ import annotations

import pytest

from mapper.cli import main
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.search import layouts, plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.collectives import collective
from mapper.parallel.layout import Layout, LayoutSpec, parse_layout
from mapper.pipeline import compile_graph
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

MOE = "examples/moe.tg"
#: A small Qwen3-MoE-shaped model: 4 layers (1 dense), 16 experts of which 4 per token, one shared.
SIZES = {"LAYERS": 4, "DENSE_LAYERS": 1, "SHARED_EXPERTS": 1, "HIDDEN": 256, "HEADS": 8, "KV_HEADS": 2,
         "HEAD_DIM": 32, "EXPERTS": 16, "TOPK": 4, "EXPERT_FFN": 128, "FFN": 512, "VOCAB": 1000, "SEQ": 128,
         "BATCH": 32}


def _graph():
    return load_graph(ModelFile(MOE, params=tuple(SIZES.items())))


def _plan(layout, nodes=2):
    plat = with_nodes(load_platform("dgx-h100-superpod"), nodes)
    return plat, plan_cluster(_graph(), plat, LayoutSpec(**layout), "adam", lambda x: fuse_for(x, plat))


def _params():
    """Parameters by hand: (dense, routed experts') of the whole model."""
    h, f, e, fs, dh = SIZES["HIDDEN"], SIZES["EXPERT_FFN"], SIZES["EXPERTS"], SIZES["FFN"], SIZES["HEAD_DIM"]
    attn = h * (SIZES["HEADS"] + 2 * SIZES["KV_HEADS"]) * dh + SIZES["HEADS"] * dh * h + h  # + its norm
    moe_layers = SIZES["LAYERS"] - SIZES["DENSE_LAYERS"]
    experts = moe_layers * e * 3 * h * f
    shared = 3 * h * f * SIZES["SHARED_EXPERTS"]
    dense = (SIZES["DENSE_LAYERS"] * (attn + 3 * h * fs + h) + moe_layers * (attn + h * e + shared + h)
             + 2 * SIZES["VOCAB"] * h + h)
    return dense, experts


def test_layout_keys_parse():
    given = parse_layout("tensor=1,expert=8,expert_tensor=1")
    assert given == LayoutSpec(tensor=1, expert=8, expert_tensor=1)
    lay = Layout(2, 1, 8, expert=4, expert_tensor=1)
    assert lay.expert_data == 4 and lay.etp == 1 and "expert 4" in lay.label()
    assert Layout(2, 1, 8).etp == 2  # without a key, each expert is cut like the dense layers
    assert lay.to_json()["expert"] == 4 and lay.to_json()["expert_tensor"] == 1


def test_alltoall_volumes_per_moe_layer():
    """Each MoE layer's dispatch sends every token's TOPK rows of HIDDEN 16-bit values (T k h 2
    bytes per rank and micro-batch), and the combine as many back: 2 all-to-alls forward, 2 backward."""
    plat, ch = _plan({"tensor": 1, "pipeline": 1, "micro_batch": 1, "expert": 8, "zero": 1, "recompute": "none"})
    model = ch.best  # the estimate
    assert model.layout.expert == 8
    from mapper.cluster.search import _setup

    setup = _setup(_graph(), plat, "adam", lambda x: fuse_for(x, plat))
    pm = setup.model
    costs = pm.block_costs(1, 1)
    routed = [r for c in costs for r in c.routed]
    rows = SIZES["SEQ"] * SIZES["TOPK"]  # one sequence per micro-batch
    assert routed == [rows * SIZES["HIDDEN"] * 2.0] * (SIZES["LAYERS"] - SIZES["DENSE_LAYERS"])
    one = collective(pm.net, "alltoall", rows * SIZES["HIDDEN"] * 2.0, 8, 8)[0]
    lay = model.layout
    moe_blocks = [c for c in costs if c.routed]
    assert sum(pm._alltoalls(c, lay) for c in moe_blocks) == pytest.approx(2 * one * len(routed))
    # hand value of the pairwise exchange inside one node (Thakur et al. 2005): 7 steps of n/8 at a
    # rank's NVSwitch port, plus the kernel's launch
    net = pm.net
    n = rows * SIZES["HIDDEN"] * 2.0
    assert one == pytest.approx(7 * (net.intra_latency + n / 8 / (net.intra_gbs * 1e9)) + net.launch)
    # 16 ranks over two nodes: 7 steps inside, 8 across at a rank's NIC share, or hierarchically
    two = collective(net, "alltoall", n, 16, 8)[0]
    flat = 7 * (net.intra_latency + n / 16 / (net.intra_gbs * 1e9)) + 8 * (
        net.inter_latency + n / 16 / (net.rank_gbs * 1e9))
    hier = 7 * (net.intra_latency + n / 8 / (net.intra_gbs * 1e9)) + (net.inter_latency + n / 2 / (net.rank_gbs * 1e9))
    assert two == pytest.approx(min(flat, hier) + net.launch)
    assert pm._alltoalls(moe_blocks[0], Layout(1, 1, 16)) == 0.0  # no expert parallelism: no all-to-all


def test_expert_weights_and_states_are_sharded():
    dense, experts = _params()
    base = {"tensor": 1, "pipeline": 1, "micro_batch": 1, "zero": 1, "recompute": "none"}
    one = _plan({**base, "expert": 1})[1].best.memory
    eight = _plan({**base, "expert": 8})[1].best.memory
    assert one["weights"] == pytest.approx(2.0 * (dense + experts), rel=1e-3)
    assert eight["weights"] == pytest.approx(2.0 * (dense + experts / 8), rel=1e-3)
    # Adam under the distributed optimizer, 16-bit gradients: 16 bytes per parameter (f32 master
    # weights, two moments, the gradients' f32 copy) sharded over the replicas of what the rank holds:
    # the dense ones over data = 16, each expert shard over 16 / 8 = 2
    assert one["optimizer"] == pytest.approx(16.0 * (dense + experts) / 16, rel=1e-3)
    assert eight["optimizer"] == pytest.approx(16.0 * (dense / 16 + experts / 8 / 2), rel=1e-3)
    assert eight["gradients"] == pytest.approx(2.0 * (dense + experts / 8), rel=1e-3)


def test_expert_plan_graph_passes_the_validator():
    plat, ch = _plan({"tensor": 1, "pipeline": 2, "micro_batch": 1, "expert": 4})
    est = ch.best
    assert est.layout.expert == 4
    graph = plan_graph(est, "moe")
    result = compile_graph(graph, replica_platform(plat, "gpu0", est.layout.pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)


def test_auto_considers_expert_parallelism():
    keys = {"tensor": 1, "pipeline": 1, "micro_batch": 1, "recompute": "none", "zero": 1}
    _, ch = _plan(keys)
    space = layouts(ch.gpus, 8, ch.samples, 512, LayoutSpec(**keys), 16, ch.seq)  # context degrees too
    # every expert degree is scored (those that cannot beat the best by their time floor unestimated)
    assert {lay.expert for lay in space} == {1, 2, 4, 8, 16} and ch.scored == len(space)
    assert {e.layout.expert for e in ch.ranked} <= {1, 2, 4, 8, 16}


@pytest.mark.parametrize("key", ["expert=3", "expert=32", "expert=16,expert_tensor=3"])
def test_bad_expert_exits_2(key, capsys):
    args = ["compile", MOE, *(x for k, v in SIZES.items() for x in ("--param", f"{k}={v}")),
            "--platform", "dgx-h100-superpod", "--nodes", "2", "--train", "--optimizer", "adam",
            "--parallel", f"tensor=1,{key}", "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "expert" in err and "Traceback" not in err


def test_expert_on_a_dense_model_exits_2(capsys):
    assert main(["compile", "examples/llama.tg", "--param", "LAYERS=2", "--platform", "dgx-h100", "--train",
                 "--optimizer", "adam", "--parallel", "tensor=1,expert=2", "-q"]) == 2
    assert "no grouped_matmul experts" in capsys.readouterr().err


def test_expert_tensor_one_drops_the_expert_mlps_tensor_collectives():
    """With expert_tensor = 1 each rank computes whole experts: the expert MLP's tensor-parallel
    all-reduces (forward and backward) go, the attention's stay."""
    from mapper.cluster.search import _setup

    plat = with_nodes(load_platform("dgx-h100-superpod"), 2)
    pm = _setup(_graph(), plat, "adam", lambda x: fuse_for(x, plat)).model
    moe = next(c for c in pm.block_costs(2, 1) if c.routed)
    assert any(moe.expert_comm) and len(moe.expert_comm) == len(moe.collectives)
    kept = [x for x, e in zip(moe.collectives, moe.expert_comm) if not e]
    lay = Layout(tensor=2)
    whole = pm._comm(moe, lay, False)
    assert pm._comm(moe, lay, False, 1) == pytest.approx(
        sum(collective(pm.net, k, n, 2, 2)[0] for k, n, bwd in kept if not bwd)) and pm._comm(moe, lay, False, 1) < whole
    assert pm._comm(moe, lay, False, 2) == pytest.approx(whole)


def test_experts_larger_than_one_gpu_are_priced_by_their_shard():
    """DeepSeek-V3's 256 experts of a layer (11.3B parameters, their Adam states 180 GB) outgrow one
    H100 in the block profile, yet a rank of expert=64 holds 1/64 of them: the step is finite and
    no kernel blocks the layout; the memory is the plan model's."""
    g = load_graph(ModelFile("examples/deepseek_v3.tg", params=(("BATCH", 64),)))
    plat = with_nodes(load_platform("dgx-h100-superpod"), 8)
    ch = plan_cluster(g, plat, LayoutSpec(tensor=1, pipeline=4, interleave=1, micro_batch=1, expert=16, zero=1),
                      "adam", lambda x: fuse_for(x, plat))
    est = ch.best
    assert est.step < float("inf") and not est.blocked
    whole = plan_cluster(g, plat, LayoutSpec(tensor=1, pipeline=4, interleave=1, micro_batch=1, expert=1, zero=1),
                         "adam", lambda x: fuse_for(x, plat)).best
    assert not whole.fits and est.memory["weights"] < whole.memory["weights"] / 8


def test_block_parts_kept_across_layouts_are_a_fresh_models():
    """The per-block all-to-alls and recomputation a plan model keeps for one layout (shared by
    every context kind, overlap, sequence parallelism and cut) price another layout as a model that
    never saw the first: the estimates agree to the last bit."""
    from mapper.cluster.search import _setup

    plat = with_nodes(load_platform("dgx-h100-superpod"), 2)

    def fresh():
        return _setup(_graph(), plat, "adam", lambda x: fuse_for(x, plat)).model

    base = Layout(2, 2, 4, 1, 1, "selective", 1, False, 8)
    others = [Layout(2, 2, 4, 1, 1, "selective", 1, True, 8, overlap="a2a"), Layout(2, 2, 4, 1, 1, "moe", 1, False, 8),
              Layout(2, 2, 4, 1, 1, "full", 1, False, 8), Layout(2, 2, 4, 1, 1, "selective", 1, False, 4)]
    warm = fresh()
    for lay in others:
        warm.estimate(lay)
    for lay in [base, *others]:
        one, two = fresh().estimate(lay), warm.estimate(lay)
        assert one is not None and two is not None
        assert (one.step, one.chunk_times, one.memory) == (two.step, two.chunk_times, two.memory)
        assert fresh().time_floor(lay) == warm.time_floor(lay)
