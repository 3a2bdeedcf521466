"""Huge schedules: the HTML Gantt chart and the Perfetto trace draw busy blocks past a size, and say so;
the JSON report stays complete; DOT and PNG refuse with exit 2 naming the limit."""

from __future__ import annotations

import json
import re

import pytest
from test_report_chrome_trace import check_schema
from test_report_common import random_result

from mapper.cli import main
from mapper.errors import OptionsError
from mapper.report import blocks
from mapper.report.chrome_trace import to_chrome_trace_json
from mapper.report.common import device_stats
from mapper.report.dot import to_dot
from mapper.report.html import render_html
from mapper.report.json_report import to_json

N = 80


@pytest.fixture
def small_limits(monkeypatch):
    monkeypatch.setattr(blocks, "DETAIL_LIMIT", 20)
    monkeypatch.setattr(blocks, "DRAW_LIMIT", 20)


def test_merge_keeps_the_busy_union():
    got = blocks.merge([(0, 0.0, 1.0), (0, 0.5, 2.0), (0, 2.05, 3.0), (0, 5.0, 6.0), (1, 0.0, 1.0)], 0.1)
    assert [(b.lane, b.start, b.end, b.items) for b in got] == [(0, 0.0, 3.0, 3), (0, 5.0, 6.0, 1), (1, 0.0, 1.0, 1)]
    assert got[0].busy == pytest.approx(2.95)


def test_small_schedules_are_drawn_per_task():
    res = random_result(N)
    assert not blocks.aggregated(res.schedule)
    assert 'id="aggregated"' not in render_html(res)
    assert "aggregated" not in json.loads(to_chrome_trace_json(res))["otherData"]


def test_html_aggregates_and_says_so(small_limits):
    res = random_result(N)
    page = render_html(res)
    assert 'id="aggregated"' in page and f"{N:,} tasks (more than 20)" in page
    assert "gantt-task-" not in page
    busy: dict[str, float] = {}
    count: dict[str, int] = {}
    for dev, n, b in re.findall(r'class="block" data-device="([^"]+)" data-tasks="(\d+)" data-busy="([^"]+)"', page):
        busy[dev] = busy.get(dev, 0.0) + float(b)
        count[dev] = count.get(dev, 0) + int(n)
    for d in device_stats(res.schedule):
        assert busy[d.name] == pytest.approx(d.busy, rel=1e-9)
        assert count[d.name] == d.tasks


def test_trace_aggregates_and_says_so(small_limits):
    res = random_result(N)
    obj = json.loads(to_chrome_trace_json(res))
    check_schema(obj)
    agg = obj["otherData"]["aggregated"]
    assert agg["tasks"] == N and agg["limit"] == 20 and "JSON report lists every task" in agg["note"]
    events = obj["traceEvents"]
    assert not [ev for ev in events if ev.get("cat") == "task" or ev["ph"] in "sf"]
    for d in device_stats(res.schedule):
        mine = [ev for ev in events if ev.get("cat") == "block" and ev["pid"] == d.index + 1]
        assert sum(ev["args"]["busy_s"] for ev in mine) == pytest.approx(d.busy, rel=1e-9)
        assert sum(ev["args"]["tasks"] for ev in mine) == d.tasks


def test_json_stays_complete(small_limits):
    res = random_result(N)
    rep = json.loads(to_json(res))
    assert len(rep["tasks"]) == N and {t["name"] for t in rep["tasks"]} == {f"t{i}" for i in range(N)}
    assert len(rep["transfers"]) == len(res.schedule.transfers)


def test_dot_and_png_refuse_past_the_limit(small_limits, tmp_path, capsys):
    with pytest.raises(OptionsError, match="more than the 20 a DOT drawing supports"):
        to_dot(random_result(N))
    graph = tmp_path / "g.tg"
    lines = [f"  task t{i} cost {{ cpu0: 1ms, gpu0: 1ms }}" for i in range(30)]
    graph.write_text("graph g {\n" + "\n".join(lines) + "\n  t0 -> t1\n}\n")
    out = tmp_path / "r.json"
    for flag in ("--dot", "--png"):
        rc = main(["compile", str(graph), "--platform", "workstation", "--mapper", "heft", "-q",
                   "--json", str(out), flag, str(tmp_path / "r.x")])
        assert rc == 2
        err = capsys.readouterr().err
        assert "more than the 20" in err and "Traceback" not in err
        assert not out.exists() and not (tmp_path / "r.x").exists()
