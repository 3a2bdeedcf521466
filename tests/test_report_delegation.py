"""The reports' delegation and deadline views: subgraphs outlined on the Gantt chart, fallbacks
with their reasons, boundary hand-overs, deadline markers (red when missed); every name escaped."""

from __future__ import annotations

from dataclasses import replace

from test_delegation import probe_model
from test_report_common import XSS, small_result

from mapper.cli import main
from mapper.report.html import render_html

PROGRAM = """\
graph g deadline = 8 ms {
  task a cost { cpu: 2 ms, gpu: 1 ms }
  task b cost { cpu: 3 ms, gpu: 2 ms } deadline 1 ms
  task c cost { cpu: 2 ms, gpu: 1 ms }
  a -> b
  a -> c
}
"""


def _compile(tmp_path, capsys, args: list[str]) -> tuple[str, str]:
    html = tmp_path / "r.html"
    capsys.readouterr()
    assert main(["compile", *args, "--html", str(html)]) == 0
    return html.read_text(), capsys.readouterr().out


def test_delegated_onnx_model_shows_subgraphs_fallbacks_and_boundaries(tmp_path, capsys):
    model = str(probe_model(tmp_path / "probe.onnx"))
    page, text = _compile(tmp_path, capsys, [model, "--platform", "sd8gen3", "--delegate", "greedy"])
    assert page.count('<g class="subgraph" data-device="hexagon"') == 2
    assert '<section id="delegation">' in page and 'id="boundary-table"' in page
    assert "<td>soft</td><td>Softsign</td><td>hexagon</td><td>Softsign is not in the qnn-htp list</td>" in page
    assert "200 us" in page  # the invocation cost of each subgraph
    assert "  subgraphs   hexagon: 2, 200 us per invocation" in text
    assert "  fallback    soft (Softsign) not on hexagon: Softsign is not in the qnn-htp list" in text
    assert "  boundaries  kryo_perf -> hexagon: 1 hand-overs" in text
    again, _ = _compile(tmp_path, capsys, [model, "--platform", "sd8gen3", "--delegate", "greedy"])
    assert again == page


def test_deadlines_are_drawn_on_the_gantt_red_when_missed(tmp_path, capsys):
    prog = tmp_path / "g.mdl"
    prog.write_text(PROGRAM)
    page, text = _compile(tmp_path, capsys, [str(prog), "--platform", "cpu-gpu-fpga"])
    assert page.count('<g class="deadline missed" data-task="1"') == 1  # b cannot end by 1 ms
    assert page.count('<g class="deadline" data-task="2"') == 1  # c, the graph's 8 ms, is met
    assert "deadline of b: 1 ms" in page and "missed by" in page
    assert '<section id="deadlines">' in page and "1 of 2 met" in page
    assert '<section id="delegation">' not in page and "delegation" not in text  # no NPU on this platform
    assert 'viewBox="0 0 1160' in page


def test_deadline_and_subgraph_titles_escape_names():
    res = small_result(XSS)
    sched = res.schedule
    graph = sched.cost.graph
    tasks = tuple(replace(t, deadline=1e-4) if t.index == 5 else t for t in graph.tasks)
    cost = replace(sched.cost, graph=replace(graph, tasks=tasks))
    page = render_html(replace(res, schedule=replace(sched, cost=cost)))
    assert XSS not in page
    assert '<g class="deadline missed" data-task="5"' in page
    assert "deadline of &lt;script&gt;" in page
