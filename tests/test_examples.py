"""The example workloads lower, and their totals match hand-derived formulas.

Every expected number below is derived here from the model's published sizes
(layer table, widths, parameter counts), not copied from the lowerer's output.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from mapper.core.graph import TaskGraph
from mapper.frontend.load import graph_from_text

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@cache
def load(name: str) -> TaskGraph:
    path = EXAMPLES / f"{name}.tg"
    return graph_from_text(path.read_text(), str(path))


def ops(g: TaskGraph) -> Counter:
    return Counter(t.op for t in g.tasks)


def flops_of(g: TaskGraph, *names: str) -> float:
    return sum(t.flops for t in g.tasks if t.op in names)


def weight_elements(g: TaskGraph) -> int:
    """Elements of all distinct weights the graph's tasks read."""
    seen = {}
    for t in g.tasks:
        for o in t.operands:
            if o.kind == "weight":
                seen[o.name] = o.type.numel
    return sum(seen.values())


def test_every_example_has_a_header_and_lowers():
    files = sorted(EXAMPLES.glob("*.tg"))
    assert {f.stem for f in files} >= {"resnet50", "bert_base", "gpt2_block", "jacobi2d", "cg",
                                       "fft_conv", "heft_paper"}
    for f in files:
        text = f.read_text()
        assert text.startswith(f"# {f.name}: "), f
        assert "Source:" in text and "Sizes:" in text, f
        assert load(f.stem).tasks


# -- ResNet-50 ---------------------------------------------------------------------

# (width, blocks, first stride, output spatial size) of conv2_x .. conv5_x (He et al., Table 1)
RESNET_STAGES = ((64, 3, 1, 56), (128, 4, 2, 28), (256, 6, 2, 14), (512, 3, 2, 7))


def resnet50_macs() -> int:
    """Conv + fc multiply-accumulates of ResNet-50 v1.5 at 224x224, from the layer table."""
    macs = 64 * 3 * 7 * 7 * 112 * 112  # conv1
    cin, hw_in = 64, 56
    for w, blocks, _stride, hw in RESNET_STAGES:
        for b in range(blocks):
            c_in = cin if b == 0 else 4 * w
            h1 = hw_in if b == 0 else hw  # the 1x1 runs before the strided 3x3
            macs += c_in * w * h1 * h1  # 1x1 reduce
            macs += w * w * 9 * hw * hw  # 3x3 (stride here in v1.5)
            macs += w * 4 * w * hw * hw  # 1x1 expand
            if b == 0:
                macs += c_in * 4 * w * hw * hw  # projection shortcut
        cin, hw_in = 4 * w, hw
    return macs + 2048 * 1000  # fc


# (bottleneck width, blocks, first stride) of ResNeXt-50 32x4d's four stages (Xie et al., Table 1)
RESNEXT_STAGES = ((128, 3, 1), (256, 4, 2), (512, 6, 2), (1024, 3, 2))


