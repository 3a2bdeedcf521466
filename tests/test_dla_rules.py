"""TensorRT's DLA layer restrictions in the shipped `tensorrt-dla` list: each condition just
inside and just outside its range, and the fallback reason naming the rule
(platforms/support/tensorrt-dla.toml; docs/platforms.md, Op support)."""

from __future__ import annotations

import json

import pytest

from mapper.cli import main
from mapper.core.graph import SourceNode
from mapper.errors import PlatformError
from mapper.platform.loader import support_list
from mapper.platform.support import read_support

NCHW = (1, 64, 56, 56)


def _fail(path: str, message: str) -> Exception:
    return PlatformError(message, obj=path)


DLA = read_support(support_list("tensorrt-dla"), "tensorrt-dla", "tensorrt-dla", _fail)


def node(op: str, shape: tuple[int, ...] = NCHW, values: dict[int, tuple[float, ...]] | None = None,
         computed: tuple[tuple[int, str], ...] = (), **attrs) -> SourceNode:
    return SourceNode("n", op, tuple(sorted(attrs.items())), ("f16",), "f16", computed, (shape,),
                      tuple(sorted((values or {}).items())))


# (op, attributes/shape/values inside the range, the same just outside it, words of the reason)
CASES = [
    ("Conv", dict(kernel_shape=(32, 32)), dict(kernel_shape=(33, 3)), "kernel_shape <= 32"),
    ("Conv", dict(kernel_shape=(3, 3), strides=(8, 8)), dict(kernel_shape=(3, 3), strides=(9, 1)), "strides <= 8"),
    ("Conv", dict(kernel_shape=(32, 32), pads=(31, 31, 31, 31)), dict(kernel_shape=(32, 32), pads=(32, 0, 0, 0)),
     "pads <= 31"),
    ("Conv", dict(kernel_shape=(3, 3), pads=(2, 2, 2, 2)), dict(kernel_shape=(3, 3), pads=(3, 0, 0, 0)),
     "pads below kernel_shape"),
    ("Conv", dict(kernel_shape=(3, 3), dilations=(32, 32)), dict(kernel_shape=(3, 3), dilations=(33, 1)),
     "dilations <= 32"),
    ("Conv", dict(kernel_shape=(3, 3), group=8192), dict(kernel_shape=(3, 3), group=8193), "group <= 8192"),
    ("Conv", dict(kernel_shape=(3, 3)), dict(kernel_shape=(3,), shape=(1, 64, 56)), "4-D input"),
    ("ConvTranspose", dict(kernel_shape=(32, 32), strides=(32, 32)), dict(kernel_shape=(33, 33)),
     "kernel_shape <= 32"),
    ("ConvTranspose", dict(kernel_shape=(1, 64), strides=(1, 2)), dict(kernel_shape=(64, 64)), "kernel_shape"),
    ("ConvTranspose", dict(kernel_shape=(2, 2), strides=(128, 1)), dict(kernel_shape=(2, 2), strides=(128, 128)),
     "strides"),
    ("ConvTranspose", dict(kernel_shape=(2, 2), pads=(0, 0, 0, 0)), dict(kernel_shape=(2, 2), pads=(1, 1, 1, 1)),
     "pads <= 0"),
    ("MaxPool", dict(kernel_shape=(8, 8), strides=(16, 16), pads=(7, 7, 7, 7)), dict(kernel_shape=(9, 9)),
     "kernel_shape <= 8"),
    ("MaxPool", dict(kernel_shape=(2, 2), strides=(16, 16)), dict(kernel_shape=(2, 2), strides=(17, 17)),
     "strides <= 16"),
    ("AveragePool", dict(kernel_shape=(8, 8), pads=(7, 7, 7, 7)), dict(kernel_shape=(8, 8), pads=(8, 8, 8, 8)),
     "pads <= 7"),
    ("LRN", dict(size=9), dict(size=11), "size in [3, 5, 7, 9]"),
    ("Concat", dict(axis=1), dict(axis=2), "axis in [1, -3]"),
    ("Relu", dict(), dict(shape=(1, 1000)), "4-D input"),
    ("Add", dict(), dict(shape=(1, 128, 768)), "4-D input"),
    ("ReduceMax", dict(axes=(2, 3)), dict(axes=(0, 1)), "each of axes"),
    ("ReduceMax", dict(values={1: (1.0, -1.0)}), dict(values={1: (0.0,)}), "each of input 1"),
    ("Resize", dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor",
                    values={2: (1.0, 1.0, 32.0, 32.0)}),
     dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor",
          values={2: (1.0, 1.0, 1.5, 1.5)}), "each of input 2"),
    ("Resize", dict(mode="linear", values={2: (1.0, 1.0, 4.0, 4.0)}), dict(mode="linear", values={2: (1, 1, 8, 8)}),
     "Resize bilinear"),
    ("Resize", dict(mode="nearest", coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil"),
     dict(mode="nearest", coordinate_transformation_mode="half_pixel", nearest_mode="ceil"), "nearest_mode"),
    ("Slice", dict(values={4: (1.0, 1.0)}), dict(values={4: (2.0,)}), "each of input 4"),
    ("Slice", dict(values={3: (2.0, 3.0)}), dict(values={3: (0.0,)}), "not on the first dimension"),
    ("Slice", dict(), dict(computed=((4, "Shape node"),)), "build-time constant"),
    ("Softmax", dict(axis=1, shape=(1, 1024, 7, 7)), dict(axis=1, shape=(1, 1025, 7, 7)), "at most 1024"),
    ("Softmax", dict(axis=3), dict(axis=0), "each of axis"),
    ("Transpose", dict(perm=(0, 2, 3, 1)), dict(perm=(1, 0, 2, 3)), "batch dimension stays first"),
    ("Reshape", dict(), dict(shape=(1, 128, 768)), "4-D input"),
    ("PRelu", dict(), dict(computed=((1, "graph input"),)), "initializer"),
    ("BatchNormalization", dict(computed=((2, "ConstantOfShape node"),)), dict(shape=(1, 64, 56)), "4-D input"),
    ("Softmax", dict(axis=1, shape=(1, 1000)), dict(axis=0, shape=(1, 1000)), "each of axis"),
    ("Abs", dict(), dict(shape=(8,)), "Unary: ABS"),
    ("GlobalMaxPool", dict(), dict(shape=(1, 64, 7, 7, 7)), "4-D input"),
    ("Relu", dict(shape=(4096, 8, 7, 7)), dict(shape=(4097, 8, 7, 7)), "general restrictions"),
    ("Relu", dict(shape=(1, 8192, 1, 1)), dict(shape=(1, 8193, 1, 1)), "dimensions of at most 8192"),
]


