"""The HTML report: one self-contained page (inline CSS, JS and SVG).

Sections: summary, the plan kept (``plan``), Gantt chart with the critical path (delegated subgraphs
and deadlines drawn on it), delegation and deadlines (when there are any), device utilisation,
critical path, task graph, mapper comparison (``compare``) and predicted
against measured times (``run``). Nothing is fetched from the network, and
every user-provided string is HTML-escaped. See docs/reports.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from mapper.core.files import atomic_write
from mapper.core.units import fmt_bytes, fmt_count, fmt_objective, fmt_pct, fmt_time
from mapper.engine.memory import peak_memory
from mapper.mapping.base import MapResult
from mapper.report import blocks
from mapper.report.common import PathStep, RunRow, critical_path, device_colours, device_stats, resolve_run
from mapper.report.delegation_html import deadline_section, delegation_section
from mapper.report.svg_gantt import esc, gantt_svg, op_legend
from mapper.report.svg_graph import graph_svg

PATH_OPEN_LIMIT = 30  # longer critical paths are listed collapsed

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d232b;background:#f6f7f9}
main{max-width:1220px;margin:0 auto;padding:18px 24px 40px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:17px;margin:26px 0 8px}
.sub{color:#5b6572;margin:0 0 12px}
section{background:#fff;border:1px solid #e1e4e8;border-radius:6px;padding:12px 16px;margin:14px 0}
section h2{margin-top:2px}
table{border-collapse:collapse}td,th{padding:3px 10px;text-align:left;border-bottom:1px solid #eef0f2}
th{font-weight:600;color:#39424e}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
table.facts td:first-child{color:#5b6572;width:120px}
.status{display:inline-block;padding:0 8px;border-radius:9px;color:#fff;font-size:12px}
.status.optimal{background:#2e7d32}.status.feasible{background:#1565c0}.status.heuristic{background:#6d4c9f}
.scroll{overflow-x:auto}
.legend{margin:4px 0 8px;font-size:12px}.legend .key{margin-right:14px;white-space:nowrap}
.legend i{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:4px;vertical-align:-1px}
svg text{font:11px system-ui,sans-serif}
#gantt .band.even{fill:#fafbfc}#gantt .band.odd{fill:#f1f3f5}
#gantt .grid{stroke:#dde1e6;stroke-width:1}#gantt .tick{text-anchor:middle;fill:#5b6572}
#gantt .unit{text-anchor:end;fill:#5b6572}
#gantt .lane-label{text-anchor:end;font-weight:600;fill:#39424e}
#gantt .link-lane .lane-label{font-weight:400;fill:#5b6572}
#gantt .task rect,#gantt .transfer rect{stroke:#fff;stroke-width:.5}
#gantt .crit-mark{fill:#b71c1c;stroke:none}
#gantt .subgraph rect{fill:none;stroke:#6d4c9f;stroke-width:1.5;stroke-dasharray:4 2}#gantt .subgraph text{fill:#6d4c9f}
#gantt .deadline line{stroke:#1d232b;stroke-width:1.5}#gantt .deadline path{fill:#1d232b}
#gantt .deadline.missed line{stroke:#d32f2f}#gantt .deadline.missed path{fill:#d32f2f}
#gantt .critical-path{fill:none;stroke:#b71c1c;stroke-width:1;stroke-dasharray:3 3;opacity:.55;pointer-events:none}
.hl rect{stroke:#111 !important;stroke-width:2.5 !important}
.bar{background:#eef0f2;width:320px;height:12px;border-radius:3px;display:inline-block;vertical-align:middle}
.bar i{display:block;height:12px;border-radius:3px}
#task-graph .edge{fill:none;stroke:#9aa3ad;stroke-width:1.2}
#task-graph .edge.xfer{stroke-dasharray:5 3;stroke:#6b7480}
#task-graph .edge.critical{stroke:#b71c1c;stroke-width:2.2}
#task-graph .node rect{stroke:#fff;stroke-width:1}#task-graph .node.critical rect{stroke:#b71c1c;stroke-width:2.5}
#task-graph text{text-anchor:middle}
ol.path{margin:4px 0;padding-left:22px;columns:2;font-size:13px}
tr.best td{font-weight:600}tr.current td:first-child::after{content:" (this report)";color:#5b6572;font-weight:400}
.note{color:#5b6572;font-size:13px}
details summary{color:#5b6572;font-size:13px;cursor:pointer}
"""

