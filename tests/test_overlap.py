"""Communication overlap in the cluster planner (``--parallel ...,overlap=a2a|tp|a2a+tp``): hand
values of both overlaps on a small MoE block, off by default with unchanged numbers, refused
layouts and bad values exiting 2, and the plan graph through the validator."""

from __future__ import annotations

import pytest
from test_expert_parallel import MOE, SIZES, _graph, _plan

from mapper.cli import main
from mapper.cluster import overlap
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.search import _setup
from mapper.costing.fusion import fuse_for
from mapper.costing.training import OTHER_BACKWARD
from mapper.errors import OptionsError
from mapper.parallel.layout import Layout, LayoutSpec, parse_layout
from mapper.pipeline import compile_graph
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

BASE = {"tensor": 2, "pipeline": 1, "data": 8, "micro_batch": 1, "expert": 8, "zero": 1, "recompute": "none",
        "sequence": True}


def _model():
    plat = with_nodes(load_platform("dgx-h100-superpod"), 2)
    return _setup(_graph(), plat, "adam", lambda x: fuse_for(x, plat)).model


def test_keys_parse_in_either_order():
    assert parse_layout("overlap=tp+a2a") == LayoutSpec(overlap="a2a+tp")
    assert parse_layout("tensor=2,overlap=none").overlap == "none"
    lay = Layout(2, 1, 8, sequence=True, expert=8, overlap="a2a")
    assert "overlap a2a" in lay.label() and lay.to_json()["overlap"] == "a2a"
    assert Layout(2, 1, 8).overlap == "none" and "overlap" not in Layout(2, 1, 8).label()


def test_pipelined_hand_values():
    """Wang et al.'s decomposition: max(c, g) + min(c, g) / n - g exposed beside the GEMM."""
    assert overlap.pipelined(4.0, 10.0, 4) == pytest.approx(1.0)  # hidden but one chunk
    assert overlap.pipelined(10.0, 4.0, 4) == pytest.approx(10.0 + 1.0 - 4.0)  # the rest and one chunk
    assert overlap.pipelined(3.0, 0.0, 8) == 3.0  # no GEMM: all of it
    # all-to-alls of 1 s a pass under 6 s of computation: the SMs they take (20 of 132) stay exposed
    assert overlap.alltoall_exposed(1.0, 3.0, 3.0) == pytest.approx(20 / 132)
    assert overlap.alltoall_exposed(5.0, 1.0, 1.0) == pytest.approx((10.0 - 2.0) / 2)  # longer than it


def test_alltoall_overlap_hand_values_on_a_moe_block():
    """A MoE block's four all-to-alls per micro-batch hide under the other micro-batch's forward and
    backward computation slowed by the SMs they take: each pass keeps max(2 a2a - (F + B), s 2 a2a) / 2."""
    pm = _model()
    off = Layout(**{**BASE, "overlap": "none"})
    on = Layout(**{**BASE, "overlap": "a2a"})
    fw0, bw0 = pm._block_times(off)
    fw1, bw1 = pm._block_times(on)
    costs = pm.block_costs(2, 1)
    moe = [i for i, c in enumerate(costs) if c.routed]
    assert moe
    for i, c in enumerate(costs):
        a2a = pm._alltoalls(c, off)
        f = c.forward - c.replicated / 2  # sequence parallelism cuts norms and adds by t = 2
        b = c.backward - OTHER_BACKWARD * c.replicated / 2
        exposed = max(2 * a2a - (f + b), 20 / 132 * 2 * a2a) / 2
        assert fw1[i] == pytest.approx(fw0[i] - a2a + exposed, rel=1e-12, abs=1e-15)
        assert bw1[i] == pytest.approx(bw0[i] - a2a + exposed, rel=1e-12, abs=1e-15)
        if i in moe:
            assert a2a > 0 and fw1[i] < fw0[i]


