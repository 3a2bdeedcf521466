"""WfCommons import: WfFormat reading, work model, DSL round trip, errors, CLI,
and every committed workflow compiled with every mapper on two platforms."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.costing.cost import build_cost_table
from mapper.costing.efficiency import EFF_MEMORY
from mapper.engine.validate import validate
from mapper.errors import InputError, OptionsError
from mapper.frontend.importers import RelatedNetwork, graph_to_dsl, import_wfcommons, related_instance
from mapper.frontend.importers.dsl_writer import KEYWORDS, dsl_names, is_name
from mapper.frontend.importers.wfcommons import ReferenceMachine, parse_wfformat, read_wfformat, workflow_graph
from mapper.frontend.load import graph_from_text, load_graph
from mapper.mapping import MAPPERS
from mapper.mapping.base import MapOptions
from mapper.pipeline import compile_graph
from mapper.platform.loader import load_platform

DATA = Path(__file__).parent / "data" / "wfcommons"
FILES = sorted(DATA.glob("*.json"))
RECIPES = ("montage", "epigenomics", "cycles", "1000genome", "blast", "seismology", "soykb", "srasearch")


def _doc(tasks, files=(), runs=None, schema="1.6"):
    """A WfFormat 1.6 document: tasks as (id, parents, inputs, outputs); runs id -> record."""
    runs = runs or {}
    return {
        "name": "tiny-wf", "schemaVersion": schema,
        "workflow": {
            "specification": {
                "tasks": [{"name": tid.split("_")[0], "id": tid, "parents": list(par), "children": [],
                           "inputFiles": list(ins), "outputFiles": list(outs)} for tid, par, ins, outs in tasks],
                "files": [{"id": f, "sizeInBytes": s} for f, s in files],
            },
            "execution": {"tasks": [{"id": tid, "runtimeInSeconds": 10.0, "coreCount": 1, **runs.get(tid, {})}
                                    for tid, *_ in tasks]},
        },
    }


def _strip(g):
    return dataclasses.replace(g, tasks=tuple(dataclasses.replace(t, span=None) for t in g.tasks))


def test_committed_data_covers_every_recipe():
    labels = {f.name.rsplit("-", 1)[0] for f in FILES}
    assert labels == set(RECIPES)
    assert sum(f.stat().st_size for f in FILES) < 2 * 2**20


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_import_matches_the_json(path):
    doc = json.loads(path.read_text())
    spec = doc["workflow"]["specification"]
    g = import_wfcommons(path)
    ids = [t["id"] for t in spec["tasks"]]
    assert [t.name for t in g.tasks] == list(dsl_names(ids))
    pairs = {(p, t["id"]) for t in spec["tasks"] for p in t["parents"]}
    pairs |= {(t["id"], c) for t in spec["tasks"] for c in t["children"]}
    assert {(ids[e.src], ids[e.dst]) for e in g.edges} == pairs
    sizes = {f["id"]: f["sizeInBytes"] for f in spec["files"]}
    by_id = {t["id"]: t for t in spec["tasks"]}
    for e in g.edges:
        src, dst = by_id[ids[e.src]], by_id[ids[e.dst]]
        assert e.bytes == sum(sizes[f] for f in set(src["outputFiles"]) & set(dst["inputFiles"]))
    assert sum(e.bytes for e in g.edges) > 0
    for t in g.tasks:
        assert t.bytes_read == sum(sizes[f] for f in by_id[ids[t.index]]["inputFiles"])
        assert t.bytes_written == sum(sizes[f] for f in by_id[ids[t.index]]["outputFiles"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_cost_model_reproduces_the_runtime_on_the_reference_machine(path):
    ref = ReferenceMachine()
    wf = read_wfformat(path)
    g = workflow_graph(wf, ref)
    cost = build_cost_table(g, ref.platform(1))
    exact = 0
    for t, rec in zip(g.tasks, wf.tasks):
        assert rec.cores == 1
        t_mem = t.bytes / (EFF_MEMORY["cpu"] * ref.mem_bandwidth_gbs * 1e9)
        assert cost.time[t.index][0] == pytest.approx(max(rec.runtime, t_mem), rel=1e-12, abs=1e-15)
        exact += rec.runtime >= t_mem
    assert exact >= 0.9 * len(g.tasks)


def test_multicore_record_with_avgcpu_gives_amdahl_fraction_and_runtime():
    doc = _doc([("a_1", (), (), ("f",)), ("b_2", ("a_1",), ("f",), ())], [("f", 1000)],
               {"a_1": {"coreCount": 4, "avgCPU": 300.0, "runtimeInSeconds": 12.5},
                "b_2": {"coreCount": 8, "avgCPU": 80.0}})
    wf = parse_wfformat(json.dumps(doc), "x.json")
    ref = ReferenceMachine(default_parallel=0.5)
    g = workflow_graph(wf, ref)
    assert g.tasks[0].parallel == pytest.approx((1 - 1 / 3) / (1 - 1 / 4))
    assert g.tasks[1].parallel == 0.0  # under one busy core: serial
    assert build_cost_table(g, ref.platform(4)).time[0][0] == pytest.approx(12.5, rel=1e-12)
    assert build_cost_table(g, ref.platform(8)).time[1][0] == pytest.approx(10.0, rel=1e-12)
    # one core, no avgCPU: the default fraction
    g1 = workflow_graph(parse_wfformat(json.dumps(_doc([("c", (), (), ())])), "y.json"), ref)
    assert g1.tasks[0].parallel == 0.5
    assert g1.tasks[0].flops == 10.0 * ref.gflops_per_core * 1e9


def test_edge_bytes_count_only_files_the_parent_writes_and_the_child_reads():
    doc = _doc([("a", (), ("in",), ("x", "y")), ("b", (), (), ("z",)), ("c", ("a", "b"), ("x", "z", "in"), ())],
               [("in", 5), ("x", 100), ("y", 7), ("z", 30)])
    g = workflow_graph(parse_wfformat(json.dumps(doc)))
    assert [(g.tasks[e.src].name, g.tasks[e.dst].name, e.bytes) for e in g.edges] == [("a", "c", 100.0),
                                                                                     ("b", "c", 30.0)]


def test_schema_14_layout():
    doc = {"name": "old", "schemaVersion": "1.4", "workflow": {"tasks": [
        {"name": "split_1", "type": "compute", "parents": [], "runtime": 3.0, "cores": 1,
         "files": [{"link": "input", "name": "raw", "size": 40}, {"link": "output", "name": "p1", "size": 8}]},
        {"name": "work_2", "parents": ["split_1"], "runtimeInSeconds": 6.0,
         "files": [{"link": "input", "name": "p1", "size": 8}]},
    ]}}
    g = workflow_graph(parse_wfformat(json.dumps(doc)))
    assert [t.name for t in g.tasks] == ["split_1", "work_2"]
    assert [(e.src, e.dst, e.bytes) for e in g.edges] == [(0, 1, 8.0)]
    assert g.tasks[1].flops == 6.0 * 7.0e9


def test_names_are_sanitised_uniquely_and_deterministically():
    raws = ["a-b", "a_b", "a.b", "1st", "task", "input", "x y", "", "a_b_2"]
    names = dsl_names(raws)
    assert names == ("a_b_3", "a_b", "a_b_4", "t1st", "task_", "input_", "x_y", "t", "a_b_2")
    assert len(set(names)) == len(names) and all(is_name(n) for n in names)
    assert dsl_names(raws) == names
    doc = _doc([(r, (), (), ()) for r in ["1-x", "for", "1_x"]])
    doc["name"] = "my workflow!"
    g = workflow_graph(parse_wfformat(json.dumps(doc)))
    assert g.name == "my_workflow_" and [t.name for t in g.tasks] == ["t1_x", "for_", "t1_x_2"]
    assert _strip(graph_from_text(graph_to_dsl(g))) == g


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_dsl_round_trip(path):
    g = import_wfcommons(path, ReferenceMachine(default_parallel=0.75))
    text = graph_to_dsl(g, ["header"])
    assert text.startswith("# header\ngraph ")
    assert _strip(graph_from_text(text, "rt.tg")) == g


def test_writer_refuses_what_the_dsl_cannot_say():
    g = graph_from_text("graph g { input x : f32[4]\n y = relu(x) }")
    with pytest.raises(OptionsError, match="only kernel-less"):
        graph_to_dsl(g)
    both = graph_from_text("graph g { task a cost { p1: 1 }\n task b cost { p1: 2 }\n a -> b comm 3 }")
    edge = dataclasses.replace(both.edges[0], bytes=5.0)
    with pytest.raises(OptionsError, match="both comm and bytes"):
        graph_to_dsl(dataclasses.replace(both, edges=(edge,)))
    assert _strip(graph_from_text(graph_to_dsl(both))) == _strip(both)
    assert not any(is_name(k) for k in KEYWORDS)


BAD = [
    ("{\n  \"workflow\": [1,\n}", "invalid JSON", None),
    ("[]", "expected an object", "$"),
    ("{}", "missing key 'workflow'", "$.workflow"),
    ('{"workflow": {}}', "expected workflow.specification", "$.workflow"),
]


@pytest.mark.parametrize("text,msg,where", BAD)
def test_bad_documents(text, msg, where):
    with pytest.raises(InputError, match=msg) as info:
        parse_wfformat(text, "w.json")
    if where is None:
        assert info.value.span is not None and (info.value.span.file, info.value.span.line) == ("w.json", 3)
    else:
        assert info.value.obj == f"w.json: {where}"


def _break(mutate):
    doc = _doc([("a", (), (), ("f",)), ("b", ("a",), ("f",), ())], [("f", 10)])
    mutate(doc)
    return json.dumps(doc)


SPEC = "$.workflow.specification"
BROKEN = [
    (lambda d: d["workflow"]["specification"]["tasks"][1]["parents"].append("zz"), "unknown task 'zz'",
     f"{SPEC}.tasks[1].parents[1]"),
    (lambda d: d["workflow"]["specification"]["tasks"][0]["parents"].append("b"), "cycle: .*a -> b -> a|b -> a -> b",
     None),
    (lambda d: d["workflow"]["specification"]["tasks"][0]["children"].append("a"), "depends on itself",
     f"{SPEC}.tasks[0].children[0]"),
    (lambda d: d["workflow"]["specification"]["tasks"][1].update(id="a"), "duplicate task id 'a'",
     f"{SPEC}.tasks[1].id"),
    (lambda d: d["workflow"]["specification"]["tasks"][1]["inputFiles"].append("g"), "unknown file 'g'",
     f"{SPEC}.tasks[1].inputFiles[1]"),
    (lambda d: d["workflow"]["specification"]["files"][0].pop("sizeInBytes"), "missing key 'sizeInBytes'",
     f"{SPEC}.files[0].sizeInBytes"),
    (lambda d: d["workflow"]["execution"]["tasks"].pop(), "task 'b' has no record", f"{SPEC}.tasks[1].id"),
    (lambda d: d["workflow"]["execution"]["tasks"][0].update(runtimeInSeconds=-1),
     "finite number >= 0", "$.workflow.execution.tasks[0].runtimeInSeconds"),
    (lambda d: d["workflow"]["execution"]["tasks"][0].update(runtimeInSeconds="5"),
     "expected a number", "$.workflow.execution.tasks[0].runtimeInSeconds"),
    (lambda d: d["workflow"]["execution"]["tasks"][0].update(coreCount=0), "core count >= 1",
     "$.workflow.execution.tasks[0].coreCount"),
    (lambda d: d["workflow"]["execution"]["tasks"].append({"id": "q", "runtimeInSeconds": 1}),
     "unknown task 'q'", "$.workflow.execution.tasks"),
    (lambda d: d["workflow"]["specification"]["tasks"][0].update(parents="a"), "expected an array",
     f"{SPEC}.tasks[0].parents"),
]


@pytest.mark.parametrize("mutate,msg,where", BROKEN, ids=range(len(BROKEN)))
def test_broken_workflows_name_file_and_json_path(mutate, msg, where):
    with pytest.raises(InputError, match=msg) as info:
        parse_wfformat(_break(mutate), "w.json")
    assert info.value.obj.startswith("w.json: $.workflow")
    if where is not None:
        assert info.value.obj == f"w.json: {where}"


def test_cli_import_then_check(tmp_path, capsys):
    src = DATA / "montage-58.json"
    out = tmp_path / "m.tg"
    assert main(["import", "wfcommons", str(src), "-o", str(out)]) == 0
    assert "58 tasks" in capsys.readouterr().out
    assert _strip(load_graph(out)) == import_wfcommons(src)
    assert main(["import", "wfcommons", str(src), "--parallel", "0.5"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# montage-58.json: WfCommons instance") and " parallel 0.5" in text
    bad = tmp_path / "bad.json"
    bad.write_text(_break(lambda d: d["workflow"]["specification"]["tasks"][1]["parents"].append("zz")))
    assert main(["import", "wfcommons", str(bad)]) == 2
    assert f"{bad}: {SPEC}.tasks[1].parents[1]: error: unknown task 'zz'" in capsys.readouterr().err
    assert main(["import", "wfcommons", str(src), "--parallel", "1.5"]) == 2
    assert "--parallel: error" in capsys.readouterr().err
    assert main(["import", "wfcommons", str(tmp_path / "none.json")]) == 2


def test_related_instance_times_and_routes():
    net = RelatedNetwork(("p1", "p2", "p3"), (1.0, 2.0, 4.0),
                         ((0, 5e8, 0), (5e8, 0, 2e9), (0, 2e9, 0)))
    g, plat = related_instance("r", ("a", "b"), (8.0, 2.0), [(0, 1, 1e9)], net)
    cost = build_cost_table(g, plat)
    assert cost.time == ((8.0, 4.0, 2.0), (2.0, 1.0, 0.5))
    assert cost.comm(0, 0, 1) == pytest.approx(2.0) and cost.comm(0, 2, 1) == pytest.approx(0.5)
    assert cost.comm(0, 0, 2) == math.inf and cost.comm(0, 1, 1) == 0.0
    with pytest.raises(InputError, match="symmetric"):
        RelatedNetwork(("p1", "p2"), (1.0, 1.0), ((0, 1.0), (2.0, 0)))
    with pytest.raises(InputError, match="speed"):
        RelatedNetwork.uniform((1.0, 0.0), 1.0)


def _abstract(path):
    """The workflow on three related processors p1 p2 p3 (speeds 1, 2, 4; 1 GB/s links)."""
    wf = read_wfformat(path)
    g = workflow_graph(wf)
    return related_instance(g.name, [t.name for t in g.tasks], [t.runtime for t in wf.tasks],
                            [(e.src, e.dst, e.bytes) for e in g.edges], RelatedNetwork.uniform((1.0, 2.0, 4.0), 1e9))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("where", ["abstract3", "cpu-gpu-fpga"])
def test_every_workflow_compiles_with_every_mapper(path, where):
    if where == "abstract3":
        graph, plat = _abstract(path)
    else:
        graph, plat = import_wfcommons(path, ReferenceMachine(default_parallel=0.9)), load_platform(where)
    makespans = {}
    for name in MAPPERS:
        if name.startswith("delegate-"):
            continue  # the delegation mappers need an NPU or a DLA (tests/test_delegation.py)
        res = compile_graph(graph, plat, mapper=name, options=MapOptions(time_limit=0.3)).result
        assert validate(res.schedule) == []
        assert len(res.schedule.slots) == len(graph.tasks)
        makespans[name] = res.objective_value
    assert makespans["milp"] <= min(makespans["heft"], makespans["cpop"], makespans["peft"]) * (1 + 1e-9)
    assert all(v > 0 and math.isfinite(v) for v in makespans.values())


def test_cli_import_then_compile_end_to_end(tmp_path, capsys):
    tg, out = tmp_path / "cycles.tg", tmp_path / "cycles.json"
    assert main(["import", "wfcommons", str(DATA / "cycles-67.json"), "-o", str(tg)]) == 0
    assert main(["compile", str(tg), "--platform", "cpu-gpu-fpga", "--mapper", "heft", "--json", str(out), "-q"]) == 0
    capsys.readouterr()
    report = json.loads(out.read_text())
    expected = compile_graph(import_wfcommons(DATA / "cycles-67.json"), "cpu-gpu-fpga", mapper="heft").result
    assert report["mapper"] == "heft" and len(report["tasks"]) == 67
    assert report["makespan"] == pytest.approx(expected.objective_value, rel=1e-12)
