"""The Gantt chart of a schedule as inline SVG, for the HTML report.

One lane per device, then one lane per link that carries a transfer (a
transfer is drawn on every link of its route; a transfer without links, such
as an explicit ``comm`` edge on a platform with no links, gets a lane for its
device pair). Link lanes that are nearly empty fold into one lane when
there are several. Overlapping items in a lane are packed into sub-rows. Delegated
subgraphs on an NPU or DLA lane are outlined and numbered, and each task's deadline
is marked on its device's lane (red when missed). Past
:data:`mapper.report.blocks.DETAIL_LIMIT` tasks the lanes hold busy blocks
(merged across gaps under one pixel) instead of tasks, without the critical
path, outlines or deadline marks. Every name is HTML-escaped.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

from mapper.core.units import fmt_bytes, fmt_count, fmt_time, time_unit
from mapper.engine.schedule import Schedule, delegated_runs
from mapper.platform.devices import ACCELERATOR_KINDS
from mapper.report.blocks import Block, aggregated, device_blocks, merge
from mapper.report.common import (
    PathStep,
    clip_text,
    link_tracks,
    nice_step,
    op_colour,
    text_colour,
    union_length,
)

LABEL_W = 150  # lane label column, px
PAD_R = 20
AXIS_H = 30
ROW_H = 22
LINK_ROW_H = 12  # link lanes: thinner rows, no labels
LANE_PAD = 4
MAX_ROWS = 6  # deeper overlaps wrap around and overdraw
FOLD_BELOW = 0.05  # link lanes busy less than this share of the schedule fold into one ...
FOLD_MIN = 3  # ... when there are more than this many
CHAR_W = 6.4  # average glyph width of the 11 px label font


def esc(text: object) -> str:
    """HTML-escape ``text`` for element content and quoted attributes."""
    return html.escape(str(text), quote=True)


@dataclass(slots=True)
class _Item:
    start: float
    end: float
    key: tuple[int, int]  # (0 task | 1 transfer, index): stable order
    markup: tuple[str, dict[str, object], str, str, str] = ("", {}, "", "", "")  # (cls, attrs, fill, label, title)
    row: int = 0


@dataclass(slots=True)
class _Lane:
    kind: str  # device | link
    key: str
    label: str
    items: list[_Item] = field(default_factory=list)
    rows: int = 1
    y: float = 0.0

    @property
    def row_h(self) -> int:
        return ROW_H if self.kind == "device" else LINK_ROW_H

    @property
    def height(self) -> float:
        return max(self.rows * self.row_h, ROW_H) + 2 * LANE_PAD


def _pack(items: list[_Item], tol: float) -> int:
    """Greedy interval partitioning: by start time, each item takes the first
    row that is free (optimal row count; Kleinberg and Tardos, "Algorithm
    Design", 2005, section 4.1). Returns the row count, capped at MAX_ROWS."""
    ends: list[float] = []
    for it in sorted(items, key=lambda i: (i.start, i.key)):
        for r, last in enumerate(ends):
            if last <= it.start + tol:
                ends[r] = it.end
                it.row = r
                break
        else:
            ends.append(it.end)
            it.row = len(ends) - 1
    for it in items:
        it.row %= MAX_ROWS
    return max(1, min(len(ends), MAX_ROWS))


def _block_item(b: Block, what: str, attrs: dict[str, object]) -> _Item:
    title = (f"{b.items:,} {what}s, {fmt_time(b.start)} - {fmt_time(b.end)}\n"
             f"busy {fmt_time(b.busy)} of {fmt_time(b.end - b.start)}")
    return _Item(b.start, b.end, (2, 0), ("block", attrs, "#7b8794", f"{b.items:,} {what}s", title))


def _block_lanes(sched: Schedule, gap: float) -> list[_Lane]:
    """Device and link lanes of busy blocks (see :mod:`mapper.report.blocks`)."""
    devs = sched.cost.platform.devices
    lanes = [_Lane("device", d.name, f"{d.name} ({d.kind})") for d in devs]
    for b in device_blocks(sched, gap):
        attrs: dict[str, object] = {"data-device": devs[b.lane].name, "data-tasks": b.items, "data-busy": b.busy}
        lanes[b.lane].items.append(_block_item(b, "task", attrs))
    tracks, pieces = link_tracks(sched)
    links = [_Lane("link", t.key, f"{t.src} \u2192 {t.dst}" + ("" if t.link >= 0 else " (no link)")) for t in tracks]
    for b in merge([(pc.track, pc.start, pc.end) for pc in pieces], gap):
        links[b.lane].items.append(_block_item(b, "transfer", {"data-link": tracks[b.lane].key, "data-busy": b.busy}))
    return lanes + _fold(links, sched.makespan)


def _lanes(sched: Schedule, crit: set[PathStep]) -> list[_Lane]:
    graph = sched.cost.graph
    plat = sched.cost.platform
    devs = plat.devices
    xfer = {tr.edge: tr for tr in sched.transfers}
    lanes = [_Lane("device", d.name, f"{d.name} ({d.kind})") for d in devs]
    for s in sched.slots:
        t = graph.tasks[s.task]
        cls = "task critical" if PathStep("task", s.task) in crit else "task"
        title = "\n".join(
            (
                t.name,
                f"op: {t.op}",
                f"device: {devs[s.device].name}",
                f"start {fmt_time(s.start)}, end {fmt_time(s.end)} ({fmt_time(s.end - s.start)})",
                f"FLOPs: {fmt_count(t.flops)}",
                f"bytes: {fmt_bytes(t.bytes)}",
            )
        )
        attrs = {"id": f"gantt-task-{s.task}", "data-task": s.task, "data-op": t.op, "data-device": devs[s.device].name}
        markup = (cls, attrs, op_colour(t.op), t.name, title)
        lanes[s.device].items.append(_Item(s.start, s.end, (0, s.task), markup))
    tracks, pieces = link_tracks(sched)
    link_lanes = [
        _Lane("link", t.key, f"{t.src} \u2192 {t.dst}" + ("" if t.link >= 0 else " (no link)")) for t in tracks
    ]
    for pc in pieces:
        tr = xfer[pc.edge]
        e = graph.edges[pc.edge]
        title = "\n".join(
            (
                f"transfer {graph.tasks[e.src].name} \u2192 {graph.tasks[e.dst].name}",
                f"{devs[tr.src_device].name} \u2192 {devs[tr.dst_device].name}",
                f"bytes: {fmt_bytes(e.bytes)}",
                f"start {fmt_time(pc.start)}, end {fmt_time(pc.end)} ({fmt_time(pc.end - pc.start)})",
            )
        )
        cls = "transfer critical" if PathStep("transfer", pc.edge) in crit else "transfer"
        attrs = {"data-edge": pc.edge, "data-link": tracks[pc.track].key}
        link_lanes[pc.track].items.append(_Item(pc.start, pc.end, (1, pc.edge), (cls, attrs, "#8a8f98", "", title)))
    lanes += _fold(link_lanes, sched.makespan)
    return lanes


def _fold(links: list[_Lane], span: float) -> list[_Lane]:
    """The link lanes, with those busy less than :data:`FOLD_BELOW` of the schedule folded into
    one lane (``N quiet links``) when there are more than :data:`FOLD_MIN` of them: a decode step's
    dozens of nearly empty all-reduce links then take one lane, not most of the chart's height.
    Each transfer keeps its link in ``data-link`` and its title."""
    quiet = [lane for lane in links
             if union_length([(it.start, it.end) for it in lane.items]) < FOLD_BELOW * span]
    if len(quiet) <= FOLD_MIN:
        return links
    folded = _Lane("link", "quiet-links", f"{len(quiet)} quiet links")
    for lane in quiet:
        folded.items += lane.items
    return [lane for lane in links if lane not in quiet] + [folded]


def _attrs(attrs: dict) -> str:
    return "".join(f' {k}="{esc(v)}"' for k, v in attrs.items())


def gantt_svg(sched: Schedule, crit: tuple[PathStep, ...] = (), width: int = 1160) -> str:
    """The schedule as an ``<svg id="gantt">`` element (a string)."""
    crit_set = set(crit)
    deadlines = [dl for t in sched.cost.graph.tasks if (dl := t.deadline) is not None]
    span = max([sched.makespan, *deadlines]) if sched.makespan > 0 else 1.0  # a later deadline stays in view
    tol = 1e-12 * span
    plot_w = width - LABEL_W - PAD_R
    lanes = _block_lanes(sched, span / plot_w) if aggregated(sched) else _lanes(sched, crit_set)
    y = float(AXIS_H)
    for lane in lanes:
        lane.rows = _pack(lane.items, tol)
        lane.y = y
        y += lane.height
    height = int(math.ceil(y)) + 8

    def x(t: float) -> float:
        return LABEL_W + t / span * plot_w

    out = [
        f'<svg id="gantt" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="Gantt chart">'
    ]
    # time axis and grid
    scale, unit = time_unit(span)
    step = nice_step(span / scale) * scale
    out.append('<g class="axis">')
    n_ticks = int(math.floor(span / step + 1e-9))
    for i in range(n_ticks + 1):
        t = i * step
        xt = f"{x(t):.2f}"
        out.append(f'<line x1="{xt}" y1="{AXIS_H - 4}" x2="{xt}" y2="{height - 8}" class="grid"/>')
        out.append(f'<text x="{xt}" y="{AXIS_H - 9}" class="tick">{t / scale:.6g}</text>')
    out.append(f'<text x="{LABEL_W - 8}" y="{AXIS_H - 9}" class="unit">time ({unit})</text>')
    out.append("</g>")
    # lanes
    lane_y: dict[tuple[int, int], float] = {}
    for n, lane in enumerate(lanes):
        h, row_h = lane.height, lane.row_h
        data = "data-device" if lane.kind == "device" else "data-link"
        cls = "lane" if lane.kind == "device" else "lane link-lane"
        out.append(f'<g class="{cls}" {data}="{esc(lane.key)}">')
        band = "band even" if n % 2 == 0 else "band odd"
        out.append(f'<rect class="{band}" x="0" y="{lane.y:.2f}" width="{width}" height="{h}"/>')
        out.append(f'<text class="lane-label" x="{LABEL_W - 8}" y="{lane.y + h / 2 + 4:.2f}">{esc(lane.label)}</text>')
        for it in lane.items:
            cls_i, attrs, fill, label, title = it.markup
            x0, x1 = x(it.start), x(it.end)
            w = max(x1 - x0, 1.0)
            ry = lane.y + (h - lane.rows * row_h) / 2 + it.row * row_h + 1
            lane_y.setdefault(it.key, ry + (row_h - 5) / 2)
            out.append(f'<g class="{cls_i}"{_attrs(attrs)}>')
            out.append(f'<rect x="{x0:.2f}" y="{ry:.2f}" width="{w:.2f}" height="{row_h - 5}" rx="2" fill="{fill}"/>')
            if "critical" in cls_i:  # a red underline keeps the op colour visible
                out.append(f'<rect class="crit-mark" x="{x0:.2f}" y="{ry + row_h - 4:.2f}" width="{w:.2f}" '
                           'height="3"/>')
            fits = int((w - 6) / CHAR_W)
            shown = clip_text(label, fits) if label and fits >= min(len(label), 4) else ""
            if shown:
                out.append(
                    f'<text x="{x0 + 3:.2f}" y="{ry + ROW_H / 2 + 1.5:.2f}" '
                    f'fill="{text_colour(fill)}">{esc(shown)}</text>'
                )
            out.append(f"<title>{esc(title)}</title></g>")
        out.append("</g>")
    if not aggregated(sched):
        out += _overlays(sched, lanes, x)
    # the critical path: connectors from each element's end to the next one's start
    if len(crit) > 1 and not aggregated(sched):
        times = {(0, s.task): (s.start, s.end) for s in sched.slots}
        times.update({(1, tr.edge): (tr.start, tr.end) for tr in sched.transfers})
        keys = [(0 if p.kind == "task" else 1, p.index) for p in crit]
        segs = []
        for a, b in zip(keys, keys[1:]):
            x_from = x(min(times[a][1], times[b][0]))  # streamed stages overlap: no backward lines
            segs.append(f"M{x_from:.2f},{lane_y[a]:.2f} L{x(times[b][0]):.2f},{lane_y[b]:.2f}")
        out.append(f'<path class="critical-path" d="{" ".join(segs)}"/>')
    out.append("</svg>")
    return "\n".join(out)


def _overlays(sched: Schedule, lanes: list[_Lane], x) -> list[str]:
    """Each delegated subgraph on an ``npu`` or ``dla`` lane outlined and numbered, then a marker
    at each task's deadline on its device's lane (class ``missed`` when the task ends after it)."""
    cost = sched.cost
    graph, devs = cost.graph, cost.platform.devices
    out = []
    accel = [d.index for d in devs if d.kind in ACCELERATOR_KINDS]
    for k, (d, run) in enumerate(delegated_runs(cost, sched.order, accel) if accel else ()):
        lane = lanes[d]
        s0 = min(sched.slots[t].start for t in run)
        s1 = max(sched.slots[t].end for t in run)
        names = ", ".join(graph.tasks[t].name for t in run[:8]) + (", ..." if len(run) > 8 else "")
        title = (f"delegated subgraph {k + 1} on {devs[d].name}: {len(run)} tasks, "
                 f"{fmt_time(s0)} \u2013 {fmt_time(s1)}, invocation {fmt_time(devs[d].invoke_us * 1e-6)}\n{names}")
        out.append(f'<g class="subgraph" data-device="{esc(devs[d].name)}" data-subgraph="{k + 1}">'
                   f'<rect x="{x(s0):.2f}" y="{lane.y + 1:.2f}" width="{max(x(s1) - x(s0), 1.0):.2f}" '
                   f'height="{lane.height - 2:.2f}" rx="3"/>'
                   f'<text x="{x(s0) + 2:.2f}" y="{lane.y + 9:.2f}">#{k + 1}</text>'
                   f"<title>{esc(title)}</title></g>")
    for sl in sched.slots:
        task = graph.tasks[sl.task]
        if task.deadline is None:
            continue
        lane = lanes[sl.device]
        late = sl.end > task.deadline * (1 + 1e-9)  # the validator's tolerance
        xd = x(task.deadline)
        verdict = (f"missed by {fmt_time(sl.end - task.deadline)}" if late
                   else f"met, {fmt_time(task.deadline - sl.end)} to spare")
        title = f"deadline of {task.name}: {fmt_time(task.deadline)}, ends {fmt_time(sl.end)} ({verdict})"
        out.append(f'<g class="deadline{" missed" if late else ""}" data-task="{sl.task}" '
                   f'data-deadline="{task.deadline:.9g}"><line x1="{xd:.2f}" y1="{lane.y:.2f}" x2="{xd:.2f}" '
                   f'y2="{lane.y + lane.height:.2f}"/><path d="M{xd - 4:.2f},{lane.y:.2f} h8 l-4,6 z"/>'
                   f"<title>{esc(title)}</title></g>")
    return out


def op_legend(sched: Schedule) -> str:
    """A legend of the op colours used in the schedule (HTML)."""
    ops = sorted({t.op for t in sched.cost.graph.tasks})
    items = [
        f'<span class="key" data-op="{esc(op)}"><i style="background:{op_colour(op)}"></i>{esc(op)}</span>'
        for op in ops
    ]
    return '<div class="legend" id="op-legend">' + "".join(items) + "</div>"