def test_tensor_overlap_hand_values_on_a_block():
    """Each forward collective: its reduce-scatter half pipelined with the GEMM before it and its
    all-gather half with the GEMM after it (the next block's first when it is the block's last),
    t chunks each; the backward ones mirrored under twice those GEMMs."""
    pm = _model()
    costs = pm.block_costs(2, 1)
    i = next(i for i, c in enumerate(costs) if len(c.collectives) >= 2 and overlap.neighbours(c)[0][1] > 0)
    c = costs[i]
    secs = pm._comm_each(c, Layout(tensor=2), 1)
    nxt = overlap.first_gemm(costs[i + 1]) if i + 1 < len(costs) else 0.0
    fwd_ids = [k for k, x in enumerate(c.collectives) if not x[2]]
    bwd_ids = [k for k, x in enumerate(c.collectives) if x[2]]
    near = {k: (a, b) for k, a, b in overlap.neighbours(c)}

    def hide(comm, gemm):
        return comm if gemm <= 0 else max(comm, gemm) + min(comm, gemm) / 2 - gemm

    want_f = sum(hide(secs[k] / 2, near[k][0]) + hide(secs[k] / 2, near[k][1] or nxt) for k in fwd_ids)
    mirror = [near[k] for k in reversed(fwd_ids)]
    want_b = sum(hide(secs[k] / 2, 2 * mirror[j][0]) + hide(secs[k] / 2, 2 * (mirror[j][1] or nxt))
                 for j, k in enumerate(bwd_ids))
    fwd, bwd = overlap.tp_exposed(c, secs, [x[2] for x in c.collectives], 2, nxt)
    assert fwd == pytest.approx(want_f) and bwd == pytest.approx(want_b)
    assert fwd < sum(secs[k] for k in fwd_ids)  # something hides
    lay = Layout(**{**BASE, "overlap": "tp"})
    fw1, _ = pm._block_times(lay)
    fw0, _ = pm._block_times(Layout(**BASE))
    assert fw0[i] - fw1[i] == pytest.approx(sum(secs[k] for k in fwd_ids) - fwd)


def test_off_by_default_and_none_changes_nothing():
    _, free = _plan({**BASE})
    _, none = _plan({**BASE, "overlap": "none"})
    assert free.best.step == none.best.step and free.best.layout.overlap == "none"
    assert free.to_json()["plan"]["overlap"] == "none"
    # auto never turns an overlap on by itself; given, every layout scored has it
    _, auto = _plan({"tensor": 2, "pipeline": 1, "micro_batch": 1})
    assert {e.layout.overlap for e in auto.ranked} == {"none"}
    _, given = _plan({"pipeline": 1, "micro_batch": 1, "overlap": "a2a+tp"})
    assert {e.layout.overlap for e in given.ranked} == {"a2a+tp"}
    assert all(e.layout.expert > 1 and e.layout.tensor > 1 and e.layout.sequence for e in given.ranked)


def test_overlaps_shorten_the_step():
    steps = {ov: _plan({**BASE, "overlap": ov})[1].best.step for ov in ("none", "a2a", "tp", "a2a+tp")}
    assert steps["a2a+tp"] < min(steps["a2a"], steps["tp"]) <= max(steps["a2a"], steps["tp"]) < steps["none"]


def test_overlap_plan_graph_passes_the_validator():
    plat, ch = _plan({"tensor": 2, "pipeline": 2, "interleave": 2, "micro_batch": 1, "expert": 4,
                      "sequence": True, "overlap": "a2a+tp"})
    est = ch.best
    assert est.layout.overlap == "a2a+tp"
    graph = plan_graph(est, "moe")
    result = compile_graph(graph, replica_platform(plat, "gpu0", est.layout.pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)


@pytest.mark.parametrize(("key", "why"), [
    ("overlap=ag", "overlap='ag'"), ("overlap=a2a+a2a", "choose one of"), ("overlap=", "choose one of"),
    ("tensor=1,overlap=tp", "sequence=on"), ("tensor=2,sequence=off,overlap=tp", "sequence=on"),
    ("tensor=1,expert=1,overlap=a2a", "expert > 1"), ("tensor=1,pipeline=2,interleave=1,overlap=a2a", "interleave"),
    ("tensor=1,expert=8,recompute=full,overlap=a2a", "recompute=full"),
    ("tensor=1,expert=8,recompute=moe,overlap=a2a", "recompute=moe"),
    ("tensor=1,pipeline=2,interleave=1,overlap=p2p", "interleave > 1"), ("tensor=1,pipeline=1,overlap=p2p", "pipeline > 1"),
])
def test_bad_overlap_exits_2(key, why, capsys):
    args = ["compile", MOE, *(x for k, v in SIZES.items() for x in ("--param", f"{k}={v}")),
            "--platform", "dgx-h100-superpod", "--nodes", "2", "--train", "--optimizer", "adam",
            "--parallel", key, "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert why in err and "Traceback" not in err


def test_overlap_on_a_dense_model_exits_2():
    plat = load_platform("dgx-h100")
    from mapper.cluster.search import plan_cluster
    from mapper.frontend.load import load_graph
    from mapper.frontend.sources import ModelFile

    g = load_graph(ModelFile("examples/llama.tg", params=(("LAYERS", 2),)))
    with pytest.raises(OptionsError, match="expert > 1"):
        plan_cluster(g, plat, LayoutSpec(overlap="a2a"), "adam", lambda x: fuse_for(x, plat))


def test_serving_refuses_overlap(capsys):
    assert main(["serve", "examples/llama.tg", "--param", "LAYERS=2", "--platform", "dgx-h100",
                 "--workload", "isl=128,osl=16", "--rate", "inf", "--parallel", "tensor=2,overlap=tp", "-q"]) == 2
    assert "overlap" in capsys.readouterr().err
