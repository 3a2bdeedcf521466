"""Pipeline send overlap (``--parallel ...,overlap=p2p``, Megatron-Core's ``overlap_p2p_comm``):
hand-worked warm-up counts and exposed sends of a small interleaved layout, the model's chunk times
against the same layout without it, and the plan graph through the validator (refused layouts:
tests/test_overlap.py)."""

from __future__ import annotations

import pytest
from test_expert_parallel import _plan

from mapper.cluster import overlap
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.schedule import orders
from mapper.parallel.layout import LayoutSpec, parse_layout
from mapper.pipeline import compile_graph

#: 2 pipeline ranks of 2 chunks each, 4 micro-batches (32 samples over 8 data ranks), over 2 nodes
LAYOUT = {"tensor": 1, "pipeline": 2, "interleave": 2, "micro_batch": 1, "expert": 4, "recompute": "none"}


def test_keys_parse_in_any_order():
    assert parse_layout("overlap=p2p+tp").overlap == "tp+p2p"
    assert parse_layout("overlap=p2p+a2a+tp").overlap == "a2a+tp+p2p"


def test_warm_up_and_cool_down_by_hand():
    """p = 2, v = 2, m = 4: rank 0 warms up with 2 (p - 1) + (v - 1) p = 4 forwards, chunks 0, 0, 1, 1
    (groups of p micro-batches per chunk), and cools down with backwards of chunks 1, 1, 0, 0; rank 1
    with 2 forwards of chunk 0 and 2 backwards of its chunk 0."""
    assert overlap.phases(2, 2, 4, 0) == ([2, 2], [2, 2])
    assert overlap.phases(2, 2, 4, 1) == ([2, 0], [2, 0])
    for s, seq in enumerate(orders("1f1b", 2, 2, 4)):  # the same ops lead and trail the schedule's order
        fwd, bwd = overlap.phases(2, 2, 4, s)
        warm = sum(fwd)
        assert all(k == "F" for k, _, _ in seq[:warm]) and all(k == "B" for k, _, _ in seq[len(seq) - warm:])
        assert [sum(c // 2 == j for _, c, _ in seq[:warm]) for j in range(2)] == fwd
        assert [sum(c // 2 == j for _, c, _ in seq[len(seq) - warm:]) for j in range(2)] == bwd


def test_exposed_sends_by_hand():
    """Chunks of 1 s forward and 2 s backward: a steady-state forward send hides under a 2 s backward, a
    backward send under a 1 s forward; the warm-up forwards and cool-down backwards wait for it whole."""
    assert overlap.p2p_exposed(3.0, 2.0) == 1.0 and overlap.p2p_exposed(1.0, 2.0) == 0.0
    sends = overlap.p2p_sends([1.0, 0.5, 2.0, 0.0], [(1.0, 2.0)] * 4, 2, 2, 4)
    assert sends[0] == pytest.approx((1.0, 0.0, 0.0, 0.5, 0.5))  # rank 0, chunk 0: 2 of 4 whole each way
    assert sends[1] == pytest.approx((0.5, 0.0, 0.0, 0.25, 0.25))  # rank 1, chunk 0: 2 warm-up, 2 cool-down
    assert sends[2] == pytest.approx((2.0, 0.0, 1.0, 1.0, 1.5))  # (2 x 2 + 2 x 0) / 4, (2 x 2 + 2 x 1) / 4
    assert sends[3] == (0.0, 0.0, 0.0, 0.0, 0.0)  # the last chunk sends nothing on


def test_model_charges_the_exposed_part_and_none_is_unchanged():
    _, off = _plan(LAYOUT)
    _, on = _plan({**LAYOUT, "overlap": "p2p"})
    a, b = off.best, on.best
    assert a.layout.overlap == "none" and b.layout.overlap == "p2p" and not a.chunk_sends
    assert (a.layout.tensor, a.layout.data, a.chunks) == (b.layout.tensor, b.layout.data, b.chunks)
    assert any(x[0] > 0 for x in b.chunk_sends)
    for (f0, b0), (f1, b1), (hop, _, _, hf, hb) in zip(a.chunk_times, b.chunk_times, b.chunk_sends):
        # without the overlap each pass carries the whole send; with it, its average exposed part
        assert f1 == pytest.approx(f0 - hop + hf) and b1 == pytest.approx(b0 - hop + hb)
        assert hf <= hop and hb <= hop
    assert b.step <= a.step


def test_p2p_plan_graph_passes_the_validator_with_the_model_times():
    plat, ch = _plan({**LAYOUT, "overlap": "p2p"})
    est = ch.best
    graph = plan_graph(est, "moe")
    # each chunk's tasks sum to m times its chunk times: the warm-up and cool-down carry the whole send
    for c, (f, b) in enumerate(est.chunk_times):
        fwd = sum(t.explicit_cost[0][1] for t in graph.tasks if t.name.startswith(f"fwd.c{c}.mb"))
        bwd = sum(t.explicit_cost[0][1] for t in graph.tasks if t.name.startswith(f"bwd.c{c}.mb"))
        assert fwd == pytest.approx(est.micro_batches * f) and bwd == pytest.approx(est.micro_batches * b)
    first = next(t for t in graph.tasks if t.name == "fwd.c2.mb0").explicit_cost[0][1]  # rank 0's warm-up
    later = next(t for t in graph.tasks if t.name == f"fwd.c2.mb{est.micro_batches - 1}").explicit_cost[0][1]
    assert first - later == pytest.approx(est.chunk_sends[2][0] - est.chunk_sends[2][1])
    result = compile_graph(graph, replica_platform(plat, "gpu0", est.layout.pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)


def test_why_given_assumes_a_pipeline_for_p2p():
    assert overlap.why_given(LayoutSpec(overlap="p2p")) == ""
    assert "interleave" in overlap.why_given(LayoutSpec(overlap="p2p", interleave=1))