_JS = """
(function () {
  var body = document.body;
  body.setAttribute('data-report-script', 'ran');
  function mark(task, on) {
    var els = document.querySelectorAll('[data-task="' + task + '"]');
    for (var i = 0; i < els.length; i++) { els[i].classList.toggle('hl', on); }
  }
  var items = document.querySelectorAll('svg [data-task]');
  for (var i = 0; i < items.length; i++) {
    (function (el) {
      var t = el.getAttribute('data-task');
      el.addEventListener('mouseenter', function () { mark(t, true); });
      el.addEventListener('mouseleave', function () { mark(t, false); });
    })(items[i]);
  }
})();
"""


def _facts(result: MapResult, timings: bool) -> str:
    sched = result.schedule
    graph, plat = sched.cost.graph, sched.cost.platform
    objective = result.objective
    if result.objective != "makespan" or result.objective_value != sched.makespan:
        objective += f" = {fmt_objective(result.objective_value, result.objective)}"
    # a graph of explicit costs (a plan's pipeline or request graph) has no counted work to show:
    # the plan section gives the model's
    work = (f", {fmt_count(graph.total_flops, 'FLOP')}, {fmt_bytes(graph.total_bytes)}"
            if graph.total_flops or graph.total_bytes else ", explicit task times (no counted work)")
    rows = [
        ("graph", f"{graph.name}: {len(graph.tasks)} tasks, {len(graph.edges)} edges{work}"),
        ("platform", f"{plat.name}: " + ", ".join(f"{d.name} ({d.kind})" for d in plat.devices)),
        ("mapper", result.mapper),
        ("objective", objective),
        ("makespan", fmt_time(sched.makespan)),
        ("lower bound", fmt_objective(result.lower_bound, result.objective)),
        ("gap", fmt_pct(result.gap)),
        ("options", ", ".join(sched.options.enabled) or "none (delay model)"),
    ]
    if timings:
        rows.insert(-1, ("solve time", fmt_time(result.solve_time)))
    cells = [f'<tr data-key="{esc(k)}"><td>{esc(k)}</td><td>{esc(v)}</td></tr>' for k, v in rows]
    status = esc(result.status)
    cells.insert(3, f'<tr data-key="status"><td>status</td><td><span class="status {status}">{status}</span></td></tr>')
    for note in result.notes:
        cells.append(f'<tr data-key="note"><td>note</td><td>{esc(note)}</td></tr>')
    return '<table class="facts" id="summary-table">' + "".join(cells) + "</table>"


def _table(table_id: str, header: tuple[str, ...], rows: list[str]) -> str:
    """A table; header cells starting with ``#`` are numeric (right-aligned)."""
    head = "".join(f'<th class="num">{esc(h[1:])}</th>' if h[:1] == "#" else f"<th>{esc(h)}</th>" for h in header)
    return f'<table id="{table_id}"><tr>{head}</tr>' + "".join(rows) + "</table>"


def _tr(cls: str, data: dict[str, object], cells: list[tuple[str, bool]]) -> str:
    """A row: ``cells`` are (html, numeric); ``data`` become escaped data-* attributes."""
    attrs = "".join(f' data-{k}="{esc(v)}"' for k, v in data.items())
    tds = "".join(f'<td class="num">{c}</td>' if num else f"<td>{c}</td>" for c, num in cells)
    return f'<tr class="{cls}"{attrs}>{tds}</tr>'


def _utilisation(result: MapResult) -> str:
    sched = result.schedule
    colours = device_colours(sched)
    rows = []
    for d, peak in zip(device_stats(sched), peak_memory(sched)):
        pct = 100.0 * d.utilisation
        bar = f'<span class="bar"><i style="width:{pct:.1f}%;background:{colours[d.index]}"></i></span> {pct:.1f} %'
        cells = [
            (esc(d.name), False), (esc(d.kind), False), (str(d.tasks), True), (esc(fmt_time(d.busy)), True),
            (bar, False), (esc(fmt_bytes(peak.bytes)), True),
        ]
        rows.append(_tr("util", {"device": d.name}, cells))
    return _table("utilisation-table", ("device", "kind", "#tasks", "#busy", "utilisation", "#peak memory"), rows)


