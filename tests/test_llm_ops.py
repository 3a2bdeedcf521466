"""Decoder-LLM ops: RMSNorm, SwiGLU, rotary embeddings, grouped-query and unfused attention;
their kernels against NumPy, their tensor-parallel split, and examples/llama.tg."""

from __future__ import annotations

import numpy as np
import pytest

from mapper.cli import main
from mapper.core.graph import TensorType
from mapper.core.ops import infer
from mapper.costing.training import training_step
from mapper.frontend.load import graph_from_text, load_graph
from mapper.frontend.sources import ModelFile
from mapper.kernels.registry import reference, run_kernel
from mapper.parallel.roles import tensor_regions

RNG = np.random.default_rng(7)
TINY = ["--param", "LAYERS=2", "--param", "HIDDEN=64", "--param", "HEADS=8", "--param", "KV_HEADS=2",
        "--param", "FFN=96", "--param", "SEQ=16", "--param", "VOCAB=128", "--param", "BATCH=4"]


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op, xs, attrs", [
    ("rmsnorm", [_x(33, 40)], {}),
    ("swiglu", [_x(5, 7, 24)], {}),
    ("rotary", [_x(48, (8 + 4) * 16)], {"heads": 8, "kv_heads": 2, "seq": 16, "base": 500000.0}),
    ("rotary", [_x(32, 3 * 4 * 8)], {"heads": 4, "seq": 8}),
    ("attention", [_x(64, (8 + 4) * 16)], {"heads": 8, "kv_heads": 2, "seq": 32, "causal": 1}),
    ("attention", [_x(64, 128), _x(64, 32), _x(64, 32)], {"heads": 8, "kv_heads": 2, "seq": 16}),
    ("attention", [_x(64, 3 * 64)], {"heads": 4, "seq": 16, "fused": 0}),
])
def test_kernels_match_numpy(op, xs, attrs):
    np.testing.assert_allclose(run_kernel(op, xs, attrs), reference(op, xs, attrs), rtol=2e-5, atol=2e-5)


def test_grouped_query_attention_is_attention_with_shared_heads():
    heads, kv, dh, seq = 8, 2, 16, 16
    q, k, v = _x(32, heads * dh), _x(32, kv * dh), _x(32, kv * dh)
    gqa = reference("attention", [q, k, v], {"heads": heads, "kv_heads": kv, "seq": seq})
    rep = [np.repeat(m.reshape(32, kv, dh), heads // kv, axis=1).reshape(32, heads * dh) for m in (k, v)]
    mha = reference("attention", [q, *rep], {"heads": heads, "seq": seq})
    np.testing.assert_allclose(gqa, mha, rtol=1e-6)
    # the fused, grouped layout holds the same heads
    groups = np.concatenate([np.concatenate([q.reshape(32, kv, heads // kv * dh)[:, g], k.reshape(32, kv, dh)[:, g],
                                             v.reshape(32, kv, dh)[:, g]], axis=1) for g in range(kv)], axis=1)
    fused = reference("attention", [groups], {"heads": heads, "kv_heads": kv, "seq": seq})
    np.testing.assert_allclose(fused, gqa, rtol=1e-5, atol=1e-6)


def test_rotary_depends_on_relative_position_only():
    heads, dh, seq = 1, 8, 16
    q, k = _x(1, dh), _x(1, dh)
    x = np.zeros((seq, 3 * dh), dtype=np.float64)
    x[:, :dh], x[:, dh:2 * dh], x[:, 2 * dh:] = q, k, 1.0
    out = run_kernel("rotary", [x], {"heads": heads, "seq": seq})
    np.testing.assert_array_equal(out[:, 2 * dh:], x[:, 2 * dh:])  # v passes
    np.testing.assert_allclose(out[0], x[0])  # position 0 turns by 0
    dots = {(m, n): out[m, :dh] @ out[n, dh:2 * dh] for m in range(seq) for n in range(seq)}
    for (m, n), d in dots.items():
        if m >= 3 and n >= 3:
            assert d == pytest.approx(dots[(m - 3, n - 3)], rel=1e-9, abs=1e-12)
    norms = np.linalg.norm(out[:, :dh], axis=1)
    np.testing.assert_allclose(norms, np.linalg.norm(x[0, :dh]), rtol=1e-12)  # a rotation keeps lengths


def test_unfused_attention_moves_its_scores_through_memory_both_ways():
    text = "graph a {\n  input x : f16[256, 192]\n  y = attention(x, heads = 2, seq = 128, fused = F)\n  output y\n}"
    g, fused = graph_from_text(text.replace("F)", "0)")), graph_from_text(text.replace("F)", "1)"))
    scores = 2 * 2 * 128 * 128 * 2  # sequences x heads x S^2 x bytes
    t, f = g.tasks[0], fused.tasks[0]
    assert t.bytes_read - f.bytes_read == 3 * scores and t.bytes_written - f.bytes_written == 3.5 * scores
    tg, fg = training_step(g), training_step(fused)
    grad = next(x for x in tg.tasks if x.name == "y.grad")
    fgrad = next(x for x in fg.tasks if x.name == "y.grad")
    assert grad.bytes_read - fgrad.bytes_read == 6 * scores and grad.bytes_written - fgrad.bytes_written == 7 * scores


def test_llama_regions_split_whole_query_groups_and_gate_up_pairs():
    g = load_graph(ModelFile("examples/llama.tg", params=(("LAYERS", 1), ("BATCH", 2), ("SEQ", 256))))
    regions = tensor_regions(g, 8, vocab=True)
    names = [[g.tasks[m].name for m in r.members] for r in regions]
    assert ["h1.qkv", "h1.qkv_r", "h1.att"] in names and ["h1.mlp.matmul", "h1.mlp.swiglu"] in names
    att = next(r for r in regions if "h1.att" in [g.tasks[m].name for m in r.members])
    mlp = next(r for r in regions if "h1.mlp.swiglu" in [g.tasks[m].name for m in r.members])
    assert att.groups == (1, 1, 1) and mlp.groups == (2, 1)
    assert tensor_regions(g, 16) and not any(  # 8 key/value heads do not split 16 ways
        "h1.att" in [g.tasks[m].name for m in r.members] for r in tensor_regions(g, 16))


def test_tensor_split_llama_runs_and_matches_the_unsplit_graph(capsys):
    assert main(["run", "examples/llama.tg", *TINY, "--platform", "dgx-a100", "--parallel", "tensor"]) == 0
    out = capsys.readouterr().out
    assert "tensor 2" in out or "tensor 4" in out or "tensor 8" in out
    assert "equal the unsplit graph's" in out


def test_llama_plans_on_a_cluster(tmp_path):
    out = tmp_path / "o.json"
    assert main(["compile", "examples/llama.tg", "--param", "LAYERS=4", "--param", "BATCH=64", "--platform",
                 "selene", "--nodes", "2", "--train", "--optimizer", "adam", "--parallel",
                 "tensor=8,pipeline=2,micro_batch=1", "-q", "--json", str(out)]) == 0
    import json

    par = json.loads(out.read_text())["parallel"]
    assert par["plan"]["tensor"] == 8 and par["plan"]["pipeline"] == 2 and par["fits"]


def test_gqa_types():
    info = infer("attention", [TensorType("f16", (512, 6144))], {"heads": 32, "kv_heads": 8, "seq": 512})
    assert info.output == TensorType("f16", (512, 4096))
