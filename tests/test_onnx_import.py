"""ONNX import: every light model of the onnx wheel, and a BERT-like encoder built here.

FLOPs are checked against a count made here from the ONNX graph itself (the
multiply-accumulates of every Conv, Gemm and MatMul from its shapes, and the
elementwise work per op type), and against published MAC counts.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from mapper.cli import main  # noqa: E402
from mapper.costing.cost import build_cost_table  # noqa: E402
from mapper.dump import dump_graph  # noqa: E402
from mapper.engine.validate import validate  # noqa: E402
from mapper.errors import InputError  # noqa: E402
from mapper.frontend.importers.dsl_writer import dsl_name  # noqa: E402
from mapper.frontend.importers.onnx_dsl import import_onnx  # noqa: E402
from mapper.frontend.importers.onnx_model import read_onnx  # noqa: E402
from mapper.frontend.load import graph_from_text, load_graph  # noqa: E402
from mapper.mapping import get_mapper  # noqa: E402
from mapper.platform.loader import list_platforms, load_platform  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx"))
#: tasks each model imports as (one per compute node, a bias add per biased Conv/Gemm, a view per
#: reshape; dropouts are aliases)
TASKS = {"bvlc_alexnet": 30, "densenet121": 669, "inception_v1": 200, "inception_v2": 372, "resnet50": 177,
         "shufflenet": 205, "squeezenet": 91, "vgg19": 63, "zfnet512": 30}
#: published multiply-accumulates (G) and the tolerance: torchvision's model cards (ResNet-50 4.09, VGG-19 19.63,
#: DenseNet-121 2.83, SqueezeNet 1.1 0.35) and GoogLeNet's "1.5 billion multiply-adds" (Szegedy et al.,
#: CVPR 2015), given to two digits
PUBLISHED_GMACS = {"resnet50": (4.09, 0.01), "vgg19": (19.63, 0.01), "densenet121": (2.83, 0.01),
                   "squeezenet": (0.35, 0.02), "inception_v1": (1.5, 0.05)}


def _path(model: str) -> str:
    return str(LIGHT / f"light_{model}.onnx")


@pytest.fixture(scope="module")
def imported():
    return {m: import_onnx(_path(m)) for m in MODELS}


def independent_flops(path: str) -> tuple[float, float]:
    """(multiply-accumulates of Conv, Gemm and MatMul; total FLOPs as the DSL counts them),
    counted from the ONNX graph's own shapes."""
    g = read_onnx(path)
    t = g.tensors
    macs = flops = 0.0
    for n in g.nodes:
        if n.folded or not n.outputs:
            continue
        out = t[n.outputs[0]].shape
        numel = math.prod(out)
        if n.op == "Conv":
            k, cg, r, s = t[n.inputs[1]].shape
            mac = numel * cg * r * s
            macs += mac
            flops += 2 * mac + (numel if len(n.inputs) > 2 else 0)
        elif n.op in ("Gemm", "MatMul"):
            a = t[n.inputs[0]].shape
            kk = a[0] if n.op == "Gemm" and n.attrs.get("transA", 0) else a[-1]
            macs += numel * kk
            flops += 2 * numel * kk + (numel if n.op == "Gemm" and len(n.inputs) > 2 else 0)
        elif n.op in ("MaxPool", "AveragePool"):
            kh, kw = n.attrs["kernel_shape"]
            flops += kh * kw * numel
        elif n.op in ("GlobalAveragePool", "GlobalMaxPool"):
            flops += math.prod(t[n.inputs[0]].shape[2:]) * numel
        elif n.op == "BatchNormalization":
            flops += 2 * numel
        elif n.op == "Softmax":
            flops += 5 * numel
        elif n.op == "Sum":
            flops += (len(n.inputs) - 1) * numel
        elif n.op in ("Relu", "Add", "Mul", "Sub", "Div", "LRN"):
            flops += numel
    return macs, flops


