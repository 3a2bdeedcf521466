"""A quantised ONNX model (QDQ and QLinear ops, built with onnx.helper) imports with its dtypes,
and the NPU's op-support list decides each node."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from mapper.cli import main  # noqa: E402
from mapper.frontend.load import load_graph  # noqa: E402


def _scalar(name, value, dtype):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def _conv_inits():
    return [numpy_helper.from_array(np.ones((4, 3, 3, 3), dtype=np.int8), "w_q"),
            _scalar("s", 0.02, np.float32), _scalar("zp", 0, np.int8)]


def _conv_nodes():
    """x -> QuantizeLinear -> DequantizeLinear -> Conv, its weight dequantised from int8."""
    return [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="quant_in"),
        helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="dequant_in"),
        helper.make_node("DequantizeLinear", ["w_q", "s", "zp"], ["wd"], name="dequant_w"),
        helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]


def _qdq_model(path):
    """x -> QuantizeLinear -> DequantizeLinear -> Conv (weight dequantised from int8) -> QuantizeLinear
    -> DequantizeLinear -> Relu: the QDQ form ONNX Runtime's quantiser writes for the QNN EP."""
    inits, nodes = _conv_inits(), _conv_nodes()
    nodes += [
        helper.make_node("QuantizeLinear", ["y", "s", "zp"], ["yq"], name="quant_out"),
        helper.make_node("DequantizeLinear", ["yq", "s", "zp"], ["yd"], name="dequant_out"),
        helper.make_node("Relu", ["yd"], ["z"], name="relu"),
    ]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _qlinear_model(path):
    """x (uint8) -> QLinearConv -> DequantizeLinear: the QOperator form."""
    inits = [numpy_helper.from_array(np.ones((4, 3, 3, 3), dtype=np.uint8), "w"),
             _scalar("s", 0.02, np.float32), _scalar("zp", 0, np.uint8)]
    nodes = [
        helper.make_node("QLinearConv", ["x", "s", "zp", "w", "s", "zp", "s", "zp"], ["y"], name="qconv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["y", "s", "zp"], ["z"], name="dequant"),
    ]
    g = helper.make_graph(nodes, "qlinear", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _by_node(graph):
    out = {}
    for t in graph.tasks:
        for s in t.sources:
            out.setdefault(s.name, []).append(t)
    return out


def test_qdq_model_imports_with_its_dtypes(tmp_path):
    path = tmp_path / "qdq.onnx"
    _qdq_model(path)
    tasks = _by_node(load_graph(str(path)))
    assert {t.dtype for t in tasks["quant_in"]} == {"i8"}
    src = tasks["quant_in"][0].sources[0]
    assert src.op == "QuantizeLinear" and src.inputs == ("f32", "f32", "i8") and src.dtype == "i8"
    # DequantizeLinear -> Conv -> QuantizeLinear is one node unit: the convolution runs in int8 and the
    # DequantizeLinear and QuantizeLinear around it are no tasks of their own
    assert {t.dtype for t in tasks["conv"]} == {"i8"}
    assert "dequant_in" not in tasks and "quant_out" not in tasks
    conv = tasks["conv"][0].sources[0]
    assert conv.op == "Conv" and conv.attr("kernel_shape") == (3, 3) and conv.attr("pads") == (1, 1, 1, 1)
    assert conv.inputs[:2] == ("i8", "i8") and conv.dtype == "i8"
    # the DequantizeLinear before the float Relu (the graph output) stays a task
    assert {t.dtype for t in tasks["dequant_out"]} == {"f32"}


def test_qdq_node_units_price_int8_bytes(tmp_path):
    """The unit's convolution moves int8 tensors: its working set is a quarter of the float one's."""
    from mapper.costing.work import working_set

    path = tmp_path / "qdq.onnx"
    _qdq_model(path)
    conv = _by_node(load_graph(str(path)))["conv"][0]
    assert conv.output is not None and conv.output.dtype == "i8"
    # x[1, 3, 8, 8], w[4, 3, 3, 3] and y[1, 4, 8, 8], one byte each
    assert working_set(conv) == 1 * 3 * 8 * 8 + 4 * 3 * 3 * 3 + 1 * 4 * 8 * 8


def test_a_dequantizelinear_feeding_a_float_op_stays(tmp_path):
    """A DequantizeLinear whose consumer is not bracketed by QuantizeLinear stays a task (f32 out)."""
    inits, nodes = _conv_inits(), _conv_nodes()
    g = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    path = tmp_path / "dq.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    tasks = _by_node(load_graph(str(path)))
    assert {t.dtype for t in tasks["conv"]} == {"f32"} and {t.dtype for t in tasks["dequant_in"]} == {"f32"}


def test_qlinear_model_imports_with_its_dtypes_and_falls_back_where_the_list_says(tmp_path):
    path = tmp_path / "qlinear.onnx"
    _qlinear_model(path)
    tasks = _by_node(load_graph(str(path)))
    qconv = tasks["qconv"][0]
    assert qconv.dtype == "i8" and qconv.sources[0].op == "QLinearConv" and qconv.sources[0].inputs[0] == "i8"
    out = tmp_path / "out.json"
    assert main(["compile", str(path), "--platform", "sd8gen3", "--delegate", "greedy", "--json", str(out),
                 "-q"]) == 0
    dl = json.loads(out.read_text())["delegation"]
    assert {"task": "qconv", "op": "QLinearConv", "device": "hexagon",
            "reason": "QLinearConv is not in the qnn-htp list"} in dl["fallbacks"]
    assert dl["subgraphs"] == [{"device": "hexagon", "tasks": ["dequant"]}]


def test_mlperf_mobilenetv4_runs_int8_in_one_npu_subgraph(tmp_path):
    """MLPerf Mobile v4.0's MobileNetV4-Conv-L (int8 QDQ, benchmarks/mlperf_models.py): every convolution
    a node unit in int8, the whole model one Hexagon subgraph under --delegate greedy."""
    from pathlib import Path

    model = Path(__file__).parent / "data" / "mlperf_mobile" / "mobilenetv4.onnx"
    graph = load_graph(str(model))
    convs = [t for t in graph.tasks if t.op == "conv2d"]
    assert len(convs) == 102 and {t.dtype for t in convs} == {"i8"}
    out = tmp_path / "out.json"
    assert main(["compile", str(model), "--platform", "sd8gen3", "--delegate", "greedy", "--json", str(out),
                 "-q"]) == 0
    dl = json.loads(out.read_text())["delegation"]
    assert [s["device"] for s in dl["subgraphs"]] == ["hexagon"] and dl["fallbacks"] == []


def test_a_dequantizelinear_shared_with_a_float_op_keeps_both_float(tmp_path):
    """x -> Q -> DQ feeds a unit Conv and a float Relu: the DQ stays a task, so the Conv stays float."""
    inits, nodes = _conv_inits(), _conv_nodes()
    nodes += [
        helper.make_node("QuantizeLinear", ["y", "s", "zp"], ["yq"], name="qy"),
        helper.make_node("DequantizeLinear", ["yq", "s", "zp"], ["yd"], name="dqy"),
        helper.make_node("Relu", ["xd"], ["r"], name="relu"),
    ]
    g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("yd", TensorProto.FLOAT, [1, 4, 8, 8]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 3, 8, 8])], inits)
    path = tmp_path / "shared.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    tasks = _by_node(load_graph(str(path)))
    assert {t.dtype for t in tasks["conv"]} == {"f32"} and {t.dtype for t in tasks["dequant_in"]} == {"f32"}