@pytest.mark.parametrize(("op", "inside", "outside", "words"), CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_dla_condition_inside_and_outside_its_range(op, inside, outside, words):
    assert DLA.why_not(node(op, **inside)) is None
    why = DLA.why_not(node(op, **outside))
    assert why is not None and words in why and "(tensorrt-dla list" in why


def test_reason_names_the_rule_nearest_the_node():
    why = DLA.why_not(node("Resize", mode="linear", coordinate_transformation_mode="align_corners"))
    assert why is not None and "coordinate_transformation_mode in ['half_pixel']" in why
    assert why.endswith("(tensorrt-dla list: Resize bilinear: half-pixel coordinates, integer scales [1, 4] [API])")
    why = DLA.why_not(node("Conv", kernel_shape=(33, 33)))
    assert why is not None and "Convolution: 2-D, kernel [1, 32]" in why


def test_unknown_shapes_and_values_satisfy_the_conditions():
    bare = SourceNode("n", "Softmax", (("axis", 1),), ("f16",), "f16")
    assert DLA.why_not(bare) is None  # a DSL task without shapes is not refused on them
    assert DLA.why_not(SourceNode("n", "GlobalAveragePool", (), ("f16",), "f16")) is not None  # a Reduce AVG


@pytest.mark.parametrize(("key", "value", "words"), [
    ("rank", "4", "array of ranks"), ("each", "{ axes = 1 }", "array of the numbers"),
    ("consts", "{ x = [1] }", "input position"), ("below", "{ pads = 3 }", "name of the attribute"),
    ("axis_max", "-1", "number >= 0")])
def test_bad_condition_exits_2_naming_it(tmp_path, capsys, key, value, words):
    plat = tmp_path / "p.toml"
    plat.write_text(f'name = "p"\n[[device]]\nname = "d"\nkind = "cpu"\npeak_gflops = {{ f32 = 1.0 }}\n'
                    f'mem_bandwidth_gbs = 1.0\nsupports = [{{ op = "Relu", {key} = {value} }}]\n')
    model = tmp_path / "m.tg"
    model.write_text("graph g {\n  input x: f32[4]\n  y = relu(x)\n  output y\n}\n")
    assert main(["compile", str(model), "--platform", str(plat), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"device[0].supports[0].{key}" in err and words in err and "Traceback" not in err


def test_onnx_resize_and_slice_fall_back_with_the_rule(tmp_path):
    onnx = pytest.importorskip("onnx")
    np = pytest.importorskip("numpy")
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w"),
             numpy_helper.from_array(np.array([1, 1, 8, 8], np.float32), "up8"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up2"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"),
             numpy_helper.from_array(np.array([64], np.int64), "s1"),
             numpy_helper.from_array(np.array([2], np.int64), "ax"),
             numpy_helper.from_array(np.array([2], np.int64), "st")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "up2"], ["r2"], name="near2", mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Resize", ["r2", "", "up8"], ["r8"], name="bilinear8", mode="linear"),
             helper.make_node("Slice", ["r8", "s0", "s1", "ax", "st"], ["y"], name="stride2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    out = tmp_path / "out.json"
    assert main(["compile", str(path), "--platform", "jetson-orin", "--delegate", "greedy", "--json", str(out),
                 "-q"]) == 0
    dl = json.loads(out.read_text())["delegation"]
    reasons = {f["task"]: f["reason"] for f in dl["fallbacks"] if f["device"] == "dla0"}
    assert set(reasons) == {"bilinear8", "stride2"}
    assert "each of input 2 in [1, 2, 3, 4], the node's has 8" in reasons["bilinear8"]
    assert "Resize bilinear" in reasons["bilinear8"]
    assert "each of input 4 in [1], the node's has 2" in reasons["stride2"] and "Slice: 4-D" in reasons["stride2"]
