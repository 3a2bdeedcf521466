"""Reports on real pipelines: DSL examples, shipped platforms, real mappers."""

from __future__ import annotations

import json
import math
import os

import pytest
from test_report_chrome_trace import check_schema
from test_report_dot import parse as parse_dot
from test_report_html import Dom

from mapper.costing.cost import build_cost_table
from mapper.engine.schedule import ScheduleOptions
from mapper.frontend.load import load_graph
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.platform.loader import load_platform
from mapper.report.chrome_trace import to_chrome_trace_json
from mapper.report.common import critical_path
from mapper.report.dot import to_dot
from mapper.report.html import render_html
from mapper.report.json_report import to_json, to_json_dict
from mapper.report.text import schedule_table, summary_table

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


def mapped(example: str, platform: str, mapper: str = "heft", **schedule):
    graph = load_graph(os.path.join(EXAMPLES, f"{example}.tg"))
    cost = build_cost_table(graph, load_platform(platform))
    return get_mapper(mapper).map(cost, MapOptions(schedule=ScheduleOptions(**schedule)))


def _span(sched, step):
    if step.kind == "task":
        s = sched.slots[step.index]
        return s.start, s.end
    tr = next(t for t in sched.transfers if t.edge == step.index)
    return tr.start, tr.end


def test_heft_paper_reports():
    res = mapped("heft_paper", "heft3")
    d = to_json_dict(res)
    assert d["makespan"] == 80.0 and d["mapper"] == "heft" and d["status"] == "heuristic"
    assert [t["name"] for t in d["tasks"]] == [f"n{i}" for i in range(1, 11)]
    assert [t["device"] for t in d["tasks"]] == ["p3", "p1", "p3", "p2", "p3", "p2", "p3", "p1", "p2", "p2"]
    assert len(d["transfers"]) == 9 and all(t["from"] != t["to"] for t in d["transfers"])
    g = res.schedule.cost.graph
    names = [g.tasks[p.index].name if p.kind == "task" else "->" for p in critical_path(res.schedule)]
    assert names == ["n1", "->", "n4", "n6", "->", "n8", "->", "n10"]
    assert "makespan     80 s" in summary_table(res)
    assert schedule_table(res).splitlines()[2].split()[:4] == ["n1", "p3", "0", "s"]


CASES = [
    ("jacobi2d", "cpu-gpu-fpga", "heft", {"contention": True}),
    ("jacobi2d", "cpu-gpu-fpga", "cpop", {}),
    ("resnet50", "cpu-gpu-fpga", "greedy", {}),
    ("cg", "cpu-gpu-fpga", "greedy", {"contention": True}),
]


@pytest.mark.parametrize("example,platform,mapper,opts", CASES)
def test_reports_consistent(example, platform, mapper, opts):
    res = mapped(example, platform, mapper, **opts)
    sched = res.schedule
    devs = sched.cost.platform.devices
    # critical path: contiguous chain from time 0 to the makespan
    path = critical_path(sched)
    assert _span(sched, path[0])[0] == 0.0
    assert _span(sched, path[-1])[1] == sched.makespan
    for a, b in zip(path, path[1:]):
        assert math.isclose(_span(sched, a)[1], _span(sched, b)[0], rel_tol=1e-9, abs_tol=1e-15)
    # JSON agrees with the schedule
    d = json.loads(to_json(res))
    for t, s in zip(d["tasks"], sched.slots):
        assert t["device"] == devs[s.device].name and math.isclose(t["end"], s.end, rel_tol=1e-11)
    assert sum(x["tasks"] for x in d["devices"]) == len(sched.slots)
    # HTML: one lane per device; each transfer drawn once per hop (contention) or link
    dom = Dom(render_html(res))
    assert [ln["attrs"]["data-device"] for ln in dom.find("g", cls="lane") if "data-device" in ln["attrs"]] == [
        d.name for d in devs
    ]
    pieces = sum(len(tr.hops) or len(tr.links) or 1 for tr in sched.transfers)
    assert len(dom.find("g", cls="transfer")) == pieces
    if opts.get("contention"):
        for tr in sched.transfers:
            for _link, start, end in tr.hops:
                assert start >= tr.start - 1e-15 and end <= tr.end + 1e-15
    # Chrome trace and DOT
    check_schema(json.loads(to_chrome_trace_json(res)))
    assert len([k for k in parse_dot(to_dot(res))["nodes"] if k.startswith("t")]) == len(sched.slots)