def retinanet_macs(img: int = 800, classes: int = 264, anchors: int = 9) -> tuple[int, int]:
    """Conv multiply-accumulates and declared weights of RetinaNet (ResNeXt-50 32x4d FPN, P3-P7, the
    heads computed on each level), from the layer tables of Lin et al. and Xie et al."""
    macs = weights = 0

    def conv(cin: int, cout: int, k: int, hw: int, groups: int = 1) -> None:
        nonlocal macs, weights
        macs += cout * (cin // groups) * k * k * hw * hw
        weights += cout * (cin // groups) * k * k

    conv(3, 64, 7, img // 2)
    hw_in, cin, side = img // 4, 64, []
    for i, (w, blocks, stride) in enumerate(RESNEXT_STAGES):
        c, hw = 256 * 2**i, hw_in // stride
        for b in range(blocks):
            conv(cin if b == 0 else c, w, 1, hw_in if b == 0 else hw)
            conv(w, w, 3, hw, 32)
            conv(w, c, 1, hw)
            if b == 0:
                conv(cin, c, 1, hw)
        side.append(hw)
        cin, hw_in = c, hw
    for c, hw in zip((512, 1024, 2048), side[1:], strict=True):  # laterals and 3x3 outputs on C3..C5
        conv(c, 256, 1, hw)
        conv(256, 256, 3, hw)
    p6 = (side[3] + 1) // 2
    conv(256, 256, 3, p6)
    conv(256, 256, 3, (p6 + 1) // 2)
    for hw in (*side[1:], p6, (p6 + 1) // 2):
        for cout in (anchors * classes, anchors * 4):
            for _ in range(4):
                conv(256, 256, 3, hw)
            conv(256, cout, 3, hw)
    return macs, weights


def test_retinanet_matches_its_layer_tables():
    g = load("retinanet")
    macs, weights = retinanet_macs()
    assert flops_of(g, "conv2d") == 2 * macs and weight_elements(g) == weights
    assert macs == pytest.approx(201.2e9, rel=1e-3)  # the header's figure
    outs = [g.tasks[g.task_index(o)].output for o in g.outputs]
    assert [o.shape for o in outs if o is not None][:2] == [(1, 2376, 100, 100), (1, 2376, 50, 50)]


# MobileDet-EdgeTPU's blocks after its stem and Tucker C1 (tensorflow/models ssd_mobiledet_feature_extractor.py):
# (kind, output channels, expansion, kernel, stride, residual)
MOBILEDET_BLOCKS = (("fused", 16, 8, 3, 2, False), ("fused", 16, 4, 3, 1, True), ("fused", 16, 8, 3, 1, True),
                    ("fused", 16, 4, 3, 1, True), ("fused", 40, 8, 5, 2, False), ("fused", 40, 4, 3, 1, True),
                    ("fused", 40, 4, 3, 1, True), ("fused", 40, 4, 3, 1, True), ("ibn", 72, 8, 3, 2, False),
                    ("ibn", 72, 8, 3, 1, True), ("fused", 72, 4, 3, 1, True), ("fused", 72, 4, 3, 1, True),
                    ("ibn", 96, 8, 5, 1, False), ("ibn", 96, 8, 5, 1, True), ("ibn", 96, 8, 3, 1, True),
                    ("ibn", 96, 8, 3, 1, True), ("ibn", 120, 8, 5, 2, False), ("ibn", 120, 8, 3, 1, True),
                    ("ibn", 120, 4, 5, 1, True), ("ibn", 120, 8, 3, 1, True), ("ibn", 384, 8, 5, 1, False))


def mobiledet_ssd_macs() -> tuple[int, int]:
    """Conv multiply-accumulates and weights of SSDLite MobileDet-EdgeTPU at 320x320 from its block
    list, feature-map layout (512, 256, 256, 128 after C5) and depthwise box predictor (3 anchors on
    the first map, 6 on the others; 4 box codes, 91 class slots)."""
    macs = weights = 0

    def conv(cin: int, cout: int, k: int, hw: int, groups: int = 1) -> None:
        nonlocal macs, weights
        macs += cout * (cin // groups) * k * k * hw * hw
        weights += cout * (cin // groups) * k * k

    conv(3, 32, 3, 160)
    conv(32, 8, 1, 160)
    conv(8, 16, 3, 160)
    conv(16, 16, 1, 160)
    c, hw, maps = 16, 160, []
    for i, (kind, cout, e, k, s, _res) in enumerate(MOBILEDET_BLOCKS):
        out = (hw + s - 1) // s
        if kind == "fused":
            conv(c, c * e, k, out)
        else:
            conv(c, c * e, 1, hw)
            conv(c * e, c * e, k, out, c * e)
        conv(c * e, cout, 1, out)
        c, hw = cout, out
        if i in (15, 20):  # C4, C5
            maps.append((c, hw))
    for d in (512, 256, 256, 128):
        out = (hw + 1) // 2
        conv(c, d // 2, 1, hw)
        conv(d // 2, d // 2, 3, out, d // 2)
        conv(d // 2, d, 1, out)
        c, hw = d, out
        maps.append((c, hw))
    for i, (ch, size) in enumerate(maps):
        for slots in (4, 91):
            conv(ch, ch, 3, size, ch)
            conv(ch, (3 if i == 0 else 6) * slots, 1, size)
    return macs, weights


def test_mobiledet_ssd_matches_its_config():
    g = load("mobiledet_ssd")
    macs, weights = mobiledet_ssd_macs()
    assert flops_of(g, "conv2d") == 2 * macs and weight_elements(g) == weights
    assert macs == pytest.approx(1.53e9, rel=0.005)  # the config's "1.53B MulAdds"
    outs = [g.tasks[g.task_index(o)].output for o in g.outputs]
    assert [o.shape for o in outs if o is not None][-2:] == [(1, 24, 1, 1), (1, 546, 1, 1)]


def test_resnet50_matches_published_macs():
    g = load("resnet50")
    assert ops(g) == Counter(conv2d=53, batchnorm=53, relu=49, add=17, maxpool=1, avgpool=1,
                             reshape=1, matmul=1)
    published = 2 * 4.09e9  # 4.09 GMACs
    dense = flops_of(g, "conv2d", "matmul")
    assert dense == 2 * resnet50_macs()
    assert dense == pytest.approx(published, rel=0.02)
    assert g.total_flops == pytest.approx(published, rel=0.02)
    # 25,557,032 parameters (torchvision) less the batch norms' gamma and beta
    bn_channels = 64 + sum(blocks * 6 * w + 4 * w for w, blocks, _, _ in RESNET_STAGES)
    assert weight_elements(g) == 25_557_032 - 2 * bn_channels
    out = g.tasks[g.task_index(g.outputs[0])].output
    assert out.shape == (1, 1000) and out.nbytes == 4000


def test_resnet50_feature_maps():
    g = load("resnet50")
    shapes = Counter(t.output.shape for t in g.tasks if t.op == "conv2d")
    assert shapes[(1, 64, 112, 112)] == 1  # conv1
    # per stage: 4w-channel maps from every block's expand conv, plus the shortcut
    for w, blocks, _, hw in RESNET_STAGES:
        assert shapes[(1, 4 * w, hw, hw)] == blocks + 1
    pool = next(t for t in g.tasks if t.op == "maxpool")
    assert pool.bytes_read == 4 * 64 * 112 * 112 and pool.bytes_written == 4 * 64 * 56 * 56


# -- BERT-base -----------------------------------------------------------------------

B, S, H, A, F, L = 8, 128, 768, 12, 3072, 12
T = B * S


def test_bert_base_totals():
    g = load("bert_base")
    assert ops(g) == Counter(embedding=3, add=2 + 6 * L, layernorm=1 + 2 * L, matmul=4 * L,
                             attention=L, gelu=L)
    gemm = 2 * T * H * 3 * H + 2 * T * H * H + 2 * (2 * T * H * F)
    attn = 4 * B * S * S * H + 5 * B * A * S * S
    adds = T * (3 * H + H + F + H) + 2 * T * H  # 4 biases, 2 residuals
    per_layer = gemm + attn + adds + 2 * 8 * T * H + 8 * T * F
    embed = 2 * T * H + 8 * T * H
    assert flops_of(g, "matmul") == L * gemm
    assert flops_of(g, "attention") == L * attn
    assert g.total_flops == embed + L * per_layer
    # bert-base-uncased has 109,482,240 parameters: less the pooler and 25 layernorms
    assert weight_elements(g) == 109_482_240 - (H * H + H) - 25 * 2 * H
    gathered = sum(t.bytes_read for t in g.tasks if t.op == "embedding")
    assert gathered == 3 * (4 * T + 4 * T * H)  # ids + rows gathered, not the tables
    assert g.tasks[g.task_index(g.outputs[0])].output.shape == (T, H)


# -- GPT-2 block ----------------------------------------------------------------------


def test_gpt2_block_totals():
    g = load("gpt2_block")
    s, d, h = 1024, 768, 12
    assert ops(g) == Counter(layernorm=2, matmul=4, add=6, attention=1, gelu=1)
    att = next(t for t in g.tasks if t.op == "attention")
    assert att.attr("causal") == 1 and att.attr("heads") == h
    expected = (2 * s * d * 3 * d + 2 * s * d * d + 2 * 2 * s * d * 4 * d  # projections, MLP
                + 4 * s * s * d + 5 * h * s * s  # attention
                + s * (3 * d + d + 4 * d + d) + 2 * s * d  # biases, residuals
                + 2 * 8 * s * d + 8 * s * 4 * d)  # layernorms, gelu
    assert g.total_flops == expected
    # GPT-2 small: 124,439,808 parameters = token + position embeddings + 12 blocks + final LN
    per_block = (124_439_808 - 50257 * d - 1024 * d - 2 * d) // 12
    assert weight_elements(g) == per_block - 2 * 2 * d  # the block's two layernorms hold 4*d
    assert g.tasks[g.task_index("qkv")].output.nbytes == 4 * s * 3 * d


# -- Jacobi 2-D ----------------------------------------------------------------------


def test_jacobi2d_totals():
    g = load("jacobi2d")
    n, k, r = 4096, 10, 10
    assert ops(g) == Counter(stencil=2 * r, sub=r, elementwise=r, reduce=r)
    sweep = 5 * (n - 2) * (n - 2)  # 5 flops per interior point (4 adds, 1 divide)
    assert flops_of(g, "stencil") == r * k * sweep
    assert g.total_flops == r * k * sweep + r * 3 * n * n  # + sub, abs, max per round
    grid = 8 * n * n
    assert sum(t.bytes_read for t in g.tasks if t.op == "stencil") == r * k * grid
    assert all(t.output.shape == () for t in g.tasks if t.op == "reduce")


# -- CG ------------------------------------------------------------------------------


def test_cg_iteration_totals():
    g = load("cg")
    n = 1024
    N = n * n
    nnz = 5 * N - 4 * n  # 5-point Laplacian: 4n boundary neighbours missing
    assert ops(g) == Counter(spmv=1, dot=2, div=2, axpy=3, elementwise=1)
    spmv = next(t for t in g.tasks if t.op == "spmv")
    assert spmv.flops == 2 * nnz == 10_477_568
    a_bytes = nnz * (8 + 4) + (N + 1) * 4
    assert spmv.bytes_read == a_bytes + 8 * N and spmv.bytes_written == 8 * N
    assert g.total_flops == 2 * nnz + 2 * (2 * N) + 3 * (2 * N) + 2 + 1


# -- FFT convolution -----------------------------------------------------------------


def test_fft_conv_totals():
    g = load("fft_conv")
    b, n = 64, 65536
    assert ops(g) == Counter(fft=2, mul=1, ifft=1)
    per = 5 * n * math.log2(n)
    assert g.total_flops == per * (b + 1) + b * n + per * b
    assert g.tasks[g.task_index("y")].output.nbytes == 8 * b * n


# -- HEFT paper ----------------------------------------------------------------------

# Topcuoglu, Hariri, Wu 2002, Fig. 2: costs on P1, P2, P3, and the edges' communication costs
HEFT_COSTS = ((14, 16, 9), (13, 19, 18), (11, 13, 19), (13, 8, 17), (12, 13, 10),
              (13, 16, 9), (7, 15, 11), (5, 11, 14), (18, 12, 20), (21, 7, 16))
HEFT_EDGES = {(1, 2): 18, (1, 3): 12, (1, 4): 9, (1, 5): 11, (1, 6): 14, (2, 8): 19, (2, 9): 16,
              (3, 7): 23, (4, 8): 27, (4, 9): 23, (5, 9): 13, (6, 8): 15, (7, 10): 17,
              (8, 10): 11, (9, 10): 13}


def test_heft_paper_graph():
    g = load("heft_paper")
    assert [t.name for t in g.tasks] == [f"n{i}" for i in range(1, 11)]
    for t, costs in zip(g.tasks, HEFT_COSTS):
        assert dict(t.explicit_cost) == dict(zip(("p1", "p2", "p3"), map(float, costs)))
    edges = {(int(g.tasks[e.src].name[1:]), int(g.tasks[e.dst].name[1:])): e.comm for e in g.edges}
    assert edges == HEFT_EDGES


def test_heft_data_reproduces_the_papers_upward_ranks():
    """The costs above give the rank_u values the paper prints (Table 1), so they are its data."""
    published = (108.000, 77.000, 80.000, 80.000, 69.000, 63.333, 42.667, 35.667, 44.333, 14.667)
    mean = [sum(c) / 3 for c in HEFT_COSTS]
    rank: dict[int, float] = {}
    for i in range(10, 0, -1):
        succ = [rank[d] + c for (s, d), c in HEFT_EDGES.items() if s == i]
        rank[i] = mean[i - 1] + max(succ, default=0)
    assert [round(rank[i], 3) for i in range(1, 11)] == list(published)


@pytest.mark.parametrize("mapper, makespan", [("heft", 80.0), ("cpop", 86.0)])
def test_heft_paper_schedules_reproduce_the_paper(mapper, makespan):
    """The paper's Fig. 3 schedules: HEFT finishes at 80, CPOP at 86."""
    from mapper.pipeline import compile_graph

    result = compile_graph(load("heft_paper"), "heft3", mapper=mapper).result
    assert result.schedule.makespan == makespan


@pytest.mark.parametrize("name", ["resnet50", "bert_base", "gpt2_block", "jacobi2d", "cg", "fft_conv"])
def test_examples_compile_end_to_end(name):
    """Each workload runs through cost, mapping and validation on a CPU+GPU+FPGA platform."""
    from mapper.pipeline import compile_graph

    g = load(name)
    compiled = compile_graph(g, "cpu-gpu-fpga", mapper="heft")
    result = compiled.result
    assert 0 < result.schedule.makespan < float("inf")
    assert len(result.schedule.slots) == len(compiled.graph.tasks)
    assert sum(len(t.parts) or 1 for t in compiled.graph.tasks) == len(g.tasks)  # fusion keeps every op
    unfused = compile_graph(g, "cpu-gpu-fpga", mapper="heft", fuse="none")
    assert len(unfused.result.schedule.slots) == len(g.tasks)