def _path_list(result: MapResult, path: tuple[PathStep, ...]) -> str:
    sched = result.schedule
    graph, devs = sched.cost.graph, sched.cost.platform.devices
    xfer = {tr.edge: tr for tr in sched.transfers}
    items = []
    for p in path:
        if p.kind == "task":
            s = sched.slots[p.index]
            items.append(
                f'<li data-task="{p.index}">{esc(graph.tasks[p.index].name)} on {esc(devs[s.device].name)}: '
                f"{esc(fmt_time(s.start))} \u2013 {esc(fmt_time(s.end))}</li>"
            )
        else:
            tr, e = xfer[p.index], graph.edges[p.index]
            items.append(
                f'<li data-edge="{p.index}">transfer {esc(graph.tasks[e.src].name)} \u2192 '
                f"{esc(graph.tasks[e.dst].name)} ({esc(devs[tr.src_device].name)} \u2192 "
                f"{esc(devs[tr.dst_device].name)}): {esc(fmt_time(tr.end - tr.start))}</li>"
            )
    busy = sum(sched.slots[p.index].end - sched.slots[p.index].start for p in path if p.kind == "task")
    comm = sum(xfer[p.index].end - xfer[p.index].start for p in path if p.kind == "transfer")
    wait = sched.makespan - busy - comm
    wait = 0.0 if wait <= 1e-9 * max(sched.makespan, 1e-300) else wait
    head = (
        f"{len(path)} elements: {esc(fmt_time(busy))} computing, "
        f"{esc(fmt_time(comm))} transferring, {esc(fmt_time(wait))} waiting"
    )
    listing = '<ol class="path" id="critical-path-list">' + "".join(items) + "</ol>"
    if len(path) <= PATH_OPEN_LIMIT:
        return f'<p class="note">{head}.</p>{listing}'
    return f"<details><summary>{head} (click to list)</summary>{listing}</details>"


def _compare(result: MapResult, compare: Sequence[MapResult], timings: bool) -> str:
    results = [result, *compare]
    best = min(r.schedule.makespan for r in results)
    rows = []
    for i, r in enumerate(results):
        ms = r.schedule.makespan
        cls = " ".join(c for c in ("cmp", "current" if i == 0 else "", "best" if ms == best else "") if c)
        status = f'<span class="status {esc(r.status)}">{esc(r.status)}</span>'
        cells = [
            (esc(r.mapper), False), (status, False), (esc(r.objective), False), (esc(fmt_time(ms)), True),
            (f"{ms / best:.3f}\u00d7" if best > 0 else "-", True),
            (esc(fmt_objective(r.lower_bound, r.objective)), True),
            (esc(fmt_pct(r.gap)), True),
        ] + ([(esc(fmt_time(r.solve_time)), True)] if timings else [])
        rows.append(_tr(cls, {"mapper": r.mapper}, cells))
    header: tuple[str, ...] = ("mapper", "status", "objective", "#makespan", "#vs best", "#lower bound", "#gap")
    header += ("#solve time",) if timings else ()
    return _table("compare-table", header, rows)


def _run_table(result: MapResult, rows: tuple[RunRow, ...]) -> str:
    sched = result.schedule
    graph, devs = sched.cost.graph, sched.cost.platform.devices
    longest = max([r.predicted for r in rows] + [r.actual or 0.0 for r in rows] + [1e-30])
    out = []
    for r in rows:
        ratio = f"{r.actual / r.predicted:.2f}" if r.actual is not None and r.predicted > 0 else "-"
        wp = 200.0 * r.predicted / longest
        wa = 200.0 * (r.actual or 0.0) / longest
        bars = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="204" height="14">'
            f'<rect x="0" y="1" width="{wp:.1f}" height="5" fill="#9aa3ad"/>'
            f'<rect x="0" y="8" width="{wa:.1f}" height="5" fill="#1565c0"/></svg>'
        )
        where = devs[r.device].name if r.worker is None else f"{devs[r.device].name} (worker {r.worker})"
        cells = [
            (esc(graph.tasks[r.task].name), False), (esc(where), False),
            (esc(fmt_time(r.predicted_start)), True), (esc(fmt_time(r.predicted)), True),
            (esc(fmt_time(r.measured)), True), (esc(fmt_time(r.modelled)), True), (ratio, True), (bars, False),
        ]  # fmt: skip
        out.append(_tr("run", {"task": r.task}, cells))
    header = ("task", "device", "#predicted start", "#predicted", "#measured", "#modelled", "#actual / predicted",
              "predicted (grey) against actual (colour)")  # fmt: skip
    return _table("run-table", header, out)


def _plan(plan: Sequence[tuple[str, str]]) -> str:
    """The plan kept (layout, stages, groups, batch) as a table of its own."""
    cells = [f'<tr data-key="{esc(k)}"><td>{esc(k)}</td><td>{esc(v)}</td></tr>' for k, v in plan]
    return '<table class="facts" id="plan-table">' + "".join(cells) + "</table>"


