"""The memory a training process cannot use (mapper.cluster.reserve), against hand counts."""

from __future__ import annotations

import pytest

from mapper.cluster.reserve import ServingGroups, communicators, nccl_bytes, reserve, reserve_parts
from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import Layout, LayoutSpec
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

MIB, GIB = 2**20, 2**30
#: one NCCL connection's buffers: LL 8 x 512 x 8 x 16 B, LL128 120 x 640 x 8 x 8 B, Simple 4 MiB
CONNECTION = 524_288 + 4_915_200 + 4_194_304


def test_communicators_are_the_degrees_above_one():
    assert communicators(Layout(1, 1, 64)) == {"data": 64}
    assert communicators(Layout(2, 4, 8)) == {"data": 8, "tensor": 2, "pipeline": 4}
    assert communicators(Layout(1, 1, 1)) == {}
    # eight experts over eight data ranks: each shard lives once, so no expert-data group
    assert communicators(Layout(1, 1, 8, expert=8)) == {"data": 8, "expert": 8}
    assert communicators(Layout(1, 1, 16, expert=8)) == {"data": 16, "expert": 8, "expert_data": 2}
    # gradients reduce over data x context
    assert communicators(Layout(2, 1, 4, context=2)) == {"data": 8, "tensor": 2, "context": 2}
    assert communicators(Layout(2, 1, 8, expert=4, expert_tensor=1)) == {
        "data": 8, "tensor": 2, "expert": 4, "expert_data": 4}
    assert communicators(Layout(1, 1, 8, expert=4, expert_tensor=2)) == {"data": 8, "expert": 4,
                                                                         "expert_tensor": 2}


def test_nccl_buffers_by_hand():
    collective = 16 * 3 * CONNECTION  # 16 channels, ring + tree chain peers
    assert collective == 462_422_016
    assert nccl_bytes(Layout(1, 1, 1)) == 0
    assert nccl_bytes(Layout(1, 1, 64)) == collective
    # data and tensor collectives, and the pipeline's sends: 2 peers x 2 channels x 4 MiB
    assert nccl_bytes(Layout(2, 4, 8)) == 2 * collective + 16 * MIB


def test_reserve_on_an_80_gib_gpu_by_hand():
    parts = reserve_parts(80 * GIB, Layout(1, 1, 64))
    assert parts["driver"] == pytest.approx(831 * MIB)  # 81,920 - 81,089 MiB
    assert parts["context"] == 666_632_192
    assert parts["workspaces"] == 64 * MIB
    assert parts["nccl"] == 462_422_016
    total = 831 * MIB + 666_632_192 + 64 * MIB + 462_422_016
    assert reserve(80 * GIB, Layout(1, 1, 64)) == pytest.approx(total)
    assert total / GIB == pytest.approx(1.92, abs=0.01)


def test_plan_reports_its_reserve_as_a_part_of_its_peak():
    plat = with_nodes(load_platform("selene"), 2)
    g = load_graph(ModelFile("examples/gpt.tg", params=(("LAYERS", 4), ("HIDDEN", 1024), ("HEADS", 16),
                                                        ("BATCH", 32), ("SEQ", 1024))))
    best = plan_cluster(g, plat, LayoutSpec(tensor=2, pipeline=2), "adam", lambda x: fuse_for(x, plat)).best
    peak = best.to_json()["peak_memory"]
    assert peak["reserve"] == pytest.approx(reserve(80 * GIB, best.layout))
    assert peak["reserve"] > reserve(80 * GIB, Layout(1, 1, 1))  # its communicators' buffers
    assert peak["total"] == pytest.approx(sum(v for k, v in peak.items() if k != "total"))


def test_a_serving_replica_opens_its_tensor_group_and_pipeline_sends_only():
    assert communicators(ServingGroups()) == {}
    assert communicators(ServingGroups(tensor=8)) == {"tensor": 8}
    assert communicators(ServingGroups(tensor=4, pipeline=2)) == {"tensor": 4, "pipeline": 2}
    # one GPU: driver, context and workspaces only, 831 + 635.75 + 64 MiB
    assert reserve(80 * GIB, ServingGroups()) == pytest.approx(831 * MIB + 666_632_192 + 64 * MIB)
    assert reserve(80 * GIB, ServingGroups()) / GIB == pytest.approx(1.49, abs=0.01)
    # TP8: one collective communicator more; TP4 x PP2: that and the sends to two neighbours
    assert nccl_bytes(ServingGroups(tensor=8)) == 462_422_016
    assert nccl_bytes(ServingGroups(tensor=4, pipeline=2)) == 462_422_016 + 2 * 2 * 4 * MIB


def test_serving_memory_counts_the_reserve_by_part():
    from mapper.serving.runtimes import RUNTIMES
    from mapper.serving.serve import server_for

    server = server_for(ModelFile("examples/llama.tg", params=(("LAYERS", 2), ("HIDDEN", 1024), ("HEADS", 8),
                                                              ("KV_HEADS", 8), ("FFN", 4096))),
                        "dgx-a100", RUNTIMES["trtllm"])
    capacity = 80 * GIB
    for tensor, pipeline in ((1, 1), (2, 1), (2, 2)):
        parts, tokens = server.step_model(tensor, pipeline, 512).memory(capacity, RUNTIMES["trtllm"])
        assert parts["reserve"] == pytest.approx(reserve(capacity, ServingGroups(tensor, pipeline)))
        assert set(parts) == {"weights", "activations", "reserve", "kv_cache"} and tokens > 0
    one = server.step_model(1, 1, 512).memory(capacity, RUNTIMES["trtllm"])[0]
    two = server.step_model(2, 1, 512).memory(capacity, RUNTIMES["trtllm"])[0]
    assert two["reserve"] - one["reserve"] == pytest.approx(462_422_016)  # TP2's communicator
