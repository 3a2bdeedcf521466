"""Mixture-of-experts and multi-head latent attention: the ops' kernels against NumPy, the
routing, examples/moe.tg and examples/deepseek_v3.tg against a brute-force forward pass that
counts its FLOPs with explicit loops over tokens, experts, heads and query-key pairs, their
parameter counts against the published ones, and the commands end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mapper.cli import main
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.kernels import registry as kernels
from mapper.kernels.moe import route
from mapper.kernels.registry import reference, run_kernel
from mapper.parallel.check import unsplit_outputs
from mapper.parallel.roles import region_starts, tensor_regions
from mapper.run.synthetic import make_value, positive_operands, vocab_sizes, weight_scales

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(11)
MOE_TINY = {"LAYERS": 3, "DENSE_LAYERS": 1, "SHARED_EXPERTS": 1, "HIDDEN": 32, "HEADS": 4, "KV_HEADS": 2,
            "HEAD_DIM": 8, "EXPERTS": 4, "TOPK": 2, "EXPERT_FFN": 12, "FFN": 20, "VOCAB": 50, "SEQ": 8, "BATCH": 2}
DS_TINY = {"LAYERS": 3, "DENSE_LAYERS": 1, "SHARED_EXPERTS": 1, "HIDDEN": 32, "HEADS": 4, "Q_LORA": 24,
           "KV_LORA": 16, "QK_NOPE": 6, "QK_ROPE": 4, "V_DIM": 10, "EXPERTS": 4, "TOPK": 2, "EXPERT_FFN": 12,
           "FFN": 20, "VOCAB": 50, "SEQ": 8, "BATCH": 2}


def _x(*shape, positive=False):
    x = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(x) if positive else x


def _gates(t, e, k):
    return reference("topk", [reference("softmax", [_x(t, e)], {"axis": -1})], {"k": k, "norm": 1, "scale": 1.0})


G = _gates(24, 6, 2)


@pytest.mark.parametrize("op, xs, attrs", [
    ("topk", [_x(24, 6)], {"k": 3, "norm": 0, "scale": 1.0}),
    ("topk", [_x(5, 7, 9, positive=True)], {"k": 2, "norm": 1, "scale": 2.5}),
    ("moe_dispatch", [_x(24, 10), G], {"topk": 2}),
    ("grouped_matmul", [_x(48, 10), G, _x(6, 10, 7)], {}),
    ("moe_combine", [_x(48, 10), G], {}),
    ("mla_attention", [_x(32, 4 * 12), _x(32, 4 * 14), _x(32, 4)], {"heads": 4, "seq": 16, "causal": 1}),
    ("mla_attention", [_x(32, 2 * 6), _x(32, 2 * 12), _x(32, 2)], {"heads": 2, "seq": 8}),  # dv > dn + dr
])
def test_kernels_match_numpy(op, xs, attrs):
    np.testing.assert_allclose(run_kernel(op, xs, attrs), reference(op, xs, attrs), rtol=2e-5, atol=2e-5)


def test_routing_is_dropless_and_grouped_by_expert():
    gates = _gates(40, 8, 3)
    chosen, slot, offsets = route(gates, 3)
    assert offsets[-1] == 40 * 3 and sorted(slot.reshape(-1).tolist()) == list(range(120))
    for t in range(40):
        assert len(set(chosen[t])) == 3 and set(chosen[t]) == set(np.flatnonzero(gates[t]))
        for j in range(3):
            e = chosen[t, j]
            assert offsets[e] <= slot[t, j] < offsets[e + 1]
    # ties go to the lower expert; rows of one expert follow the tokens
    tie = np.ones((2, 4), dtype=np.float32)
    chosen, slot, _ = route(tie, 2)
    assert chosen.tolist() == [[0, 1], [0, 1]] and slot.tolist() == [[0, 2], [1, 3]]


def test_gates_must_be_non_negative():
    from mapper.errors import InputError

    with pytest.raises(InputError, match="gates must be non-negative"):
        run_kernel("moe_combine", [_x(48, 10), -G], {})


# -- a brute-force forward pass that counts its FLOPs -------------------------------------------


class Counter:
    """FLOPs by explicit loops: a multiply-add counts 2 (docs/ops.md's conventions), norms and
    activations their per-element counts."""

    def __init__(self) -> None:
        self.flops = 0

    def mm(self, a, b):
        """``a @ b`` as dot products, each ``K`` multiplies and ``K`` adds."""
        m, k = a.shape
        n = b.shape[1]
        out = np.empty((m, n))
        for i in range(m):
            for j in range(n):
                out[i, j] = float(np.dot(a[i], b[:, j]))
                self.flops += 2 * k
        return out

    def rmsnorm(self, x):
        self.flops += 4 * x.size
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5)

    def swiglu(self, x):
        f = x.shape[-1] // 2
        self.flops += 6 * x.shape[0] * f
        g = x[:, :f]
        return g / (1 + np.exp(-g)) * x[:, f:]

    def add(self, a, b):
        self.flops += a.size
        return a + b

    def softmax_rows(self, x):
        self.flops += 5 * x.size
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def rope(self, m, pos, base):
        """One head's rotary columns ``m[dr]`` turned by ``pos``: 3 FLOPs per element."""
        half = len(m) // 2
        self.flops += 3 * len(m)
        th = pos * base ** (-2.0 * np.arange(half) / len(m))
        a, b = m[:half], m[half:]
        return np.concatenate([a * np.cos(th) - b * np.sin(th), b * np.cos(th) + a * np.sin(th)])

    def attend(self, qs, ks, vs, seq):
        """Causal attention of per-token, per-head ``q[T][h]``, ``k[T][h]``, ``v[T][h]``: each
        query-key pair's dot product, its softmax (5) and its share of the value sum."""
        t, heads = len(qs), len(qs[0])
        out = [[None] * heads for _ in range(t)]
        for b0 in range(0, t, seq):
            for h in range(heads):
                for i in range(b0, b0 + seq):
                    scores = np.full(seq, -np.inf)
                    for j in range(b0, b0 + seq):
                        self.flops += 2 * len(qs[i][h]) + 5 + 2 * len(vs[j][h])  # counted for every pair
                        if j <= i:
                            scores[j - b0] = np.dot(qs[i][h], ks[j][h]) / math.sqrt(len(qs[i][h]))
                    p = np.exp(scores - scores.max())
                    p /= p.sum()
                    out[i][h] = sum(p[j - b0] * vs[j][h] for j in range(b0, b0 + seq))
        return np.array([np.concatenate(row) for row in out])


def _weights(graph, seed=0):
    vocab, pos, scale = vocab_sizes(graph), positive_operands(graph), weight_scales(graph)
    values = {}
    for t in graph.tasks:
        for o in t.operands:
            if o.kind in ("weight", "input"):
                values[o.name] = make_value(o, seed, kernels, vocab, pos, scale).astype(np.float64)
    return values


def _gqa(c, w, x, p, name):
    """The Llama attention sub-layer of examples/moe.tg, head by head."""
    h, kv, dh, seq = p["HEADS"], p["KV_HEADS"], p["HEAD_DIM"], p["SEQ"]
    qkv = c.mm(c.rmsnorm(x), w[f"{name}.qkv.w0"])
    g = h // kv
    qs, ks, vs = [], [], []
    for t, row in enumerate(qkv):
        heads = row.reshape(kv, g + 2, dh)
        pos = t % seq
        qs.append([c.rope(heads[j // g, j % g], pos, 1000000.0) for j in range(h)])
        k = [c.rope(heads[j, g], pos, 1000000.0) for j in range(kv)]
        ks.append([k[j // g] for j in range(h)])
        vs.append([heads[j // g, g + 1] for j in range(h)])
    return c.add(x, c.mm(c.attend(qs, ks, vs, seq), w[f"{name}.out.matmul.w0"]))


def _mla(c, w, x, p, name):
    """DeepSeek-V3's attention sub-layer, head by head."""
    h, dn, dr, dv, seq = p["HEADS"], p["QK_NOPE"], p["QK_ROPE"], p["V_DIM"], p["SEQ"]
    hn = c.rmsnorm(x)
    q = c.mm(c.rmsnorm(c.mm(hn, w[f"{name}.q.matmul.w0"])), w[f"{name}.q.w0"])
    kv = c.mm(c.rmsnorm(c.mm(hn, w[f"{name}.kv.matmul.w0"])), w[f"{name}.kv.w0"])
    kr = c.mm(hn, w[f"{name}.kr.w0"])
    qs, ks, vs = [], [], []
    for t in range(len(x)):
        pos = t % seq
        qh, kvh = q[t].reshape(h, dn + dr), kv[t].reshape(h, dn + dv)
        shared = c.rope(kr[t], pos, 10000.0)
        qs.append([np.concatenate([qh[j, :dn], c.rope(qh[j, dn:], pos, 10000.0)]) for j in range(h)])
        ks.append([np.concatenate([kvh[j, :dn], shared]) for j in range(h)])
        vs.append([kvh[j, dn:] for j in range(h)])
    return c.add(x, c.mm(c.attend(qs, ks, vs, seq), w[f"{name}.out.matmul.w0"]))


def _mlp(c, x, w1, w2):
    return c.mm(c.swiglu(c.mm(x, w1)), w2)


def _routed(c, w, r1, p, name, deepseek):
    """The routed MLP: router, each token's top-k experts run one by one, shared experts."""
    e_, k_ = p["EXPERTS"], p["TOPK"]
    hn = c.rmsnorm(r1)
    logits = c.mm(hn, w[f"{name}.router.matmul.w0"])
    if deepseek:
        c.flops += 4 * logits.size  # sigmoid
        scores = 1 / (1 + np.exp(-logits))
    else:
        scores = c.softmax_rows(logits)
    out = np.zeros_like(hn)
    for t in range(len(hn)):
        c.flops += k_ * e_ + 2 * k_  # k max-scans, then normalise (and scale)
        chosen = np.argsort(-scores[t], kind="stable")[:k_]
        weights = scores[t, chosen] / scores[t, chosen].sum() * (2.5 if deepseek else 1.0)
        for e, g in zip(chosen, weights):  # only the chosen experts run: dropless, no capacity
            y = _mlp(c, hn[t:t + 1], w[f"{name}.up.w0"][e], w[f"{name}.ys.w0"][e])[0]
            c.flops += 2 * len(y)
            out[t] += g * y
    shared = _mlp(c, hn, w[f"{name}.m1.matmul.2.w0"], w[f"{name}.m1.matmul.w0"])
    return c.add(r1, c.add(out, shared))


def _forward(w, p, deepseek):
    c = Counter()
    x = w["h0.w0"][w["tokens"].astype(int)]
    attention = _mla if deepseek else _gqa
    for layer in range(1, p["LAYERS"] + 1):
        r1 = attention(c, w, x, p, f"h{layer}.r1")
        if layer <= p["DENSE_LAYERS"]:
            x = c.add(r1, _mlp(c, c.rmsnorm(r1), w[f"h{layer}.mlp.matmul.w0"], w[f"h{layer}.mlp.w0"]))
        else:
            x = _routed(c, w, r1, p, f"h{layer}", deepseek)
    return c.mm(c.rmsnorm(x), w["logits.w0"]), c.flops


def _f32(tmp_path, name):
    path = tmp_path / name
    path.write_text((ROOT / "examples" / name).read_text().replace("f16[", "f32["))
    return path


@pytest.mark.parametrize("name, params", [("moe.tg", MOE_TINY), ("deepseek_v3.tg", DS_TINY)])
def test_example_flops_and_outputs_match_a_brute_force_forward_pass(tmp_path, name, params):
    graph = load_graph(ModelFile(str(_f32(tmp_path, name)), params=tuple(params.items())))
    want, flops = _forward(_weights(graph), params, name.startswith("deepseek"))
    assert sum(t.flops for t in graph.tasks) == flops
    got = unsplit_outputs(graph, 0, kernels)["logits"]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


# -- parameter counts ------------------------------------------------------------------------


def _params(path, **params):
    """Total and per-token activated parameters: the weights, the routed experts' times top-k / E."""
    g = load_graph(ModelFile(str(ROOT / "examples" / path), params=tuple({"BATCH": 1, **params}.items())))
    total = active = 0.0
    for t in g.tasks:
        for o in t.operands:
            if o.kind == "weight":
                total += o.type.numel
                share = t.operands[0].type.shape[0] / t.operands[1].type.shape[0] / o.type.shape[0] \
                    if t.op == "grouped_matmul" else 1.0
                active += o.type.numel * share
    return total, active


def test_deepseek_v3_defaults_have_671b_parameters_37b_active():
    total, active = _params("deepseek_v3.tg")
    assert total == pytest.approx(671e9, rel=0.01)
    # "37B activated" is rounded to two digits (DeepSeek-V3 report, abstract): the count from the
    # released config is 37.55B with both embeddings, 36.6B without the input lookup
    assert active == pytest.approx(37e9, rel=0.02)


def test_moe_defaults_are_qwen3_30b_a3b():
    total, active = _params("moe.tg")
    assert total == pytest.approx(30.5e9, rel=0.01)
    assert active == pytest.approx(3.3e9, rel=0.02)  # "3.3B" rounded: 3.35B from the released config


@pytest.mark.parametrize("params, total, active", [
    # Qwen3-235B-A22B (Qwen3 Technical Report, Table 2): 235B, 22B activated
    ({"LAYERS": 94, "HIDDEN": 4096, "HEADS": 64, "EXPERT_FFN": 1536}, 235e9, 22e9),
    # Mixtral 8x7B (Jiang et al., arXiv 2401.04088): 46.7B, 12.9B active (the model card's figures)
    ({"LAYERS": 32, "HIDDEN": 4096, "KV_HEADS": 8, "EXPERTS": 8, "TOPK": 2, "EXPERT_FFN": 14336, "VOCAB": 32000},
     46.7e9, 12.9e9),
])
def test_moe_describes_other_released_mixtures(params, total, active):
    counted, activated = _params("moe.tg", **params)
    assert counted == pytest.approx(total, rel=0.01) and activated == pytest.approx(active, rel=0.01)


@pytest.mark.parametrize("params, billions", [
    ({}, 8.0),
    ({"LAYERS": 80, "HIDDEN": 8192, "HEADS": 64, "FFN": 28672}, 70.0),
    ({"LAYERS": 126, "HIDDEN": 16384, "HEADS": 128, "FFN": 53248}, 405.0),
])
def test_llama_describes_llama_3_1(params, billions):
    total, _ = _params("llama.tg", **params)  # vocabulary 128,256 and 8 key/value heads: the defaults
    assert total == pytest.approx(billions * 1e9, rel=0.01)


# -- the commands ---------------------------------------------------------------------------

MOE_ARGS = [a for k, v in MOE_TINY.items() for a in ("--param", f"{k}={v}")]


@pytest.mark.slow
@pytest.mark.parametrize("example", ["moe.tg", "deepseek_v3.tg"])
def test_defaults_check_cost_and_compile_on_one_node(example, tmp_path):
    path = str(ROOT / "examples" / example)
    assert main(["check", path]) == 0
    assert main(["cost", path, "--platform", "dgx-h100", "--json"]) == 0
    assert main(["compile", path, "--platform", "dgx-h100", "-q", "--json", str(tmp_path / "f.json")]) == 0
    assert main(["compile", path, "--platform", "dgx-h100", "--param", "LAYERS=5", "--param", "BATCH=8", "--train",
                 "--optimizer", "adam", "-q", "--json", str(tmp_path / "t.json")]) == 0


@pytest.mark.slow
def test_deepseek_v3_training_on_one_node_exits_3_naming_the_memory(capsys):
    # 671B parameters at 16 bytes each (weights, gradients, Adam's f32 states and master copy):
    # 10.7 TB against a DGX H100's 2.6 TB
    assert main(["compile", "examples/deepseek_v3.tg", "--platform", "dgx-h100", "--train", "--optimizer", "adam",
                 "-q"]) == 3
    err = capsys.readouterr().err
    assert "fits the devices' memory" in err and "Traceback" not in err


@pytest.mark.slow
def test_tiny_moe_runs_checked_and_splits_by_tensor_and_data(tmp_path, capsys):
    assert main(["run", "examples/moe.tg", *MOE_ARGS, "--platform", "dgx-a100"]) == 0
    assert "checked" in capsys.readouterr().out
    f32 = str(_f32(tmp_path, "moe.tg"))
    for layout in ("tensor", "data"):
        assert main(["run", f32, *MOE_ARGS, "--platform", "dgx-a100", "--parallel", layout]) == 0
        assert "equal the unsplit graph's" in capsys.readouterr().out


def test_expert_gemms_and_mla_heads_are_megatron_regions(capsys):
    g = load_graph(ModelFile("examples/moe.tg", params=tuple(MOE_TINY.items())))
    names = [[g.tasks[m].name for m in r.members] + [g.tasks[r.row].name] for r in tensor_regions(g, 2)
             if r.row is not None]
    assert ["h2.up", "h2.ys.swiglu", "h2.ys"] in names
    ds = load_graph(ModelFile("examples/deepseek_v3.tg", params=tuple(DS_TINY.items())))
    regions = {tuple(ds.tasks[m].name for m in r.members): r for r in tensor_regions(ds, 4)}
    mla = regions[("h1.r1.q", "h1.r1.kv", "h1.r1.att")]  # both up-projections by columns, heads, then rows
    assert ds.tasks[mla.row].name == "h1.r1.out.matmul" and mla.groups == (1, 1, 1)
    assert {ds.tasks[m].name for m in region_starts(ds, mla.members)} == {"h1.r1.q", "h1.r1.kv"}


def test_tiny_deepseek_splits_by_heads_or_says_why_not(tmp_path, capsys):
    ds = [a for k, v in DS_TINY.items() for a in ("--param", f"{k}={v}")]
    assert main(["run", str(_f32(tmp_path, "deepseek_v3.tg")), *ds, "--platform", "dgx-a100",
                 "--parallel", "tensor"]) == 0
    assert "equal the unsplit graph's" in capsys.readouterr().out
    three = [a for k, v in {**DS_TINY, "HEADS": 3}.items() for a in ("--param", f"{k}={v}")]  # each once
    assert main(["run", "examples/deepseek_v3.tg", *three, "--platform", "dgx-a100",
                 "--parallel", "tensor"]) == 2
    err = capsys.readouterr().err
    assert "mla_attention" in err and "heads divide by the ranks" in err and "Traceback" not in err


@pytest.mark.parametrize("name, params", [("moe.tg", MOE_TINY), ("deepseek_v3.tg", DS_TINY)])
def test_fp8_runs_the_expert_gemms_and_keeps_the_router_in_16_bits(name, params):
    from mapper.costing.precision import with_precision

    g = with_precision(load_graph(ModelFile(str(ROOT / "examples" / name), params=tuple(params.items()))), "fp8")
    by_name = {t.name: t for t in g.tasks}
    assert by_name["h2.up"].precision == "fp8" and by_name["h2.ys"].precision == "fp8"
    assert not by_name["h2.router.matmul"].precision and not by_name["logits"].precision
