"""The task graph as Graphviz DOT, nodes coloured by device.

Nodes are ``t<index>`` labelled with the task name and op; edges between
devices are dashed and labelled with their size; the critical path is drawn
bold red; a legend cluster names the device colours. Every string is
escaped for DOT's quoted strings (``\\`` and ``"``; newlines become ``\\n``).
Render with ``dot -Tsvg graph.dot -o graph.svg``.
"""

from __future__ import annotations

import os

from mapper.core.files import atomic_write
from mapper.core.graph import TaskGraph
from mapper.core.units import fmt_bytes, fmt_count, fmt_time
from mapper.engine.schedule import Schedule
from mapper.mapping.base import MapResult
from mapper.report.blocks import refuse_drawing
from mapper.report.common import critical_path, device_colours, text_colour


def dot_quote(text: object) -> str:
    """``text`` as a DOT double-quoted string."""
    s = str(text).replace("\\", "\\\\").replace('"', '\\"')
    s = s.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    return f'"{s}"'


def to_dot(obj: MapResult | Schedule | TaskGraph) -> str:
    """DOT text for a mapping (coloured by device) or a bare task graph."""
    result = obj if isinstance(obj, MapResult) else None
    sched = obj.schedule if isinstance(obj, MapResult) else (obj if isinstance(obj, Schedule) else None)
    graph = sched.cost.graph if sched is not None else obj
    assert isinstance(graph, TaskGraph)
    if sched is not None:
        refuse_drawing(sched, "DOT")
    q = dot_quote
    title = graph.name
    if sched is not None:
        title = f"{graph.name} on {sched.cost.platform.name}"
        if result is not None:
            title += f": {result.mapper}"
        title += f", makespan {fmt_time(sched.makespan)}"
    lines = [
        f"digraph {q(graph.name)} {{",
        f"  graph [rankdir=LR, fontname=Helvetica, fontsize=12, labelloc=t, label={q(title)}];",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10, fillcolor="#ffffff"];',
        '  edge [color="#6b7480", fontname=Helvetica, fontsize=8];',
    ]
    crit_tasks: set[int] = set()
    crit_edges: set[tuple[int, int]] = set()
    if sched is not None:
        devs = sched.cost.platform.devices
        colours = device_colours(sched)
        lines.append("  subgraph cluster_legend {")
        lines.append('    label="devices"; style=dashed; color="#9aa3ad";')
        for d, c in zip(devs, colours):
            legend = f"{d.name} ({d.kind})"
            lines.append(f"    legend_{d.index} [label={q(legend)}, fillcolor={q(c)}, fontcolor={q(text_colour(c))}];")
        lines.append("  }")
        path = critical_path(sched)
        crit_tasks = {p.index for p in path if p.kind == "task"}
        walk = [p for p in path if p.kind == "task"]
        crit_edges = {(a.index, b.index) for a, b in zip(walk, walk[1:])}
    for t in graph.tasks:
        label = t.name + "\n" + t.op
        attrs = [f"label={q(label)}"]
        tip = f"{t.name} ({t.op}) {fmt_count(t.flops, 'FLOP')} {fmt_bytes(t.bytes)}"
        if sched is not None:
            s = sched.slots[t.index]
            c = colours[s.device]
            attrs += [f"fillcolor={q(c)}", f"fontcolor={q(text_colour(c))}"]
            tip += f" on {devs[s.device].name}: {fmt_time(s.start)} - {fmt_time(s.end)}"
            if t.index in crit_tasks:
                attrs += ['color="#b71c1c"', "penwidth=2.5"]
        attrs.append(f"tooltip={q(tip)}")
        lines.append(f"  t{t.index} [{', '.join(attrs)}];")
    for e in graph.edges:
        attrs = []
        if sched is not None and sched.slots[e.src].device != sched.slots[e.dst].device:
            attrs += ["style=dashed", f"label={q(fmt_bytes(e.bytes) if e.comm is None else fmt_time(e.comm))}"]
        if (e.src, e.dst) in crit_edges:
            attrs += ['color="#b71c1c"', "penwidth=2"]
        lines.append(f"  t{e.src} -> t{e.dst}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(obj: MapResult | Schedule | TaskGraph, path: str | os.PathLike) -> None:
    """Write :func:`to_dot` to ``path`` atomically."""
    atomic_write(path, to_dot(obj))
