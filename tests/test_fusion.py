"""Operator fusion (mapper.costing.fusion), tensor-core rates, the GEMM wave model and switch ports."""

from __future__ import annotations

import json

import pytest
from randdag import make_cost, make_graph

from mapper.cli import main
from mapper.costing.cost import build_cost_table
from mapper.costing.fusion import fuse, fusion_groups, leaf_tasks
from mapper.costing.work import wave_efficiency
from mapper.engine.schedule import Assignment, ScheduleOptions, build_schedule
from mapper.engine.validate import validate
from mapper.errors import OptionsError, PlatformError
from mapper.frontend.load import graph_from_text
from mapper.pipeline import compile_graph
from mapper.platform.loader import load_platform, parse_platform

BLOCK = """
param N = 2
graph block {
  input x : f32[N, 16, 8, 8]
  a = relu(batchnorm(conv2d(x, weight f32[16, 16, 3, 3], padding = 1)))
  b = batchnorm(conv2d(a, weight f32[16, 16, 1, 1]))
  out = relu(add(b, x))
  output out
}
"""

MLP = """
graph mlp {
  input x : f16[64, 128]
  h = gelu(add(matmul(x, weight f16[128, 512]), weight f16[512]))
  y = add(matmul(h, weight f16[512, 128]), weight f16[128])
  z = layernorm(add(x, y))
  output z
}
"""


def test_conv_batchnorm_add_relu_become_one_task_each():
    g = graph_from_text(BLOCK)
    f = fuse(g)
    assert [t.name for t in f.tasks] == ["a.conv2d+a.batchnorm+a", "b.conv2d+b+out.add+out"]
    assert [[p.op for p in t.parts] for t in f.tasks] == [["conv2d", "batchnorm", "relu"],
                                                          ["conv2d", "batchnorm", "add", "relu"]]
    assert f.outputs == ("b.conv2d+b+out.add+out",)
    # the residual input is an operand of the second group; the intermediate tensors are gone
    second = f.tasks[1]
    assert [o.name for o in second.operands] == ["a.conv2d+a.batchnorm+a", "b.conv2d.w0", "x"]
    assert second.bytes_written == second.output.nbytes
    assert second.flops == sum(p.flops for p in second.parts)
    assert [(e.src, e.dst) for e in f.edges] == [(0, 1)]
    assert leaf_tasks(f) == g.tasks


def test_gemm_epilogue_takes_the_residual_add_and_stops_before_a_norm():
    f = fuse(graph_from_text(MLP))
    assert [[p.op for p in t.parts] or [t.op] for t in f.tasks] == [
        ["matmul", "add", "gelu"], ["matmul", "add", "add"], ["layernorm"]]
    chain = fuse(graph_from_text(MLP.replace("z = layernorm(add(x, y))", "z = layernorm(add(relu(x), x))")))
    assert [t.op for t in chain.tasks][-1] == "relu" and [p.op for p in chain.tasks[-1].parts] == [
        "relu", "add", "layernorm"]


def test_a_tensor_with_two_consumers_or_a_graph_output_is_not_fused_away():
    g = graph_from_text("""
graph g {
  input x : f32[32, 32]
  m = matmul(x, weight f32[32, 32])
  r = relu(m)
  s = add(m, r)
  t = relu(s)
  output t, r
}
""")
    groups = [[g.tasks[i].name for i in grp] for grp in fusion_groups(g)]
    assert groups == [["s", "t"]]  # m feeds r and s; r is a graph output


def test_placement_explicit_cost_and_streaming_keep_ops_apart():
    g = graph_from_text("""
graph g {
  input x : f32[32, 32]
  m = matmul(x, weight f32[32, 32])
  r = relu(m) @cpu
  s = relu(r) streamable 4
  output s
}
""")
    assert fusion_groups(g) == ()


def test_fused_task_costs_one_kernel_on_a_gpu_and_its_parts_on_a_cpu():
    g = graph_from_text(BLOCK)
    f = fuse(g)
    plat = load_platform("workstation")
    fused, plain = build_cost_table(f, plat), build_cost_table(g, plat)
    cpu, gpu = plat.device_index("cpu0"), plat.device_index("gpu0")
    assert fused.time[0][cpu] == pytest.approx(sum(plain.time[t][cpu] for t in range(3)))
    launch = plat.devices[gpu].launch_us * 1e-6
    # one launch instead of three, and one pass over memory
    assert fused.time[0][gpu] < sum(plain.time[t][gpu] for t in range(3)) - 2 * launch


