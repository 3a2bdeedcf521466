"""``--precision int8``: a forward pass's linear layers on the INT8 tensor cores with static scales,
attention and norms in the graph's 16 bits (mapper.costing.precision, "Statically scaled INT8"),
and a GPU's own INT8 convolution efficiency (``efficiency["conv:i8"]``)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mapper.cli import main
from mapper.core.graph import DTYPE_BYTES
from mapper.costing.efficiency import op_class
from mapper.costing.latency import estimate
from mapper.costing.precision import STATIC, check_precision, gemm_bytes, with_precision
from mapper.errors import OptionsError
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.platform.loader import load_platform

BERT = ModelFile("examples/bert_large.tg", params=(("B", 1), ("S", 128), ("L", 2)))


def _orin(kind: str):
    return next(d for d in load_platform("jetson-orin").devices if d.kind == kind)


def _marked():
    return with_precision(load_graph(BERT), "int8")


def test_only_the_linear_layers_gemms_take_int8():
    g = _marked()
    marked = [t for t in g.tasks if t.precision]
    assert marked and all(t.op == "matmul" and t.precision == "int8" for t in marked)
    assert len(marked) == 4 * 2  # QKV, projection and the two FFN GEMMs of each layer
    for t in g.tasks:  # attention, norms, activations and embeddings keep f16; no task changes dtype
        assert t.dtype == "f16"
        if t.op in ("attention", "layernorm", "gelu", "embedding", "add"):
            assert not t.precision


def test_int8_gemm_reads_bytes_of_int8_and_writes_its_16_bit_output():
    t = next(t for t in _marked().tasks if t.precision)
    acts = sum(o.type.numel for o in t.operands if o.kind != "weight")
    weights = sum(o.type.numel for o in t.operands if o.kind == "weight")
    item = DTYPE_BYTES["f16"]
    assert STATIC["int8"] == "i8"
    assert gemm_bytes(t) == pytest.approx(t.bytes - (acts + weights) * (item - 1))  # no cast kernel, no 16-bit read
    assert t.bytes_written == t.output.nbytes and t.output.dtype == "f16"


def test_int8_gemm_runs_at_the_int8_tensor_rate():
    gpu = _orin("gpu")
    t = next(t for t in _marked().tasks if t.precision)
    plain = dataclasses.replace(t, precision="")
    cls = op_class(t.op, t.span)
    fast, slow = estimate(t, cls, gpu), estimate(plain, cls, gpu)
    assert fast.t_parallel / slow.t_parallel == pytest.approx(gpu.tensor_peak("f16") / gpu.tensor_peak("i8"))


def test_a_device_without_tensor_cores_runs_int8_gemms_at_its_i8_peak():
    dla = dataclasses.replace(_orin("dla"), supports=(), dtypes=(), convert=())
    t = next(t for t in _marked().tasks if t.precision)
    est = estimate(t, op_class(t.op, t.span), dla)
    assert est.reason == "" and est.time > 0
    assert est.t_parallel * 2 == pytest.approx(
        estimate(dataclasses.replace(t, precision=""), op_class(t.op, t.span), dla).t_parallel)  # i8 = 2x f16


def test_int8_is_a_forward_pass_format():
    assert check_precision("int8", forward=True) == "int8"
    for kwargs in ({}, {"inference": True}):  # a training step or a generation request
        with pytest.raises(OptionsError, match="unknown precision"):
            check_precision("int8", **kwargs)


def test_compile_int8_on_orin_and_usage_errors(tmp_path, capsys):
    out16, out8 = tmp_path / "f16.json", tmp_path / "i8.json"
    base = ["compile", "examples/bert_large.tg", "--param", "B=1", "--param", "S=128", "--param", "L=2",
            "--platform", "jetson-orin"]
    assert main([*base, "--json", str(out16)]) == 0
    assert main([*base, "--precision", "int8", "--json", str(out8)]) == 0
    assert json.loads(out8.read_text())["makespan"] < json.loads(out16.read_text())["makespan"]
    capsys.readouterr()
    assert main([*base, "--train", "--precision", "int8"]) == 2
    err = capsys.readouterr().err
    assert "unknown precision" in err and "Traceback" not in err
    rc = main(["compile", "examples/bert_large.tg", "--param", "B=1", "--param", "S=128", "--param", "L=2",
               "--platform", "dgx1-v100", "--precision", "int8"])
    err = capsys.readouterr().err
    assert rc == 2 and "i8" in err and "Traceback" not in err  # a GPU without an INT8 tensor rate


def test_a_gpus_own_int8_conv_efficiency_prices_int8_convs_only(tmp_path):
    gpu = _orin("gpu")
    shipped = dict(gpu.efficiency)["conv:i8"]  # the fit on MLPerf's ResNet-50 rows (benchmarks/jetson_orin.py)
    slower = dataclasses.replace(gpu, efficiency=tuple(
        (k, 0.5 if k == "conv:i8" else v) for k, v in gpu.efficiency))
    text = open("examples/resnet50.tg").read().replace("f32", "i8")
    for dtype, graph_text in (("i8", text), ("f16", text.replace("i8", "f16"))):
        path = tmp_path / f"resnet50_{dtype}.tg"
        path.write_text(graph_text)
        g = load_graph(ModelFile(str(path), params=(("N", 8),)))
        conv = max((t for t in g.tasks if t.op == "conv2d"), key=lambda t: t.flops)
        a, b = estimate(conv, "conv", gpu), estimate(conv, "conv", slower)
        if dtype == "i8":
            assert b.t_parallel / a.t_parallel == pytest.approx(shipped / 0.5)
        else:
            assert b.t_parallel == a.t_parallel
