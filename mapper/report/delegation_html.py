"""The HTML report's delegation and deadline sections: the delegated subgraphs, the boundary
hand-overs with their cost, the fallbacks with their reasons (docs/platforms.md, Delegation),
and each task's deadline against its end. Every name is HTML-escaped."""

from __future__ import annotations

from collections.abc import Sequence

from mapper.core.units import fmt_time
from mapper.engine.schedule import Schedule
from mapper.report.delegation import boundaries, delegation
from mapper.report.svg_gantt import esc


def _table(table_id: str, header: tuple[str, ...], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def delegation_section(sched: Schedule) -> str:
    """``<section id="delegation">`` on a platform with an ``npu`` or ``dla`` device, else ``""``."""
    found = delegation(sched)
    if found is None:
        return ""
    devs = {d.name: d for d in sched.cost.platform.devices}
    subs = [(k + 1, s["device"], len(s["tasks"]), fmt_time(devs[s["device"]].invoke_us * 1e-6),
             ", ".join(s["tasks"][:6]) + (", ..." if len(s["tasks"]) > 6 else ""))
            for k, s in enumerate(found["subgraphs"])]
    bounds = [(a, b, n, fmt_time(secs)) for a, b, n, secs in boundaries(sched)]
    falls = [(f["task"], f["op"], f["device"], f["reason"]) for f in found["fallbacks"]]
    parts = ['<section id="delegation"><h2>Delegation</h2>',
             f'<p class="note">{len(subs)} delegated subgraphs (outlined and numbered on the Gantt chart), '
             f"{len(falls)} fallbacks.</p>",
             _table("subgraph-table", ("#", "device", "nodes", "invocation", "first nodes"), subs)]
    if bounds:
        parts += ['<h3>Boundary hand-overs</h3>',
                  _table("boundary-table", ("from", "to", "hand-overs", "total time"), bounds)]
    if falls:
        parts += ['<h3>Fallbacks</h3>', _table("fallback-table", ("node", "op", "not on", "reason"), falls)]
    return "".join(parts) + "</section>"


def deadline_section(sched: Schedule) -> str:
    """``<section id="deadlines">``: each task with a deadline, its end and lateness (``""`` when none has one)."""
    graph, devs = sched.cost.graph, sched.cost.platform.devices
    rows = []
    for sl in sorted(sched.slots, key=lambda s: (s.end, s.task)):
        dl = graph.tasks[sl.task].deadline
        if dl is not None:
            late = sl.end > dl * (1 + 1e-9)
            rows.append((graph.tasks[sl.task].name, devs[sl.device].name, fmt_time(dl), fmt_time(sl.end),
                         f"missed by {fmt_time(sl.end - dl)}" if late else "met"))
    if not rows:
        return ""
    missed = sum(1 for r in rows if r[-1] != "met")
    return ('<section id="deadlines"><h2>Deadlines</h2>'
            f'<p class="note">{len(rows) - missed} of {len(rows)} met; markers on the Gantt chart, red when missed.</p>'
            + _table("deadline-table", ("task", "device", "deadline", "end", "verdict"), rows) + "</section>")