@pytest.mark.parametrize("model", MODELS)
def test_light_model_tasks_shapes_and_flops(model, imported):
    imp = imported[model]
    graph = graph_from_text(imp.text, f"{model}.tg")
    assert len(graph.tasks) == imp.tasks == TASKS[model]
    onnx_graph = read_onnx(_path(model))
    by_name = {t.name: t for t in graph.tasks}
    checked = 0
    for n in onnx_graph.nodes:  # every node's task has the shape ONNX infers for its output
        task = by_name.get(dsl_name(n.name))
        if task is not None and not n.folded and n.outputs:
            assert task.output is not None and task.output.shape == onnx_graph.tensors[n.outputs[0]].shape, n.name
            checked += 1
    assert checked >= 0.6 * len(graph.tasks)
    macs, flops = independent_flops(_path(model))
    assert graph.total_flops == pytest.approx(flops, rel=1e-9)
    if model in PUBLISHED_GMACS:
        gmacs, rel = PUBLISHED_GMACS[model]
        assert macs / 1e9 == pytest.approx(gmacs, rel=rel)


def test_constants_fold_and_unsupported_ops_are_listed(imported):
    resnet = imported["resnet50"]
    assert resnet.folded == 239 and not resnet.unsupported and "opaque" not in resnet.text
    zfnet = imported["zfnet512"]
    assert zfnet.unsupported == {"LRN": 2}
    assert "opaque tasks" in (zfnet.warning() or "") and "LRN x2" in (zfnet.warning() or "")
    assert 'kind = "LRN"' in zfnet.text


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_light_models_map_on_every_platform_with_every_heuristic(model, imported):
    graph = graph_from_text(imported[model].text, f"{model}.tg")
    for name, _ in list_platforms():
        plat = load_platform(name)
        if not any(d.has_rates for d in plat.devices):
            with pytest.raises(InputError, match="cannot price"):
                build_cost_table(graph, plat).require_feasible()
            continue
        cost = build_cost_table(graph, plat)
        has_cpu = any(d.kind == "cpu" for d in plat.devices)  # l4-node has its GPUs only
        for mapper in ("heft", "cpop", "peft", "greedy", "single", *(("cpu",) if has_cpu else ())):
            result = get_mapper(mapper).map(cost)
            assert validate(result.schedule) == [], (model, name, mapper)


@pytest.mark.slow
def test_every_light_model_compiles_from_the_onnx_file(tmp_path, capsys):
    for model in MODELS:
        assert main(["compile", _path(model), "--platform", "cpu-gpu-fpga", "--mapper", "heft", "-q",
                     "--json", str(tmp_path / f"{model}.json")]) == 0, capsys.readouterr().err


@pytest.mark.slow
def test_import_then_check_is_checking_the_onnx_file(tmp_path, capsys):
    out = tmp_path / "r50.tg"
    assert main(["import", "onnx", _path("resnet50"), "-o", str(out)]) == 0
    assert "177 tasks from 415 ONNX nodes" in capsys.readouterr().out
    assert dump_graph(load_graph(out)) == dump_graph(load_graph(_path("resnet50")))


@pytest.mark.slow
def test_run_executes_the_imported_resnet50(capsys):
    assert main(["run", _path("resnet50"), "--platform", "cpu-gpu-fpga", "--mapper", "heft", "--repeats", "1",
                 "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "graph resnet50 on cpu-gpu-fpga" in out and "checked" in out


def test_run_refuses_models_with_opaque_ops(capsys):
    assert main(["run", _path("zfnet512"), "--platform", "cpu-gpu-fpga", "--mapper", "heft"]) == 2
    assert "ops without a kernel" in capsys.readouterr().err


# -- a BERT-like encoder, as PyTorch exports one ---------------------------------------------
B, S, D, H, FF = 2, 8, 16, 2, 32


def _const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, np.float32), name))