def render_html(result: MapResult, *, compare: Sequence[MapResult] = (), run=None, timings: bool = False,
                extra: Sequence[tuple[str, MapResult]] = (), plan: Sequence[tuple[str, str]] = ()) -> str:
    """The report page as a string (see :func:`write_html`)."""
    sched = result.schedule
    graph, plat = sched.cost.graph, sched.cost.platform
    path = critical_path(sched)
    run_rows = resolve_run(sched, run)
    gsvg, gnote = graph_svg(sched, path)
    title = f"{graph.name} on {plat.name}: {result.mapper}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>mapper report: {esc(title)}</title>",
        f"<style>{_CSS}</style></head>",
        '<body data-report-script="none"><main>',
        f'<h1 id="title">{esc(title)}</h1>',
        f'<p class="sub">makespan {esc(fmt_time(sched.makespan))} \u00b7 status {esc(result.status)}</p>',
        f'<section id="summary"><h2>Summary</h2>{_facts(result, timings)}</section>',
        '<section id="schedule"><h2>Schedule</h2>',
        op_legend(sched),
        '<p class="note">Lanes: devices, then links carrying transfers. Underlined in red and joined by '
        "dashed lines: the critical path. Dashed outlines: delegated subgraphs; triangles: deadlines "
        "(red when missed). Hover a bar for details.</p>",
        *([f'<p class="note" id="aggregated">{esc(blocks.note(sched, "chart"))}</p>'] if blocks.aggregated(sched)
          else []),
        f'<div class="scroll">{gantt_svg(sched, path)}</div></section>',
        delegation_section(sched),
        deadline_section(sched),
        f'<section id="utilisation"><h2>Device utilisation</h2>{_utilisation(result)}</section>',
        f'<section id="critical-path"><h2>Critical path</h2>{_path_list(result, path)}</section>',
        '<section id="graph"><h2>Task graph</h2>',
        '<div class="legend">'
        + "".join(
            f'<span class="key" data-device="{esc(d.name)}"><i style="background:{c}"></i>{esc(d.name)}</span>'
            for d, c in zip(plat.devices, device_colours(sched))
        )
        + "</div>",
        f'<p class="note">{esc(gnote)} Dashed edges cross devices.</p>',
        f'<div class="scroll">{gsvg}</div></section>',
    ]
    if plan:  # after the summary
        parts.insert(parts.index(next(x for x in parts if x.startswith('<section id="summary">'))) + 1,
                     f'<section id="plan"><h2>Plan</h2>{_plan(plan)}</section>')
    for k, (heading, other) in enumerate(extra):
        other_path = critical_path(other.schedule)
        parts.append(f'<section id="extra-{k}"><h2>{esc(heading)}</h2>'
                     f'<p class="sub">makespan {esc(fmt_time(other.schedule.makespan))} \u00b7 '
                     f'{len(other.schedule.slots):,} tasks on {esc(other.schedule.cost.platform.name)}</p>'
                     f'<div class="scroll">{gantt_svg(other.schedule, other_path)}</div></section>')
    if compare:
        parts.append(f'<section id="compare"><h2>Mappers compared</h2>{_compare(result, compare, timings)}</section>')
    if run_rows:
        parts.append(f'<section id="run"><h2>Predicted against measured</h2>{_run_table(result, run_rows)}</section>')
    parts += ["</main>", f"<script>{_JS}</script>", "</body></html>", ""]
    return "\n".join(parts)


def write_html(
    result: MapResult, path: str | os.PathLike, *, compare: Sequence[MapResult] = (), run=None, timings: bool = False,
    extra: Sequence[tuple[str, MapResult]] = (), plan: Sequence[tuple[str, str]] = (),
) -> None:
    """Write the self-contained HTML report of ``result`` to ``path`` atomically.

    Parameters
    ----------
    result : MapResult
        The mapping to report.
    path : str or PathLike
        Output file.
    compare : sequence of MapResult
        Other mappings of the same graph, shown in a comparison table.
    run : sequence of RunRecord, or an object with ``records``, optional
        Executed tasks, shown as predicted against measured/modelled times.
    timings : bool
        Show the mappers' solve times (wall-clock: the page then differs from run to run).
    extra : sequence of (heading, MapResult)
        Further schedules shown as Gantt charts of their own (a request's decode step per GPU).
    plan : sequence of (key, value)
        The plan a ``--parallel`` or ``--inference`` search kept (layout, stages, groups, batch),
        shown in a section of its own.
    """
    atomic_write(path, render_html(result, compare=compare, run=run, timings=timings, extra=extra, plan=plan))
