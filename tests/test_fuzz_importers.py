"""Fuzzing the importers as the DSL and platform files are fuzzed: mutated ONNX protobufs
and dnn-partitioning documents end in a MapperError or in a program that lowers, never in
another exception; what the writers put in generated files (DSL, TOML) reads back as
written, whatever the names; and an ONNX model's external data is looked for only in its
own folder."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from mapper.core.graph import Task, TaskGraph  # noqa: E402
from mapper.errors import MapperError  # noqa: E402
from mapper.frontend.importers.dnn_partitioning import instance_dsl, instance_platform, parse_instance  # noqa: E402
from mapper.frontend.importers.dsl_writer import graph_to_dsl  # noqa: E402
from mapper.frontend.importers.onnx_dsl import import_onnx  # noqa: E402
from mapper.frontend.load import graph_from_text, load_graph  # noqa: E402
from mapper.platform.loader import parse_platform  # noqa: E402

HOSTILE = Path(__file__).resolve().parent / "data" / "hostile"
SEEDS = sorted(p.read_bytes() for p in HOSTILE.glob("onnx_*.onnx") if p.stat().st_size)
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
#: Names a careless or hostile file may carry.
NASTY = ["a\nb", 'q"uote', "back\\slash", "\x1b[2J", "\u202eevil", "tab\there", "graph", "", "x" * 300,
         "}\ngraph h {", "# comment", "[[device]]", "\r\n"]


def _import_and_lower(data: bytes, folder: str) -> None:
    path = os.path.join(folder, "m.onnx")
    with open(path, "wb") as fh:
        fh.write(data)
    try:
        imported = import_onnx(path)
        with imported.blame():
            graph_from_text(imported.text, imported.file)
    except MapperError:
        pass


@st.composite
def mutated_protobuf(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("flip", "flip", "cut", "insert", "duplicate")))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[i] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[i:i + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "duplicate":
            data[i:i] = data[i:i + draw(st.integers(1, 32))]
    return bytes(data)


@SETTINGS
@given(mutated_protobuf())
def test_mutated_onnx_protobufs_end_cleanly(data):
    with tempfile.TemporaryDirectory() as folder:
        _import_and_lower(data, folder)


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])


@st.composite
def mutated_model(draw) -> bytes:
    """A structurally valid model with hostile field values: dims, dtypes, attributes, names."""
    w = numpy_helper.from_array(draw(st.sampled_from([
        __import__("numpy").ones((4, 4), "float32"), __import__("numpy").ones((2,), "int64")])), "w")
    field = draw(st.sampled_from(("dims", "type", "attr", "name", "external", "op")))
    if field == "dims":
        del w.dims[:]
        w.dims.extend(draw(st.lists(st.integers(-2, 2**40), max_size=4)))
    elif field == "type":
        w.data_type = draw(st.integers(0, 30))
    elif field == "external":
        w.data_location = TensorProto.EXTERNAL
        w.ClearField("raw_data")
        for key in draw(st.lists(st.sampled_from(("location", "offset", "length", "bogus")), max_size=3)):
            w.external_data.add(key=key, value=draw(st.sampled_from(["", "-1", "1e9", "w.bin", "/dev/zero",
                                                                      "../w.bin", "a\x00b", "99999999999999999999"])))
    op = draw(st.sampled_from(("MatMul", "Add", "Reshape", "Expand", "Tile", "Split", "Gather", "Conv", "Softmax")))
    if field == "op":
        op = draw(st.sampled_from(("", "Foo", "Relu\n", "If", "Loop", "Constant")))
    attrs = {}
    if field == "attr":
        attrs[draw(st.sampled_from(("axis", "group", "num_outputs", "perm", "to")))] = \
            draw(st.one_of(st.integers(-2**40, 2**40), st.lists(st.integers(-5, 5), min_size=1, max_size=4)))
    name = draw(st.sampled_from(NASTY)) if field == "name" else "n"
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    node = helper.make_node(op, ["x", "w"], ["y"], name=name, **attrs)
    graph = helper.make_graph([node], name, [X], outs, [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", draw(st.sampled_from((7, 13, 17, 99)))),
                             ]).SerializeToString()


@SETTINGS
@given(mutated_model())
def test_models_with_hostile_fields_end_cleanly(data):
    with tempfile.TemporaryDirectory() as folder:
        _import_and_lower(data, folder)


BASE = json.loads((HOSTILE / "dp_no_cpus.json").read_text()) | {"maxCPUs": 1}
JSON_VALUES = [0, -1, 1, 0.5, 1e308, -1e308, 2**63, "1", "", None, True, False, [], {}, [1, 2], {"a": 1}, 4096,
               513, 1e-320]


@st.composite
def mutated_instance(draw) -> str:
    doc = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(("top", "node", "edge")))
        items = doc.get("nodes" if where == "node" else "edges")
        if where != "top" and not (isinstance(items, list) and items):
            continue
        obj = doc if where == "top" else draw(st.sampled_from(items))
        if not isinstance(obj, dict) or not obj:
            continue
        key = draw(st.sampled_from(sorted(obj)))
        if draw(st.booleans()):
            obj[key] = draw(st.sampled_from(JSON_VALUES))
        else:
            del obj[key]
    return json.dumps(doc)


@SETTINGS
@given(mutated_instance())
def test_mutated_dnn_partitioning_documents_end_cleanly(text):
    try:
        inst = parse_instance(text, "fuzz.json")
        graph_from_text(instance_dsl(inst), "fuzz.tg")
        parse_platform(instance_platform(inst), "fuzz.toml")
    except MapperError:
        pass


# -- what the writers write reads back ------------------------------------------------------------

@pytest.mark.parametrize("nasty", NASTY)
def test_graph_writer_headers_and_names_read_back(nasty):
    g = TaskGraph("g", (Task(0, "t", "task", flops=1.0),), ())
    back = graph_from_text(graph_to_dsl(g, [nasty, f"two {nasty} lines"]), "w.tg")
    assert [t.name for t in back.tasks] == ["t"]


@pytest.mark.parametrize("nasty", [n for n in NASTY if "\x00" not in n and "/" not in n and n and len(n) < 200])
def test_onnx_names_and_file_names_read_back(nasty, tmp_path):
    relu = helper.make_node("Relu", ["x"], [nasty + "h"], name=nasty)
    out = helper.make_node("Relu", [nasty + "h"], ["y"], name=nasty + "2")
    graph = helper.make_graph([relu, out], nasty, [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    path = tmp_path / f"m{nasty}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    imported = import_onnx(str(path))
    lines = imported.text.splitlines()
    assert sum(line.startswith("graph ") for line in lines) == 1 and lines[0].startswith("#")
    assert not any(line.lstrip().startswith("#") for line in lines[1:])
    assert len(graph_from_text(imported.text, "m.tg").tasks) == 2


@pytest.mark.parametrize("nasty", [n for n in NASTY if n and "/" not in n and "\x00" not in n and len(n) < 200])
def test_dnn_partitioning_file_and_node_names_read_back(nasty, tmp_path):
    doc = json.loads(json.dumps(BASE))
    doc["nodes"][0]["name"] = nasty
    path = tmp_path / f"i{nasty}.json"
    path.write_text(json.dumps(doc))
    inst = parse_instance(path.read_text(), str(path))
    assert len(graph_from_text(instance_dsl(inst), "i.tg").tasks) == 2
    platform = parse_platform(instance_platform(inst), "i.toml")
    assert len(platform.devices) == 3


# -- external data: the model's folder only ---------------------------------------------------------

def test_external_data_is_never_looked_for_where_the_user_stands(tmp_path, monkeypatch):
    """A relative location resolves beside the model; a file of that name in the current
    directory is never opened (every open is audited)."""
    here, there = tmp_path / "cwd", tmp_path / "models"
    here.mkdir()
    there.mkdir()
    (here / "onnx_ext_data.bin").write_bytes(b"\x00" * 64)  # the planted file
    shutil.copy(HOSTILE / "onnx_ext_missing.onnx", there / "m.onnx")
    opened: list[str] = []
    recording = [True]

    def audit(event: str, args: tuple) -> None:
        if recording[0] and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            opened.append(os.path.abspath(os.fsdecode(args[0])))

    sys.addaudithook(audit)  # hooks cannot be removed: this one records only during this test
    monkeypatch.chdir(here)
    planted = str(here / "onnx_ext_data.bin")
    shutil.copy(HOSTILE / "onnx_ext_ok.onnx", there / "ok.onnx")
    try:
        with pytest.raises(MapperError, match="not in the model's folder"):
            load_graph(there / "m.onnx")
        (there / "onnx_ext_data.bin").write_bytes((HOSTILE / "onnx_ext_data.bin").read_bytes())
        assert len(load_graph(there / "ok.onnx").tasks) == 1
    finally:
        recording[0] = False
    assert planted not in opened
    assert str(there / "onnx_ext_data.bin") in opened  # the model's own data was read


def test_external_data_through_a_symbolic_link_is_refused(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "onnx_ext_data.bin").write_bytes((HOSTILE / "onnx_ext_data.bin").read_bytes())
    (tmp_path / "m").mkdir()
    shutil.copy(HOSTILE / "onnx_ext_ok.onnx", tmp_path / "m" / "ok.onnx")
    (tmp_path / "m" / "onnx_ext_data.bin").symlink_to(tmp_path / "outside" / "onnx_ext_data.bin")
    with pytest.raises(MapperError, match="symbolic link"):
        load_graph(tmp_path / "m" / "ok.onnx")
