"""Op-support lists, NPU/DLA dtypes, delegated subgraphs and shared-memory hand-overs
(docs/platforms.md: Op support, Delegation)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.core.graph import SourceNode
from mapper.costing.cost import build_cost_table
from mapper.engine.schedule import Assignment, build_schedule, delegated_runs
from mapper.engine.validate import validate
from mapper.errors import PlatformError
from mapper.frontend.load import graph_from_text
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.platform.loader import load_platform, parse_platform, support_list
from mapper.platform.support import read_support


def _list(name: str):
    def fail(path: str, message: str) -> Exception:
        return PlatformError(message, obj=path)
    return read_support(support_list(name), name, name, fail)


def _node(op: str, dtype: str = "f16", inputs: tuple[str, ...] = ("f16",), **attrs) -> SourceNode:
    return SourceNode("n", op, tuple(sorted(attrs.items())), inputs, dtype)


# -- op-support lists -----------------------------------------------------------------------------

def test_dla_list_checks_attribute_bounds_and_values():
    dla = _list("tensorrt-dla")
    assert dla.why_not(_node("Conv", kernel_shape=(3, 3), pads=(1, 1, 1, 1), strides=(1, 1))) is None
    assert "kernel_shape <= 32" in dla.why_not(_node("Conv", kernel_shape=(33, 33)))
    assert "strides <= 8" in dla.why_not(_node("Conv", kernel_shape=(3, 3), strides=(16, 16)))
    assert dla.why_not(_node("MaxPool", kernel_shape=(8, 8))) is None
    assert "kernel_shape <= 8" in dla.why_not(_node("MaxPool", kernel_shape=(9, 9)))
    assert dla.why_not(_node("Concat", axis=1)) is None
    assert "axis in [1, -3]" in dla.why_not(_node("Concat", axis=2))
    assert dla.why_not(_node("LRN", size=5)) is None
    assert "size in [3, 5, 7, 9]" in dla.why_not(_node("LRN", size=4))
    assert "not in the tensorrt-dla list" in dla.why_not(_node("Gelu"))


def test_dla_list_checks_deconvolution_comparison_and_resize():
    dla = _list("tensorrt-dla")
    assert dla.why_not(_node("ConvTranspose", kernel_shape=(2, 2), strides=(2, 2))) is None
    assert "group in [1]" in dla.why_not(_node("ConvTranspose", kernel_shape=(2, 2), group=2))
    assert "dilations <= 1" in dla.why_not(_node("ConvTranspose", kernel_shape=(2, 2), dilations=(2, 2)))
    assert dla.why_not(_node("Equal", "bool", ("i8", "i8"))) is None
    assert "inputs of i8" in dla.why_not(_node("Equal", "bool", ("f16", "f16")))
    assert dla.why_not(_node("Resize", mode="nearest")) is None
    assert dla.why_not(_node("Resize", mode="linear")) is None  # ONNX's default: half_pixel
    assert dla.why_not(_node("Resize", mode="linear", coordinate_transformation_mode="half_pixel")) is None
    assert "coordinate_transformation_mode in ['half_pixel']" in dla.why_not(
        _node("Resize", mode="linear", coordinate_transformation_mode="align_corners"))
    assert dla.why_not(_node("Resize", mode="cubic")) is not None


def test_lists_check_dtypes_of_outputs_and_inputs():
    dla, qnn = _list("tensorrt-dla"), _list("qnn-htp")
    assert dla.why_not(_node("Relu", "i8", ("i8",))) is None
    assert "takes i8/f16 here, the node is f32" in dla.why_not(_node("Relu", "f32", ("f32",)))
    assert qnn.why_not(_node("MatMul", "i8", ("i8", "i8"))) is None
    assert "inputs of i8" in qnn.why_not(_node("MatMul", "f16", ("f16", "f16")))
    assert qnn.why_not(_node("LpNormalization", p=2)) is None
    assert "p in [2]" in qnn.why_not(_node("LpNormalization", p=1))
    assert qnn.why_not(_node("Reshape")) is None  # in the EP's registry (the published table left it out)
    assert "Dropout is not in the qnn-htp list" in qnn.why_not(_node("Dropout"))


def test_shipped_lists_cite_their_table():
    for name in support_list(""):
        assert _list(name).source.startswith("https://")


# -- platforms ------------------------------------------------------------------------------------

SOC = """
name = "soc"
[[device]]
name = "big"
kind = "cpu"
peak_gflops = {{ f32 = 100.0, f16 = 200.0 }}
mem_bandwidth_gbs = 50.0
[[device]]
name = "npu0"
kind = "npu"
peak_gflops = {{ i8 = 10000.0, f16 = 5000.0 }}
mem_bandwidth_gbs = 50.0
dtypes = ["i8", "f16"]
convert = {{ f32 = "f16" }}
supports = {supports}
invoke_us = {invoke}
launch_us = {launch}
[[link]]
from = "big"
to = "npu0"
bidirectional = true
bandwidth_gbs = 50.0
shared_memory = true
sync_us = {sync}
"""


def _soc(supports: str = '["Conv", "Relu", "Add", "MatMul"]', invoke: float = 100.0, sync: float = 20.0,
         launch: float = 0.0):
    return parse_platform(SOC.format(supports=supports, invoke=invoke, sync=sync, launch=launch), "soc.toml")


def test_shipped_soc_platforms_have_their_accelerators():
    sd = load_platform("sd8gen3")
    npu = next(d for d in sd.devices if d.kind == "npu")
    assert npu.supports is not None and npu.supports.name == "qnn-htp" and npu.dtypes == ("i8", "f16")
    assert all(link.shared_memory for link in sd.links)
    orin = load_platform("jetson-orin")
    dlas = [d for d in orin.devices if d.kind == "dla"]
    assert len(dlas) == 2 and all(d.supports is not None and d.supports.name == "tensorrt-dla" for d in dlas)


@pytest.mark.parametrize("bad, where, says", [
    ('"qnn-gpu"', "device[1].supports", "unknown op-support list 'qnn-gpu'; shipped: qnn-htp, tensorrt-dla"),
    ('[{ op = "Conv", max = { kernel_shape = "big" } }]', "device[1].supports[0].max.kernel_shape",
     "expected a number"),
    ('[{ op = "Conv", dtypes = ["int8"] }]', "device[1].supports[0].dtypes", "unknown dtype 'int8'"),
    ('[{ type = "Conv" }]', "device[1].supports[0].type", "unknown key 'type'"),
    ('[{ op = "BatchNormalization", static = [1, -2] }]', "device[1].supports[0].static",
     "expected an array of input positions"),
    ('[{ op = "BatchNormalization", static = "scale" }]', "device[1].supports[0].static",
     "expected an array of input positions"),
    ('[{ op = "BatchNormalization", static = [true] }]', "device[1].supports[0].static",
     "expected an array of input positions"),
])
def test_bad_supports_names_the_place(bad, where, says):
    with pytest.raises(PlatformError) as err:
        _soc(bad)
    assert err.value.obj == f"soc.toml: {where}" and says in err.value.message


def test_bad_static_in_a_list_file_names_the_rule():
    def fail(path: str, message: str) -> Exception:
        return PlatformError(message, obj=path)
    doc = {"name": "npu", "source": "https://example.org/table", "rule": [{"op": "Relu"},
                                                                          {"op": "Pad", "static": [1.5]}]}
    with pytest.raises(PlatformError) as err:
        read_support(doc, "npu.toml", "npu", fail)
    assert err.value.obj == "npu.toml.rule[1].static" and "input positions" in err.value.message


@pytest.mark.parametrize("supports, where, says", [
    ('"nope"', "device[1].supports", "unknown op-support list 'nope'"),
    ('[{ op = "Relu", static = ["x"] }]', "device[1].supports[0].static", "input positions"),
])
def test_bad_supports_exits_2_naming_the_place(tmp_path, capsys, supports, where, says):
    plat = tmp_path / "soc.toml"
    plat.write_text(SOC.format(supports=supports, invoke=0, sync=0, launch=0))
    prog = tmp_path / "g.tg"
    prog.write_text(PROGRAM)
    assert main(["compile", str(prog), "--platform", str(plat), "-q"]) == 2
    err = capsys.readouterr().err
    assert where in err and says in err and "Traceback" not in err


def test_sync_us_needs_shared_memory():
    text = SOC.format(supports="[]", invoke=0, sync=1, launch=0).replace("shared_memory = true\n", "")
    with pytest.raises(PlatformError, match="only valid with shared_memory"):
        parse_platform(text, "soc.toml")


# -- the cost table: infeasible with the reason -----------------------------------------------------

PROGRAM = """
graph g {
  input x : f32[64, 64]
  weight w : f32[64, 64]
  a = matmul(x, w)
  b = relu(a)
  c = softmax(b)
  d = relu(c)
  output d
}
"""


def test_unsupported_and_wrong_dtype_tasks_are_infeasible_with_the_reason():
    g = graph_from_text(PROGRAM)
    cost = build_cost_table(g, _soc('["Relu", "MatMul"]'))
    npu = 1
    assert cost.time[g.task_index("b")][npu] < float("inf")  # f32 converts to f16
    assert cost.reason(g.task_index("c"), npu) == "Softmax is not in the inline list"
    assert "MatMul takes" not in (cost.reason(g.task_index("a"), npu) or "")
    strict = build_cost_table(g, _soc('[{ op = "Relu", dtypes = ["i8"] }]'))
    assert "Relu takes i8 here, the node is f16" in strict.reason(g.task_index("b"), npu)


# -- timing: invocations and hand-overs in the schedule and the validator ------------------------------

def _timed(invoke: float = 100.0, sync: float = 20.0):
    g = graph_from_text(PROGRAM)
    cost = build_cost_table(g, _soc('["Relu", "MatMul"]', invoke, sync))
    a, b, c, d = (g.task_index(n) for n in "abcd")
    device = [0] * 4
    device[a] = device[b] = device[d] = 1  # a, b on the NPU; c on the CPU; d on the NPU again
    return g, cost, build_schedule(cost, Assignment(tuple(device)))


def test_each_delegated_subgraph_pays_one_invocation_and_each_boundary_its_sync():
    g, cost, s = _timed()
    a, b, c, d = (g.task_index(n) for n in "abcd")
    runs = delegated_runs(cost, s.order)
    assert [run for _, run in runs] == [(a, b), (d,)]
    slot = s.slots
    assert slot[a].end - slot[a].start == pytest.approx(cost.time[a][1] + 100e-6)
    assert slot[b].end - slot[b].start == pytest.approx(cost.time[b][1])
    assert slot[d].end - slot[d].start == pytest.approx(cost.time[d][1] + 100e-6)
    assert slot[c].start == pytest.approx(slot[b].end + 20e-6)  # the hand-over, not bytes / bandwidth
    assert slot[d].start == pytest.approx(slot[c].end + 20e-6)
    assert validate(s) == []


def test_every_op_in_a_delegated_run_pays_the_npus_launch_us_and_the_run_one_invocation():
    g = graph_from_text(PROGRAM)
    plain = build_cost_table(g, _soc('["Relu", "MatMul"]', 100.0, 20.0))
    cost = build_cost_table(g, _soc('["Relu", "MatMul"]', 100.0, 20.0, launch=2.0))
    a, b, c, d = (g.task_index(n) for n in "abcd")
    for t in (a, b, d):  # 2 us per op on the NPU, whatever its size
        assert cost.time[t][1] == pytest.approx(plain.time[t][1] + 2e-6)
    assert cost.time[c][0] == plain.time[c][0]  # the CPU's own launch_us (0) is untouched
    device = [0] * 4
    device[a] = device[b] = device[d] = 1
    s = build_schedule(cost, Assignment(tuple(device)))
    s0 = build_schedule(plain, Assignment(tuple(device)))
    # two runs on the NPU ((a, b) and (d,)): 200 us of invocations either way, 3 x 2 us of op launches on top
    assert s.makespan == pytest.approx(s0.makespan + 3 * 2e-6)
    assert s.slots[a].end - s.slots[a].start == pytest.approx(plain.time[a][1] + 2e-6 + 100e-6)
    assert validate(s) == []


def test_the_validator_recomputes_invocations_and_hand_overs():
    g, cost, s = _timed()
    a, c = g.task_index("a"), g.task_index("c")
    slots = list(s.slots)
    shift = 100e-6
    slots[a] = replace(slots[a], end=slots[a].end - shift)  # the invocation left out
    assert "duration" in {v.kind for v in validate(replace(s, slots=tuple(slots)))}
    early = list(s.slots)
    early[c] = replace(early[c], start=early[c].start - 10e-6, end=early[c].end - 10e-6)
    assert "precedence" in {v.kind for v in validate(replace(s, slots=tuple(early)))} or \
        "transfer" in {v.kind for v in validate(replace(s, slots=tuple(early)))}


def test_without_costs_the_delay_model_is_unchanged():
    g, cost, s = _timed(invoke=0.0, sync=0.0)
    assert delegated_runs(cost, s.order) == []
    assert s.makespan == pytest.approx(sum(cost.time[t][s.slots[t].device] for t in range(4)))


BRANCHES = """
graph g {
  input x : f32[64, 64]
  weight w : f32[64, 64]
  a = matmul(x, w)
  b = relu(a)
  c = relu(a)
  s = softmax(b)
  d = add(s, c)
  output d
}
"""


def test_parallel_branches_share_a_run_and_the_border_starts_the_next():
    """ONNX Runtime's partitioner (partitioning_utils.cc) keeps b and c in a's partition though c
    reads nothing of b: only d, whose input s (on the CPU) depends on the run, starts a new one; the
    validator counts the same invocations."""
    g = graph_from_text(BRANCHES)
    cost = build_cost_table(g, _soc('["Relu", "MatMul", "Add"]', 100.0, 20.0))
    a, b, c, s_, d = (g.task_index(n) for n in "abcsd")
    device = [1] * 5
    device[s_] = 0
    order = ((s_,), (a, b, c, d))
    s = build_schedule(cost, Assignment(tuple(device), order))
    assert [run for _, run in delegated_runs(cost, s.order)] == [(a, b, c), (d,)]
    assert s.slots[c].end - s.slots[c].start == pytest.approx(cost.time[c][1])  # no second invocation
    assert validate(s) == []
    slots = list(s.slots)
    slots[d] = replace(slots[d], end=slots[d].end - 100e-6)  # as if d continued the run
    assert "duration" in {v.kind for v in validate(replace(s, slots=tuple(slots)))}


def test_two_models_never_share_an_invocation():
    """Disconnected parts of a graph (the models of a workload) are separate sessions: each part's
    tasks on the NPU form their own run even when nothing separates them."""
    g = graph_from_text(PROGRAM.replace("output d", "e = relu(x)\n  output d\n  output e"))
    cost = build_cost_table(g, _soc('["Relu", "MatMul"]', 100.0, 20.0))
    a, b, e = (g.task_index(n) for n in "abe")
    device = [0] * len(g.tasks)
    for t in (a, b, e):
        device[t] = 1
    s = build_schedule(cost, Assignment(tuple(device), ((g.task_index("c"), g.task_index("d")), (a, b, e))))
    assert [run for _, run in delegated_runs(cost, s.order)] == [(a, b), (e,)]
    assert validate(s) == []


def test_greedy_runs_in_the_partitioners_order():
    """partition_order visits the tasks in ONNX Runtime's waves: the whole first partition (a, b, c)
    before the CPU's s, then d."""
    from mapper.mapping.delegate import partition_order

    g = graph_from_text(BRANCHES)
    cost = build_cost_table(g, _soc('["Relu", "MatMul", "Add"]', 100.0, 20.0))
    device = [0 if t.name == "s" else 1 for t in g.tasks]
    order = [g.tasks[t].name for t in partition_order(cost, device, 1)]
    assert order.index("s") > max(order.index(n) for n in "abc") and order[-1] == "d"


