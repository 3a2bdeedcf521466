"""Writes the ONNX and dnn-partitioning files of this corpus (run it from anywhere to remake them:
``python tests/data/hostile/make_files.py``); cases.toml says what each must do."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
ANY_Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)


def model(nodes, inits=(), inputs=(X,), outputs=(Y,), opset=17):
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def matmul_with_external(location: str, rows: int = 4, cols: int = 4, offset: int | None = None,
                         length: int | None = None):
    """x @ w, w's data stored at ``location`` (relative to the model)."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[rows, cols], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            w.external_data.add(key=key, value=str(value))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, cols])
    return model([helper.make_node("MatMul", ["x", "w"], ["y"])], [w], outputs=[out])


def save(m, name: str) -> None:
    onnx.save(m, str(HERE / name))


def onnx_files() -> None:
    # external data: only inside the model's folder, regular, no links, long enough
    save(matmul_with_external("/etc/passwd"), "onnx_ext_absolute.onnx")
    save(matmul_with_external("/proc/self/environ"), "onnx_ext_proc.onnx")
    save(matmul_with_external("../hostile/onnx_ext_data.bin"), "onnx_ext_dotdot.onnx")
    save(matmul_with_external("fifo"), "onnx_ext_cwd_fifo.onnx")  # a FIFO where the user stands: never opened
    save(matmul_with_external("missing.bin"), "onnx_ext_missing.onnx")
    save(matmul_with_external("missing.bin", 4, 1024), "onnx_ext_missing_weights.onnx")  # not needed to map
    save(matmul_with_external("onnx_ext_data.bin"), "onnx_ext_ok.onnx")
    save(matmul_with_external("onnx_ext_data.bin", offset=32), "onnx_ext_past_end.onnx")
    save(matmul_with_external("onnx_ext_data.bin", length=8), "onnx_ext_wrong_length.onnx")
    (HERE / "onnx_ext_data.bin").write_bytes(np.arange(16, dtype=np.float32).tobytes())
    # structure: data against shapes, nothing to map, duplicated outputs, odd names
    short = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    short.raw_data = short.raw_data[:10]
    save(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [short]), "onnx_short_raw.onnx")
    huge = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 2**28])
    save(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [huge], outputs=[ANY_Y]), "onnx_huge_declared.onnx")
    save(model([], inputs=(), outputs=()), "onnx_empty_graph.onnx")
    save(model([], inputs=(X,), outputs=()), "onnx_only_input.onnx")
    const = numpy_helper.from_array(np.ones((2, 4), np.float32))
    save(model([helper.make_node("Constant", [], ["y"], value=const)], inputs=()), "onnx_only_constant.onnx")
    save(model([helper.make_node("Identity", ["x"], ["y"])]), "onnx_identity_only.onnx")
    save(model([helper.make_node("Relu", ["x"], ["y"])], outputs=(Y, Y)), "onnx_duplicate_output.onnx")
    save(model([helper.make_node("Relu", ["x"], ["y"])], outputs=(Y, X)), "onnx_output_is_input.onnx")
    crafted = helper.make_node('Relu", kind = "x")\n  evil = matmul(x, x)\n#', ["x"], ["y"])
    save(model([crafted]), "onnx_crafted_op_type.onnx")
    parts = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 1]) for n in ("a1", "c1")]
    split = helper.make_node("Split", ["x"], ["a", "b", "c", "d"], axis=1, num_outputs=4)
    relus = [helper.make_node("Relu", [i], [o]) for i, o in (("a", "a1"), ("c", "c1"))]
    save(model([split, *relus], outputs=parts, opset=18), "onnx_split_unused_middle.onnx")
    image = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    kernel = numpy_helper.from_array(np.ones((4, 4, 3, 3), np.float32), "k")
    save(model([helper.make_node("Conv", ["x", "k"], ["y"], group=0)], [kernel], inputs=(image,),
               outputs=[ANY_Y]), "onnx_conv_group_0.onnx")
    scalars = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("lo", 0), ("hi", 10**12), ("one", 1))]
    rng = [helper.make_node("Range", ["lo", "hi", "one"], ["r"]), helper.make_node("Cast", ["r"], ["f"], to=1),
           helper.make_node("Add", ["x", "f"], ["y"])]
    save(model(rng, scalars, outputs=[ANY_Y]), "onnx_huge_range.onnx")
    (HERE / "onnx_zero_bytes.onnx").write_bytes(b"")
    (HERE / "onnx_truncated.onnx").write_bytes(model([helper.make_node("Relu", ["x"], ["y"])])
                                               .SerializeToString()[:-7])


DNN = {"maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 1,
       "nodes": [{"id": 1, "supportedOnFpga": 0, "cpuLatency": 1, "fpgaLatency": 1, "isBackwardNode": 0, "size": 1},
                 {"id": 2, "supportedOnFpga": 1, "cpuLatency": 1, "fpgaLatency": 1, "isBackwardNode": 0, "size": 1}],
       "edges": [{"sourceId": 1, "destId": 2, "cost": 1}]}


def dnn_files() -> None:
    def write(name: str, change) -> None:
        doc = json.loads(json.dumps(DNN))
        change(doc)
        (HERE / name).write_text(json.dumps(doc) + "\n")

    write("dp_no_cpus.json", lambda d: d.update(maxCPUs=0))
    write("dp_zero_memory.json", lambda d: d.update(maxSizePerFPGA=0))
    write("dp_huge_memory.json", lambda d: d.update(maxSizePerFPGA=1e308))
    write("dp_thousands_of_devices.json", lambda d: d.update(maxFPGAs=4096, maxCPUs=4096))
    write("dp_huge_latency.json", lambda d: d["nodes"][0].update(cpuLatency=1e308))
    write("dp_huge_size.json", lambda d: d["nodes"][1].update(size=1e308))
    write("dp_huge_edge_cost.json", lambda d: d["edges"][0].update(cost=1e300))


def round4b_files() -> None:
    """Round 4, part 2: a Constant whose data is an external file, a segmented initializer, an integer
    mode input (for --input-value 1e300), an instance with no CPU and a node no accelerator holds."""
    c = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[2, 4], data_location=TensorProto.EXTERNAL)
    c.external_data.add(key="location", value="r4b_secret.bin")  # where the user stands: never opened
    save(model([helper.make_node("Constant", [], ["c"], value=c), helper.make_node("Add", ["x", "c"], ["y"])]),
         "onnx_r4b_const_external.onnx")
    seg = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    seg.segment.begin, seg.segment.end = 0, 1
    save(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [seg]), "onnx_r4b_segment.onnx")
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    save(model([helper.make_node("Cast", ["sr"], ["s"], to=1), helper.make_node("Add", ["x", "s"], ["y"])],
               inputs=(X, sr)), "onnx_r4b_int_mode.onnx")
    doc = json.loads(json.dumps(DNN))
    doc.update(maxCPUs=0, maxSizePerFPGA=10.0)
    doc["nodes"][0].update(supportedOnFpga=1, size=100)
    (HERE / "dp_r4b_too_big_no_cpus.json").write_text(json.dumps(doc) + "\n")


if __name__ == "__main__":
    onnx_files()
    dnn_files()
    round4b_files()