def test_fuse_none_keeps_the_graph_and_platforms_without_gpus_do_not_fuse():
    g = graph_from_text(MLP)
    assert len(compile_graph(g, "workstation", mapper="heft").graph.tasks) == 3
    assert len(compile_graph(g, "workstation", mapper="heft", fuse="none").graph.tasks) == 7
    assert len(compile_graph(g, "cpu-server", mapper="heft").graph.tasks) == 7
    with pytest.raises(OptionsError, match="--fuse"):
        compile_graph(g, "workstation", fuse="all")


def test_check_lists_the_fused_kernels_and_compile_json_names_them(tmp_path, capsys):
    src = tmp_path / "mlp.tg"
    src.write_text(MLP)
    assert main(["check", str(src)]) == 0
    out = capsys.readouterr().out
    assert "fused    2 kernels on devices that fuse (7 -> 3 tasks):" in out
    assert "h.matmul+h.add+h: matmul + add + gelu" in out
    assert main(["check", str(src), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tasks"] == 7 and doc["fused_tasks"] == 3 and doc["fused"][0]["ops"] == ["matmul", "add", "gelu"]
    assert main(["check", str(src), "--json", "--fuse", "none"]) == 0
    assert "fused" not in json.loads(capsys.readouterr().out)
    out_json = tmp_path / "r.json"
    assert main(["compile", str(src), "--platform", "workstation", "--mapper", "heft", "-q", "--json",
                 str(out_json)]) == 0
    assert [t["name"] for t in json.loads(out_json.read_text())["tasks"]] == [
        "h.matmul+h.add+h", "y.matmul+y+z.add", "z"]


def test_dump_after_fuse_shows_the_fused_graph(tmp_path, capsys):
    src = tmp_path / "mlp.tg"
    src.write_text(MLP)
    assert main(["compile", str(src), "--platform", "workstation", "--dump-after", "fuse"]) == 0
    out = capsys.readouterr().out
    assert "task 0 h.matmul+h.add+h = matmul(" in out and "fused h.matmul=matmul + h.add=add + h=gelu" in out
    assert main(["compile", str(src), "--platform", "workstation", "--dump-after", "lower"]) == 0
    assert "fused" not in capsys.readouterr().out


def test_every_shipped_platform_compiles_resnet50_and_bert_with_fusion():
    from mapper.frontend.load import load_graph
    from mapper.platform.cluster import with_nodes
    from mapper.platform.loader import list_platforms, load_platform

    for name in ("resnet50", "bert_base"):
        g = load_graph(f"examples/{name}.tg")
        for plat, _ in list_platforms():
            if plat in ("heft3", "loihi"):  # explicit-cost processors only (loihi: spiking neurons, docs/huge.md)
                continue
            loaded = load_platform(plat)
            if loaded.fleet is not None:
                loaded = with_nodes(loaded, {k.kind: 1 for k in loaded.fleet.kinds})
            elif loaded.cluster is not None:
                loaded = with_nodes(loaded, 2)
            r = compile_graph(g, loaded, mapper="heft")
            assert validate(r.result.schedule) == []
            assert sum(len(t.parts) or 1 for t in r.graph.tasks) == len(g.tasks)


# -- rates per unit --------------------------------------------------------------------

GPU = """
name = "g"
[[device]]
name = "gpu0"
kind = "gpu"
peak_gflops = { f32 = 1000.0, f16 = 2000.0 }
tensor_gflops = { tf32 = 8000.0, f16 = 16000.0 }
mem_bandwidth_gbs = 1000.0
{extra}
"""


def _mm(dtype: str, n: int = 4096) -> str:
    return f"graph m {{\n  input a : {dtype}[{n}, {n}]\n  c = matmul(a, weight {dtype}[{n}, {n}])\n  output c\n}}\n"


def test_gemms_run_on_tensor_cores_and_f32_on_tf32_only_when_the_platform_says_so():
    t = {}
    for dtype, extra in (("f16", ""), ("f32", ""), ("f32", 'f32_matmul = "tf32"')):
        plat = parse_platform(GPU.replace("{extra}", extra))
        t[(dtype, extra)] = build_cost_table(graph_from_text(_mm(dtype)), plat).time[0][0]
    flops = 2 * 4096**3
    assert t[("f16", "")] == pytest.approx(flops / (0.78 * 16000e9))
    assert t[("f32", "")] == pytest.approx(flops / (0.78 * 1000e9))  # no tf32: the CUDA-core rate
    assert t[("f32", 'f32_matmul = "tf32"')] == pytest.approx(flops / (0.78 * 8000e9))
    # elementwise ops keep the CUDA-core rate
    plat = parse_platform(GPU.replace("{extra}", ""))
    assert plat.devices[0].tensor_peak("f16") == 16000 and plat.devices[0].peak("f16") == 2000


@pytest.mark.parametrize("extra, match", [
    ('f32_matmul = "tf16"', "f32_matmul"),
    ('tensor_gflops = { f8 = 1.0 }', "unknown dtype 'f8'"),
    ('gemm_tile = { m = 128, n = 128, k = 32 }', "compute_units"),
    ('compute_units = 0\ngemm_tile = { m = 128, n = 128, k = 32 }', "compute_units"),
    ('compute_units = 8\ngemm_tile = { m = 128, n = 128, k = 0.5 }', "gemm_tile"),
    ('fusion = "yes"', "fusion"),
    ('gemm_stages = 3', "gemm_stages"),
    ('compute_units = 8\ngemm_tile = { m = 128, n = 128, k = 32 }\ngemm_stages = 0', "gemm_stages"),
])
def test_bad_accelerator_keys_name_the_key(extra, match):
    with pytest.raises(PlatformError, match=match):
        parse_platform(GPU.replace("{extra}", extra).replace("tensor_gflops = { tf32 = 8000.0, f16 = 16000.0 }\n",
                                                             "" if "tensor_gflops" in extra else
                                                             "tensor_gflops = { f16 = 16000.0 }\n"))


def test_wave_efficiency_counts_whole_tiles_and_whole_waves():
    g = graph_from_text(_mm("f16", 64))
    task = g.tasks[0]
    tile = (128, 128, 32)
    # 64 rows run a 64-row tile (whole 16-row MMA steps): a 64x128 tile holds a 64x64 output, half of it,
    # on 1 of 4 units
    assert wave_efficiency(task, (1, 64, 64, 64), tile, 4) == pytest.approx(0.5 / 4)
    # split-K: K = 64 gives 2 slices of 32 at most, on 2 of the 4 units
    assert wave_efficiency(task, (1, 64, 64, 64), tile, 4, max_split=4) == pytest.approx(0.5 * 2 / 4)
    # 8 rows pay for 16: a 16x128 tile holds 8x64 of output
    assert wave_efficiency(task, (1, 8, 64, 64), tile, 1) == pytest.approx(8 * 64 / (16 * 128))
    # 8 tiles on 10 units: one wave, 8 of 10 busy; 10 // 8 leaves no room to split
    assert wave_efficiency(task, (1, 256, 512, 128), tile, 10, max_split=4) == pytest.approx(8 / 10)
    # 9 tiles on 8 units: two waves, 9 of 16 slots busy
    assert wave_efficiency(task, (1, 384, 384, 128), tile, 8) == pytest.approx(9 / 16)
    assert wave_efficiency(task, (1, 4096, 4096, 4096), tile, 128) == 1.0


def test_a_gemm_waits_for_its_pipeline_to_fill_and_its_output_to_drain():
    from mapper.costing.work import pipeline_fill_time

    tile = (128, 128, 32)
    f16, f32 = (graph_from_text(_mm(dt, 64)).tasks[0] for dt in ("f16", "f32"))
    per_unit = 1000e9 / 4  # 1000 GB/s shared by 4 units
    # K = 4096: three blocks of (128 + 128) x 32 in flight, then the 128 x 128 output block
    full = (3 * 256 * 32 + 128 * 128) * 2 / per_unit
    assert pipeline_fill_time(f16, (1, 128, 128, 4096), tile, 4, 1, 3, 1000.0) == pytest.approx(full)
    # 4-byte operands wait twice as long
    assert pipeline_fill_time(f32, (1, 128, 128, 4096), tile, 4, 1, 3, 1000.0) == pytest.approx(2 * full)
    # K = 64 holds two blocks only; split 2 ways (4 units, 1 tile) one each
    assert pipeline_fill_time(f16, (1, 128, 128, 64), tile, 4, 1, 3, 1000.0) == \
        pytest.approx((2 * 256 * 32 + 128 * 128) * 2 / per_unit)
    assert pipeline_fill_time(f16, (1, 128, 128, 64), tile, 4, 4, 3, 1000.0) == \
        pytest.approx((1 * 256 * 32 + 128 * 128) * 2 / per_unit)
    assert pipeline_fill_time(f16, (1, 128, 128, 4096), tile, 4, 1, 0, 1000.0) == 0.0
    # in the cost table it is part of the call's fixed time, beside launch_us
    base = GPU.replace("{extra}", "compute_units = 4\ngemm_tile = { m = 128, n = 128, k = 32 }\nlaunch_us = 3.0\n")
    plain = build_cost_table(graph_from_text(_mm("f16", 2048)), parse_platform(base))
    staged = build_cost_table(graph_from_text(_mm("f16", 2048)), parse_platform(base + "gemm_stages = 3\n"))
    fill = pipeline_fill_time(f16, (1, 2048, 2048, 2048), tile, 4, 1, 3, 1000.0)
    assert staged.time[0][0] - plain.time[0][0] == pytest.approx(fill)
    from mapper.costing.latency import estimate

    task = graph_from_text(_mm("f16", 2048)).tasks[0]
    assert estimate(task, "gemm", parse_platform(base + "gemm_stages = 3\n").devices[0]).t_overhead == \
        pytest.approx(fill)


def test_attention_pays_for_whole_waves_of_query_blocks():
    from mapper.costing.work import attention_wave_efficiency

    def att(batch: int, seq: int, heads: int):
        text = (f"graph a {{\n  input q : f16[{batch * seq}, {3 * 64 * heads}]\n"
                f"  o = attention(q, heads = {heads}, seq = {seq})\n  output o\n}}\n")
        return graph_from_text(text).tasks[0]

    # 1 sequence x 12 heads x 3 blocks of 128 queries = 36 blocks on 108 units: one wave, a third busy
    assert attention_wave_efficiency(att(1, 384, 12), 128, 108) == pytest.approx(36 / 108)
    # 128 x 12 x 3 = 4608 blocks: 43 waves, nearly full
    assert attention_wave_efficiency(att(128, 384, 12), 128, 108) == pytest.approx(4608 / (43 * 108))
    assert attention_wave_efficiency(graph_from_text(_mm("f16", 64)).tasks[0], 128, 108) == 1.0
    # a decode step (one query per sequence) runs blocks of one 16-row MMA step, not 128 rows:
    # 384 sequences x 32 heads = 12288 blocks, 114 waves, each block 1/16 busy
    assert attention_wave_efficiency(att(384, 1, 32), 128, 108) == pytest.approx(12288 / 16 / (114 * 108))
    # 40 queries (a chunk of speculative or chunked decoding) take 48 rows: 3 MMA steps; 32 blocks
    # cannot fill 108 units, but without a cache there is one chunk of keys to split them by
    assert attention_wave_efficiency(att(4, 40, 8), 128, 108) == pytest.approx(4 * 8 * 40 / 48 / 108)


def test_decode_attention_splits_the_keys_to_fill_the_units():
    from mapper.costing.work import attention_wave_efficiency

    def step(batch: int, heads: int, cache: int):
        text = (f"graph a {{\n  input q : f16[{batch}, {3 * 128 * heads}]\n"
                f"  o = attention(q, heads = {heads}, seq = 1, cache = {cache})\n  output o\n}}\n")
        return graph_from_text(text).tasks[0]

    # 1 x 32 blocks: 2049 keys allow 17 chunks, 108 // 32 = 3 are taken: 96 blocks in one wave
    assert attention_wave_efficiency(step(1, 32, 2048), 128, 108) == pytest.approx(32 / 16 * 3 / 108)
    # 64 keys: one chunk, nothing to split
    assert attention_wave_efficiency(step(1, 32, 63), 128, 108) == pytest.approx(32 / 16 / 108)
    # 8 x 32 = 256 blocks fill the units already
    assert attention_wave_efficiency(step(8, 32, 2048), 128, 108) == pytest.approx(256 / 16 / (3 * 108))
    # grouped-query: the 4 query heads of each of 8 key-value heads share a block's rows (2 x 8 blocks
    # of 4 useful rows of 16), split 6 ways to fill 96 of the 108 units
    text = ("graph a {\n  input q : f16[2, 6144]\n"
            "  o = attention(q, heads = 32, kv_heads = 8, seq = 1, cache = 2048)\n  output o\n}\n")
    gqa = graph_from_text(text).tasks[0]
    assert attention_wave_efficiency(gqa, 128, 108) == pytest.approx(2 * 8 * 4 / 16 * 6 / 108)


def test_overlap_exponent_blends_compute_and_memory_time():
    base = GPU.replace("{extra}", "")
    plain = build_cost_table(graph_from_text(_mm("f16", 2048)), parse_platform(base)).time[0][0]
    blended = build_cost_table(graph_from_text(_mm("f16", 2048)),
                               parse_platform(base + "overlap_exponent = 1.5\n")).time[0][0]
    tc = 2 * 2048**3 / (0.78 * 16000e9)
    tm = 3 * 2048 * 2048 * 2 / (0.9 * 1000e9)
    assert plain == pytest.approx(max(tc, tm))
    assert blended == pytest.approx((tc**1.5 + tm**1.5) ** (1 / 1.5))
    with pytest.raises(PlatformError, match="overlap_exponent"):
        parse_platform(base + "overlap_exponent = 0.5\n")


# -- switches ----------------------------------------------------------------------------

SWITCHED = """
name = "s"
[[device]]
name = "cpu0"
kind = "cpu"
[[device]]
name = "gpu0"
kind = "gpu"
[[device]]
name = "gpu1"
kind = "gpu"
[[device]]
name = "gpu2"
kind = "gpu"
[[switch]]
name = "nvs"
ports = ["gpu0", "gpu1", "gpu2"]
bandwidth_gbs = 8.0
"""


def test_transfers_through_a_switch_share_the_sender_s_port_under_contention():
    plat = parse_platform(SWITCHED)
    assert [(lk.src, lk.dst) for lk in plat.links] == [("gpu0", "gpu1"), ("gpu0", "gpu2"), ("gpu1", "gpu0"),
                                                       ("gpu1", "gpu2"), ("gpu2", "gpu0"), ("gpu2", "gpu1")]
    g = make_graph(3, [(0, 1, 8e9, None), (0, 2, 8e9, None)])
    cost = make_cost(g, plat, [[1.0, 1.0, 1.0, 1.0]] * 3)
    a = Assignment((1, 2, 3), ((), (0,), (1,), (2,)))
    free = build_schedule(cost, a)
    assert [(t.start, t.end) for t in free.transfers] == [(1.0, 2.0), (1.0, 2.0)]  # 8 GB at 8 GB/s each
    busy = build_schedule(cost, a, ScheduleOptions(contention=True))
    assert [(t.start, t.end) for t in busy.transfers] == [(1.0, 2.0), (1.0, 3.0)]  # gpu0's egress port is shared
    assert validate(busy) == []
    # gpu0 -> gpu1 and gpu2 -> gpu0 hold different ports (an egress and an ingress of gpu0): no wait
    g2 = make_graph(4, [(0, 2, 8e9, None), (1, 3, 8e9, None)])
    cost2 = make_cost(g2, plat, [[1.0] * 4] * 4)
    s2 = build_schedule(cost2, Assignment((1, 3, 2, 1), ((), (0, 3), (2,), (1,))), ScheduleOptions(contention=True))
    assert [(t.start, t.end) for t in s2.transfers] == [(1.0, 2.0), (1.0, 2.0)]


def test_validator_catches_two_transfers_on_one_port_at_once():
    import dataclasses

    plat = parse_platform(SWITCHED)
    g = make_graph(3, [(0, 1, 8e9, None), (0, 2, 8e9, None)])
    cost = make_cost(g, plat, [[1.0, 1.0, 1.0, 1.0]] * 3)
    s = build_schedule(cost, Assignment((1, 2, 3), ((), (0,), (1,), (2,))), ScheduleOptions(contention=True))
    second = s.transfers[1]
    forged = dataclasses.replace(second, end=2.0, hops=((second.hops[0][0], 1.0, 2.0),))
    bad = dataclasses.replace(s, transfers=(s.transfers[0], forged))
    assert any(v.kind == "link" and "switch port" in v.message for v in validate(bad))


@pytest.mark.parametrize("body, match", [
    ('ports = ["gpu0"]\nbandwidth_gbs = 8.0', "two or more"),
    ('ports = ["gpu0", "gpu9"]\nbandwidth_gbs = 8.0', "unknown device 'gpu9'"),
    ('ports = ["gpu0", "gpu0"]\nbandwidth_gbs = 8.0', "twice"),
    ('ports = ["gpu0", "gpu1"]', "bandwidth_gbs"),
    ('ports = ["gpu0", "gpu1"]\nbandwidth_gbs = 8.0\nspeed = 1', "unknown key 'speed'"),
])
def test_bad_switches_name_the_key(body, match):
    text = SWITCHED.split("[[switch]]")[0] + f'[[switch]]\nname = "x"\n{body}\n'
    with pytest.raises(PlatformError, match=match):
        parse_platform(text)