# -- greedy and mapped delegation --------------------------------------------------------------------

def test_greedy_puts_every_supported_task_on_the_npu_and_mapped_is_no_worse():
    g = graph_from_text(PROGRAM)
    cost = build_cost_table(g, _soc('["Relu", "MatMul"]', 300.0, 50.0))
    greedy = get_mapper("delegate-greedy").map(cost, MapOptions(time_limit=5))
    mapped = get_mapper("delegate-mapped").map(cost, MapOptions(time_limit=5))
    assert [greedy.schedule.slots[g.task_index(n)].device for n in "abcd"] == [1, 1, 0, 1]
    assert validate(greedy.schedule) == [] and validate(mapped.schedule) == []
    assert mapped.schedule.makespan <= greedy.schedule.makespan


LIGHT = Path(__import__("onnx").__file__).parent / "backend" / "test" / "data" / "light"


def probe_model(path):
    """conv1 -> relu1 -> soft (Softsign, which the QNN EP leaves to the CPU) -> conv2 -> relu2 (onnx.helper)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w1"),
             numpy_helper.from_array(np.ones((8, 8, 3, 3), np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Softsign", ["r1"], ["s"], name="soft"),
             helper.make_node("Conv", ["s", "w2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["y"], name="relu2")]
    g = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 64, 64])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def bn_model(path, params: str):
    """conv -> bn -> relu (onnx.helper); the BatchNormalization's scale, bias, mean and variance
    are initializers, Constant nodes' outputs, or ConstantOfShape outputs (as in the onnx
    package's light DenseNet-121 and ShuffleNet): ``params``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    for p in ("scale", "bias", "mean", "var"):
        if params == "ConstantOfShape":
            inits.append(numpy_helper.from_array(np.array([8], np.int64), f"{p}_shape"))
            nodes.append(helper.make_node("ConstantOfShape", [f"{p}_shape"], [p], name=f"make_{p}",
                                          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])))
        elif params == "Constant":
            nodes.append(helper.make_node("Constant", [], [p], name=f"make_{p}",
                                          value=numpy_helper.from_array(np.ones(8, np.float32), p)))
        else:
            inits.append(numpy_helper.from_array(np.ones(8, np.float32), p))
    nodes += [helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
              helper.make_node("Relu", ["b"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("params", ["initializer", "Constant", "ConstantOfShape"])
def test_bn_with_computed_parameters_falls_back(tmp_path, params):
    """ONNX Runtime makes Constant nodes initializers when it loads a model; a ConstantOfShape
    stays a node, and QNN's BatchNormalization builder refuses its output."""
    out = tmp_path / "out.json"
    model = bn_model(tmp_path / "bn.onnx", params)
    assert main(["compile", str(model), "--platform", "sd8gen3", "--delegate", "greedy", "--json", str(out),
                 "-q"]) == 0
    dl = json.loads(out.read_text())["delegation"]
    if params != "ConstantOfShape":
        assert dl["fallbacks"] == [] and [s["device"] for s in dl["subgraphs"]] == ["hexagon"]
        return
    # the BatchNormalization alone leaves the NPU: fusion stops at it, so conv and relu stay delegated
    assert dl["subgraphs"] == [{"device": "hexagon", "tasks": ["conv"]}, {"device": "hexagon", "tasks": ["relu"]}]
    assert dl["fallbacks"] == [{"task": "bn", "op": "BatchNormalization", "device": "hexagon",
                                "reason": "BatchNormalization needs input 1 as an initializer in the model file, "
                                          "the node's comes from a ConstantOfShape node (qnn-htp list: fp16 supported "
                                          "since 1.18.0)"}]


def test_static_rule_reads_where_inputs_come_from():
    qnn = _list("qnn-htp")
    held = SourceNode("bn", "BatchNormalization", (), ("f16",) * 5, "f16")
    assert qnn.why_not(held) is None
    fed = replace(held, computed=((0, "Conv node"), (4, "graph input")))
    assert qnn.why_not(fed) == ("BatchNormalization needs input 4 as an initializer in the model file, the node's "
                                "comes from a graph input (qnn-htp list: fp16 supported since 1.18.0)")
    assert qnn.why_not(replace(held, computed=((0, "Conv node"),))) is None  # the data input may be computed


def test_compile_delegate_json_names_onnx_nodes(tmp_path):
    out = tmp_path / "out.json"
    model = probe_model(tmp_path / "probe.onnx")
    assert main(["compile", str(model), "--platform", "sd8gen3", "--delegate", "greedy", "--json", str(out),
                 "-q"]) == 0
    d = json.loads(out.read_text())
    dl = d["delegation"]
    assert [s["device"] for s in dl["subgraphs"]] == ["hexagon", "hexagon"]
    assert dl["fallbacks"] == [{"task": "soft", "op": "Softsign", "device": "hexagon",
                                "reason": "Softsign is not in the qnn-htp list"}]
    assert dl["subgraphs"][1]["tasks"] == ["conv2"]  # conv2 with relu2 fused into it
    assert d["makespan"] == max(t["end"] for t in d["tasks"])


def test_delegate_needs_an_accelerator(tmp_path, capsys):
    prog = tmp_path / "g.tg"
    prog.write_text(PROGRAM)
    assert main(["compile", str(prog), "--platform", "workstation", "--delegate", "greedy", "-q"]) == 2
    assert "no npu or dla device" in capsys.readouterr().err


# -- the optional oracle: ONNX Runtime's QNN execution provider ----------------------------------------

def _normalised(onnx, src, dst):
    """``src`` less its Dropout and Identity nodes (aliases mapper's importer drops), so that both
    sides see the same nodes."""
    m = onnx.load(str(src))
    outputs = {o.name for o in m.graph.output}
    nodes, alias = [], {}
    for n in m.graph.node:
        n.input[:] = [alias.get(i, i) for i in n.input]
        if n.op_type in ("Dropout", "Identity") and n.output[0] not in outputs:
            alias[n.output[0]] = n.input[0]
        else:
            nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    onnx.save(m, str(dst))


def _qnn_partitions(ort, onnx, model, ctx):
    """The QNN EP's HTP partitions of ``model``, prepared offline (a context model, graph
    optimisations off): its EPContext node count and the names of the nodes left to the CPU."""
    import onnxruntime_qnn

    if "QNNExecutionProvider" not in {d.ep_name for d in ort.get_ep_devices()}:
        ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("ep.context_enable", "1")
    options.add_session_config_entry("ep.context_file_path", str(ctx))
    # HTP v75 and SoC model 57: the Snapdragon 8 Gen 3 (SM8650), prepared on this host
    options.add_provider_for_devices(devices, {"backend_path": onnxruntime_qnn.get_qnn_htp_path(),
                                               "htp_arch": "75", "soc_model": "57"})
    ort.InferenceSession(str(model), sess_options=options)
    nodes = onnx.load(str(ctx), load_external_data=False).graph.node
    # ConstantOfShape nodes (the light models' weights) stay on the CPU; mapper folds them into constants
    left = {n.name for n in nodes if n.op_type not in ("EPContext", "ConstantOfShape")}
    return sum(1 for n in nodes if n.op_type == "EPContext"), left


def test_inception_v2_partitions_as_onnxruntime_qnn_does(tmp_path):
    """Without the wheel: Inception v2 under greedy gives the 29 HTP partitions and 56 CPU nodes
    (its BatchNormalizations) that the onnxruntime-qnn oracle below reports; mapper's earlier rule
    (a task joins a run only through a predecessor in it) counted 82 partitions."""
    onnx = pytest.importorskip("onnx")
    model = tmp_path / "light_inception_v2.onnx"
    _normalised(onnx, LIGHT / "light_inception_v2.onnx", model)
    out = tmp_path / "out.json"
    assert main(["compile", str(model), "--platform", "sd8gen3", "--delegate", "greedy", "--json", str(out),
                 "-q"]) == 0
    dl = json.loads(out.read_text())["delegation"]
    assert len(dl["subgraphs"]) == 29 and len(dl["fallbacks"]) == 56
    assert {f["op"] for f in dl["fallbacks"]} == {"BatchNormalization"}


@pytest.mark.parametrize("name", [p.stem for p in sorted(LIGHT.glob("light_*.onnx"))])
def test_greedy_partitions_match_onnxruntime_qnn(name, tmp_path):
    """The onnxruntime-qnn wheel (``pip install onnxruntime-qnn``) prepares the HTP context offline
    on x86-64 Linux; minutes per model on two cores. DenseNet-121's and ShuffleNet's
    BatchNormalizations take ConstantOfShape outputs, which QNN's builder refuses (the list's
    ``static``): both sides leave them (119 and 48) to the CPU."""
    ort = pytest.importorskip("onnxruntime", reason="the QNN oracle needs the onnxruntime-qnn wheel")
    pytest.importorskip("onnxruntime_qnn", reason="the QNN oracle needs the onnxruntime-qnn wheel")
    onnx = pytest.importorskip("onnx")
    model = tmp_path / f"{name}.onnx"
    _normalised(onnx, LIGHT / f"{name}.onnx", model)
    theirs_subgraphs, theirs_fallbacks = _qnn_partitions(ort, onnx, model, tmp_path / f"{name}_ctx.onnx")
    out = tmp_path / "out.json"
    assert main(["compile", str(model), "--platform", "sd8gen3", "--delegate", "greedy", "--json", str(out),
                 "-q"]) == 0
    dl = json.loads(out.read_text())["delegation"]
    assert len(dl["subgraphs"]) == theirs_subgraphs
    assert {f["task"] for f in dl["fallbacks"]} == theirs_fallbacks


def test_probe_partitions_match_onnxruntime_qnn(tmp_path):
    """The probe (an op the QNN EP leaves to the CPU between two convolutions): greedy's two HTP
    partitions and its one fallback node equal the wheel's."""
    ort = pytest.importorskip("onnxruntime", reason="the QNN oracle needs the onnxruntime-qnn wheel")
    pytest.importorskip("onnxruntime_qnn", reason="the QNN oracle needs the onnxruntime-qnn wheel")
    onnx = pytest.importorskip("onnx")
    model = probe_model(tmp_path / "probe.onnx")
    theirs_subgraphs, theirs_fallbacks = _qnn_partitions(ort, onnx, model, tmp_path / "probe_ctx.onnx")
    out = tmp_path / "out.json"
    assert main(["compile", str(model), "--platform", "sd8gen3", "--delegate", "greedy", "--json", str(out),
                 "-q"]) == 0
    dl = json.loads(out.read_text())["delegation"]
    assert (len(dl["subgraphs"]), {f["task"] for f in dl["fallbacks"]}) == (theirs_subgraphs, theirs_fallbacks)
