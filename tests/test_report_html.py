"""The self-contained HTML report: structure, escaping, sections, atomicity."""

from __future__ import annotations

import dataclasses
import os
import re
from html.parser import HTMLParser

import pytest
from test_report_common import XSS, Rec, random_result, small_result

from mapper.report import html as html_report
from mapper.report.common import critical_path
from mapper.report.html import render_html, write_html

VOID = {"meta", "br", "img", "input", "link", "hr", "rect", "line", "path", "polyline", "circle"}


class Dom(HTMLParser):
    """Elements with their attributes and text, plus a balance check."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[dict] = []
        self.stack: list[dict] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        el = {"tag": tag, "attrs": dict(attrs), "text": "", "parent": self.stack[-1] if self.stack else None}
        self.elements.append(el)
        if tag not in VOID:
            self.stack.append(el)

    def handle_startendtag(self, tag, attrs):
        self.elements.append({"tag": tag, "attrs": dict(attrs), "text": "", "parent": self.stack[-1] if self.stack else None})

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.stack and self.stack[-1]["tag"] == tag, f"unbalanced </{tag}>"
        self.stack.pop()

    def handle_data(self, data):
        for el in self.stack:
            el["text"] += data

    def find(self, tag=None, cls=None, **attrs):
        out = []
        for el in self.elements:
            if tag and el["tag"] != tag:
                continue
            if cls and cls not in el["attrs"].get("class", "").split():
                continue
            if all(el["attrs"].get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(el)
        return out


@pytest.fixture(scope="module")
def page():
    res = small_result(XSS)
    text = render_html(res)
    dom = Dom(text)
    assert not dom.stack, "unclosed elements"
    return res, text, dom


def test_no_network_urls(page):
    _, text, _ = page
    for m in re.finditer(r"https?://", text):
        assert text[max(0, m.start() - 7) : m.start()] == 'xmlns="', text[m.start() - 40 : m.end() + 20]
    assert "<link" not in text and not re.search(r"\ssrc=", text) and "@import" not in text


def test_lanes_one_per_device_and_link(page):
    res, _, dom = page
    lanes = dom.find("g", cls="lane")
    device_lanes = [ln["attrs"]["data-device"] for ln in lanes if "data-device" in ln["attrs"]]
    assert device_lanes == ["cpu0", "gpu0", "fpga0"]
    link_lanes = [ln["attrs"]["data-link"] for ln in dom.find("g", cls="link-lane")]
    assert link_lanes == ["cpu0->gpu0", "gpu0->cpu0", "cpu0->fpga0", "fpga0->cpu0"]
    # the host-relayed transfer (edge 2) is drawn on both links of its route
    drawn = sorted(el["attrs"]["data-link"] for el in dom.find("g", cls="transfer", data_edge="2"))
    assert drawn == ["cpu0->fpga0", "gpu0->cpu0"]
    # every task drawn once in its device's lane
    for s in res.schedule.slots:
        (el,) = dom.find("g", cls="task", data_task=str(s.task))
        assert el["parent"]["attrs"]["data-device"] == res.schedule.cost.platform.devices[s.device].name


def test_task_hover_text(page):
    res, _, dom = page
    (el,) = dom.find("g", cls="task", data_task="1")
    title = [e for e in dom.elements if e["tag"] == "title" and e["parent"] is el][0]["text"]
    assert "qkv" in title and "op: matmul" in title and "FLOPs: 2 G" in title and "bytes: 2.861 MiB" in title
    assert "start 1.41 ms, end 3.41 ms" in title


def test_ops_coloured_stably(page):
    _, _, dom = page
    fills = {}
    for el in dom.find("g", cls="task"):
        rect = [e for e in dom.elements if e["tag"] == "rect" and e["parent"] is el][0]
        fills.setdefault(el["attrs"]["data-op"], set()).add(rect["attrs"]["fill"])
    assert all(len(v) == 1 for v in fills.values())
    assert len({next(iter(v)) for v in fills.values()}) == len(fills)


def test_critical_path_highlighted(page):
    res, _, dom = page
    path = critical_path(res.schedule)
    crit_tasks = sorted(int(e["attrs"]["data-task"]) for e in dom.find("g", cls="critical") if "task" in e["attrs"]["class"])
    assert crit_tasks == sorted(p.index for p in path if p.kind == "task")
    graph_crit = sorted(int(e["attrs"]["data-task"]) for e in dom.find("g", cls="node") if "critical" in e["attrs"]["class"])
    assert graph_crit == crit_tasks
    assert len(dom.find("path", cls="critical-path")) == 1
    assert len(dom.find("li", data_task="0")) == 1
    assert len(dom.find(id="critical-path-list")[0]["text"]) > 0


def test_xss_name_is_escaped_everywhere(page):
    _, text, dom = page
    assert XSS not in text
    assert text.count("<script") == 1  # the page's own
    assert "&lt;script&gt;window.__xss=1;alert(1)&lt;/script&gt;" in text
    assert any(XSS in e["text"] for e in dom.find("title"))
    assert len(dom.find("script")) == 1


def test_attributes_escaped():
    res = small_result('a" onmouseover="window.__xss=1')
    text = render_html(res)
    assert 'onmouseover="' not in text
    dom = Dom(text)
    assert all(not k.startswith("on") for e in dom.elements for k in e["attrs"])


def test_utilisation_and_summary(page):
    res, _, dom = page
    rows = dom.find("tr", cls="util")
    assert [r["attrs"]["data-device"] for r in rows] == ["cpu0", "gpu0", "fpga0"]
    assert "66.1 %" in rows[1]["text"]
    facts = {r["attrs"]["data-key"]: r["text"] for r in dom.find("tr") if "data-key" in r["attrs"]}
    for key in ("graph", "platform", "mapper", "objective", "status", "makespan", "lower bound", "gap"):
        assert key in facts
    assert "7.57 ms" in facts["makespan"] and "heuristic" in facts["status"] and "tri" in facts["platform"]
    # wall-clock figures only on request: without them the page depends only on the input
    assert "solve time" not in facts and "solve time" in render_html(res, timings=True)
    assert render_html(res) == render_html(small_result(XSS))


def test_task_graph_full(page):
    res, _, dom = page
    (svg,) = dom.find("svg", id="task-graph")
    assert svg["attrs"]["data-view"] == "full"
    nodes = dom.find("g", cls="node")
    assert sorted(int(n["attrs"]["data-task"]) for n in nodes) == list(range(6))
    edges = dom.find("path", cls="edge")
    assert len(edges) == len(res.schedule.cost.graph.edges)
    assert len([e for e in edges if "xfer" in e["attrs"]["class"].split()]) == len(res.schedule.transfers)
    # nodes coloured by device
    fill = {}
    for n in nodes:
        rect = [e for e in dom.elements if e["tag"] == "rect" and e["parent"] is n][0]
        fill.setdefault(n["attrs"]["data-device"], set()).add(rect["attrs"]["fill"])
    assert all(len(v) == 1 for v in fill.values()) and len(fill) == 3


def test_task_graph_condensed_large():
    res = random_result(330, seed=4)
    dom = Dom(render_html(res))
    (svg,) = dom.find("svg", id="task-graph")
    assert svg["attrs"]["data-view"] == "condensed"
    groups = dom.find("g", cls="group")
    assert sum(int(g["attrs"]["data-count"]) for g in groups) == 330
    # the Gantt chart still draws every task
    assert len(dom.find("g", cls="task")) == 330


def test_compare_table():
    res = small_result()
    other = dataclasses.replace(small_result(), mapper="greedy<b>")
    faster = random_result(5, seed=1)
    dom = Dom(render_html(res, compare=[other, faster]))
    rows = dom.find("tr", cls="cmp")
    assert [r["attrs"]["data-mapper"] for r in rows] == ["heft", "greedy<b>", "heft"]
    assert "current" in rows[0]["attrs"]["class"]
    assert "best" in rows[2]["attrs"]["class"].split()
    assert "1.000" in rows[2]["text"]


def test_run_section():
    res = small_result()
    slots = res.schedule.slots
    run = [Rec(s.task, s.device, s.start, s.end, 2 * (s.end - s.start) if s.device == 0 else None,
               None if s.device == 0 else s.end - s.start) for s in slots]  # fmt: skip
    dom = Dom(render_html(res, run=run))
    rows = dom.find("tr", cls="run")
    assert [int(r["attrs"]["data-task"]) for r in rows] == list(range(6))
    assert "2.00" in rows[0]["text"] and "1.00" in rows[1]["text"]

    class Trace:  # an execution trace carries its records
        records = run

    assert Dom(render_html(res, run=Trace())).find("tr", cls="run")
    assert not Dom(render_html(res)).find("section", id="run")


def test_deterministic(tmp_path):
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    write_html(random_result(50, seed=2), a)
    write_html(random_result(50, seed=2), b)
    assert a.read_bytes() == b.read_bytes()


def test_failure_mid_render_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "r.html"

    def boom(*a, **k):
        raise RuntimeError("render failed")

    monkeypatch.setattr(html_report, "graph_svg", boom)
    with pytest.raises(RuntimeError):
        write_html(small_result(), out)
    assert os.listdir(tmp_path) == []
    out.write_text("old")
    with pytest.raises(RuntimeError):
        write_html(small_result(), out)
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["r.html"]


def test_run_accepts_execution_trace_records():
    """The execution engine's TaskRecord satisfies the RunRecord protocol."""
    from mapper.report.common import RunRecord
    from mapper.run.trace import TaskRecord

    res = small_result()
    g, devs = res.schedule.cost.graph, res.schedule.cost.platform.devices
    records = []
    for s in res.schedule.slots:
        on_cpu = devs[s.device].kind == "cpu"
        d = s.end - s.start
        records.append(
            TaskRecord(
                task=s.task, name=g.tasks[s.task].name, op=g.tasks[s.task].op, device=s.device,
                device_name=devs[s.device].name, device_kind=devs[s.device].kind,
                predicted_start=s.start, predicted_end=s.end, predicted=d,
                measured=1.5 * d if on_cpu else 40 * d, modelled=None if on_cpu else d,
                error=(d - 1.5 * d) / (1.5 * d) if on_cpu else None,
            )
        )  # fmt: skip
    assert all(isinstance(r, RunRecord) for r in records)
    rows = Dom(render_html(res, run=records)).find("tr", cls="run")
    ratios = {int(r["attrs"]["data-task"]): r["text"] for r in rows}
    assert "1.50" in ratios[0] and "1.00" in ratios[1]  # cpu: measured; gpu: modelled