def encoder_model(layers: int = 2, batch: str | int = B) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def weight(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        return name

    def shape(name: str, *dims: int) -> str:
        inits.append(numpy_helper.from_array(np.asarray(dims, np.int64), name))
        return name

    def node(op: str, ins: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def layernorm(x: str, p: str) -> str:
        mean = node("ReduceMean", [x], f"{p}_mean", axes=[-1])
        diff = node("Sub", [x, mean], f"{p}_sub")
        nodes.append(_const(f"{p}_two", 2.0))
        sq = node("Pow", [diff, f"{p}_two"], f"{p}_pow")
        var = node("ReduceMean", [sq], f"{p}_var", axes=[-1])
        nodes.append(_const(f"{p}_eps", 1e-12))
        std = node("Sqrt", [node("Add", [var, f"{p}_eps"], f"{p}_add_eps")], f"{p}_sqrt")
        norm = node("Div", [diff, std], f"{p}_div")
        scaled = node("Mul", [norm, weight(f"{p}_gamma", D)], f"{p}_gamma_mul")
        return node("Add", [scaled, weight(f"{p}_beta", D)], f"{p}_out")

    def heads(x: str, p: str, perm: list[int]) -> str:
        r = node("Reshape", [x, shape(f"{p}_shape", B, S, H, D // H)], f"{p}_split_heads")
        return node("Transpose", [r], f"{p}_t", perm=perm)

    h = "x"
    for i in range(layers):
        p = f"layer{i}"
        q, k, v = (node("Add", [node("MatMul", [h, weight(f"{p}_{n}_w", D, D)], f"{p}_{n}_mm"),
                                weight(f"{p}_{n}_b", D)], f"{p}_{n}") for n in "qkv")
        scores = node("MatMul", [heads(q, f"{p}_q", [0, 2, 1, 3]), heads(k, f"{p}_k", [0, 2, 3, 1])], f"{p}_scores")
        nodes.append(_const(f"{p}_scale", math.sqrt(D // H)))
        scaled = node("Div", [scores, f"{p}_scale"], f"{p}_scaled")
        probs = node("Softmax", [scaled], f"{p}_probs", axis=-1)
        ctx = node("MatMul", [probs, heads(v, f"{p}_v", [0, 2, 1, 3])], f"{p}_ctx")
        merged = node("Reshape", [node("Transpose", [ctx], f"{p}_ctx_t", perm=[0, 2, 1, 3]),
                                  shape(f"{p}_merge_shape", B, S, D)], f"{p}_merged")
        proj = node("Add", [node("MatMul", [merged, weight(f"{p}_o_w", D, D)], f"{p}_o_mm"),
                            weight(f"{p}_o_b", D)], f"{p}_o")
        h1 = layernorm(node("Add", [h, proj], f"{p}_res1"), f"{p}_ln1")
        up = node("Add", [node("MatMul", [h1, weight(f"{p}_up_w", D, FF)], f"{p}_up_mm"),
                          weight(f"{p}_up_b", FF)], f"{p}_up")
        nodes.append(_const(f"{p}_sqrt2", math.sqrt(2.0)))
        nodes.append(_const(f"{p}_one", 1.0))
        nodes.append(_const(f"{p}_half", 0.5))
        erf = node("Erf", [node("Div", [up, f"{p}_sqrt2"], f"{p}_gelu_div")], f"{p}_gelu_erf")
        plus = node("Add", [erf, f"{p}_one"], f"{p}_gelu_add")
        gelu = node("Mul", [node("Mul", [up, plus], f"{p}_gelu_mul"), f"{p}_half"], f"{p}_gelu")
        down = node("Add", [node("MatMul", [gelu, weight(f"{p}_down_w", FF, D)], f"{p}_down_mm"),
                            weight(f"{p}_down_b", D)], f"{p}_down")
        h = layernorm(node("Add", [h1, down], f"{p}_res2"), f"{p}_ln2")
    graph = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, S, D])],
                              [helper.make_tensor_value_info(h, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_encoder_patterns_become_attention_layernorm_and_gelu(tmp_path):
    path = tmp_path / "encoder.onnx"
    onnx.save(encoder_model(), path)
    imp = import_onnx(str(path))
    assert imp.fused == {"attention": 2, "layernorm": 4, "gelu": 2} and not imp.unsupported
    graph = graph_from_text(imp.text, "encoder.tg")
    ops = [t.op for t in graph.tasks]
    assert ops.count("attention") == 2 and ops.count("layernorm") == 4 and ops.count("gelu") == 2
    assert "softmax" not in ops and "transpose" not in ops
    att = next(t for t in graph.tasks if t.op == "attention")
    assert dict(att.attrs)["heads"] == H and dict(att.attrs)["seq"] == S and att.output.shape == (B * S, D)
    assert graph.tasks[-1].output.shape == (B, S, D)
    # the attention task's work is the fused subgraph's: 4*B*S*S*D + 5*B*heads*S*S
    assert att.flops == 4 * B * S * S * D + 5 * B * H * S * S
    cost = build_cost_table(graph, load_platform("cpu-gpu-fpga"))
    assert validate(get_mapper("heft").map(cost).schedule) == []


def test_dynamic_dimensions_are_set_with_dim_or_named(tmp_path, capsys):
    path = tmp_path / "dyn.onnx"
    onnx.save(encoder_model(layers=1, batch="batch"), path)
    with pytest.raises(InputError, match=r"dimension 'batch' of 'x' is unknown; set it with --dim batch=SIZE"):
        import_onnx(str(path))
    with pytest.raises(InputError, match="no dynamic dimension of that name"):
        import_onnx(str(path), {"bacth": 2})
    out = tmp_path / "dyn.tg"
    assert main(["import", "onnx", str(path), "--dim", f"batch={B}", "-o", str(out)]) == 0
    assert f"input x : f32[{B}, {S}, {D}]" in out.read_text()
    assert main(["import", "onnx", str(path), "--dim", "batch=two"]) == 2
    assert "--dim: error" in capsys.readouterr().err


def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xffnot a protobuf" * 10)
    with pytest.raises(InputError, match="not an ONNX model|shape inference failed"):
        import_onnx(str(bad))
    with pytest.raises(InputError, match="not a regular file"):
        import_onnx(str(tmp_path))


def test_without_onnx_installed_the_message_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_onnx(name, *args, **kwargs):
        if name == "onnx" or name.startswith("onnx."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnx)
    with pytest.raises(InputError, match=r"pip install 'mapper\[onnx\]'"):
        read_onnx(_path("resnet50"))


def test_one_dimensional_convolutions_and_global_pools_are_ops_not_opaque(tmp_path):
    # audio and byte models (a voice-activity detector, a file-type classifier shipped on PyPI) are 1-D:
    # Conv over [N, C, L] becomes a conv2d of height 1, GlobalMaxPool over L a reduction
    n, c, length, k, r, stride, pad, groups = 2, 4, 50, 8, 5, 2, 1, 2
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, length])
    w = numpy_helper.from_array(np.ones((k, c // groups, r), np.float32), "w")
    b = numpy_helper.from_array(np.ones((k,), np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["h"], strides=[stride], pads=[pad, pad], group=groups)
    pool = helper.make_node("GlobalMaxPool", ["h"], ["y"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    path = tmp_path / "conv1d.onnx"
    onnx.save(helper.make_model(helper.make_graph([conv, pool], "g", [x], [out], [w, b]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))
    imported = import_onnx(str(path))
    assert imported.unsupported == {}
    g = graph_from_text(imported.text, "conv1d.tg")
    lo = (length + 2 * pad - r) // stride + 1
    conv2d = next(t for t in g.tasks if t.op == "conv2d")
    assert conv2d.flops == 2 * n * k * lo * (c // groups) * r
    assert conv2d.output is not None and conv2d.output.shape == (n, k, 1, lo)
    assert g.tasks[-1].output is not None and g.tasks[-1].output.shape == (n, k, 1)
    assert any(t.op == "reduce" for t in g.tasks)


def _mode_model(tmp_path, cols: int = 4) -> str:
    """``y = relu(x)`` when input ``sr`` is 16000, else ``x @ w`` with ``w [4, cols]``: an ``If`` on
    a mode input, as silero-vad branches on its sample rate. With ``cols != 4`` the branches give
    different shapes, and a Relu reads ``y``: its shape is unknown until ``sr`` is."""
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 4])])
    other = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, cols])])
    rate = helper.make_node("Constant", [], ["rate"], value=numpy_helper.from_array(np.array(16000, np.int64), "rate"))
    nodes = [rate, helper.make_node("Equal", ["sr", "rate"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    if cols != 4:
        nodes.append(helper.make_node("Relu", ["y"], ["z"]))
        out = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "mode", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                                              helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [out], [numpy_helper.from_array(np.ones((4, cols), np.float32), "w")])
    path = tmp_path / f"mode{cols}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_an_input_value_selects_the_branch_of_an_if(tmp_path, capsys):
    path = _mode_model(tmp_path)
    relu = graph_from_text(import_onnx(path, input_values={"sr": (16000.0,)}).text, "a.tg")
    assert [t.op for t in relu.tasks] == ["relu"]
    product = graph_from_text(import_onnx(path, input_values={"sr": (8000.0,)}).text, "b.tg")
    assert [t.op for t in product.tasks] == ["matmul"]
    assert main(["check", path, "--input-value", "sr=16000"]) == 0
    capsys.readouterr()
    for bad, words in (("rate=1", "no input of that name (it has: sr, x)"), ("sr=1,2", "holds 1 values"),
                       ("sr=x", "finite numbers")):
        assert main(["check", path, "--input-value", bad]) == 2
        assert words in capsys.readouterr().err
    dsl = str(Path(__file__).resolve().parent / "data" / "hostile" / "ok.tg")
    assert main(["check", dsl, "--input-value", "sr=1"]) == 2
    assert "applies to model files" in capsys.readouterr().err


def test_empty_constants_transposed_convolutions_and_resizes(tmp_path):
    """A Resize's empty roi is no operand; ConvTranspose (conv_transpose2d and a bias add) counts
    2 N C_in H W (C_out/g) k k FLOPs and a bias per output; nearest Resize moves data (0 FLOPs):
    all typed, none unknown."""
    w = numpy_helper.from_array(np.ones((8, 4, 2, 2), np.float32), "w")
    b = numpy_helper.from_array(np.ones(4, np.float32), "b")
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["u"], strides=[2, 2]),
             _const("roi", np.zeros(0, np.float32)), _const("scales", np.array([1, 1, 2, 2], np.float32)),
             helper.make_node("Resize", ["u", "roi", "scales"], ["y"], mode="nearest")]
    graph = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    path = tmp_path / "up.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    imported = import_onnx(str(path))
    assert imported.unsupported == {}
    g = graph_from_text(imported.text, "up.tg")
    flops = {t.attr("kind") or t.op: t.flops for t in g.tasks}
    assert flops["conv_transpose2d"] + flops["add"] == pytest.approx(2 * 8 * 25 * 4 * 4 + 4 * 10 * 10)
    assert flops["Resize"] == 0
    assert [t.output.shape for t in g.tasks if t.output is not None][-1] == (1, 4, 20, 20)


def test_rms_norm_forms_become_one_op(tmp_path):
    """Llama's x * (1 / sqrt(mean(x^2) + eps)) * g, written with Reciprocal, becomes one rmsnorm;
    T5's exports (Div(1, sqrt)) alike: five of them in the corpus's T5 encoder."""
    g = numpy_helper.from_array(np.ones(16, np.float32), "g")
    nodes = [_const("two", 2.0), _const("eps", 1e-6),
             helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
             helper.make_node("Add", ["ms", "eps"], ["a"]), helper.make_node("Sqrt", ["a"], ["r"]),
             helper.make_node("Reciprocal", ["r"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["n"]),
             helper.make_node("Mul", ["n", "g"], ["y"])]
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [g])
    path = tmp_path / "rms.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    imported = import_onnx(str(path))
    assert imported.fused == {"rmsnorm": 1}
    assert [t.op for t in graph_from_text(imported.text, "rms.tg").tasks] == ["rmsnorm"]
    corpus = Path(__file__).resolve().parent / "data" / "onnx_corpus" / "t5_legacy.onnx"
    assert import_onnx(str(corpus), {"batch": 2, "seq": 16}).fused.get("rmsnorm") == 5


def test_an_if_that_the_inputs_decide_names_input_value(tmp_path, capsys):
    """An If whose branches give outputs of different shapes cannot be sized until its
    condition is known: the error says to fix the deciding input with --input-value."""
    path = _mode_model(tmp_path, cols=3)
    assert main(["check", path]) == 2
    assert "--input-value NAME=VALUE" in capsys.readouterr().err
    assert main(["check", path, "--input-value", "sr=8000"]) == 0


def test_a_model_shipped_on_pypi_imports_with_every_op_known():
    """silero-vad 6.2.3's 16 kHz model (weights moved out; tests/data/onnx_corpus/pypi): its
    Ifs branch on shapes and fold, its 1-D convolutions become conv2d, and it maps split."""
    path = Path(__file__).resolve().parent / "data" / "onnx_corpus" / "pypi" / "silero_vad_16k_op15.onnx"
    imported = import_onnx(str(path), {"batch": 1, "sequence": 512})
    assert imported.unsupported == {}
    g = graph_from_text(imported.text, "silero.tg")
    assert any(t.op == "conv2d" for t in g.tasks)
    from mapper.frontend.sources import ModelFile
    from mapper.pipeline import compile_graph

    with pytest.warns(Warning, match="its weights were not needed"):
        compiled = compile_graph(ModelFile(str(path), (("batch", 1), ("sequence", 512))), "dgx-a100",
                                 mapper="heft", parallel="auto")
    assert validate(compiled.result.schedule) == []
