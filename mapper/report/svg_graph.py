"""The task graph as inline SVG, for the HTML report.

A layered drawing in the style of Sugiyama, Tagawa and Toda ("Methods for
visual understanding of hierarchical system structures", IEEE SMC 11(2),
1981): columns are topological levels, nodes in a column are ordered by the
barycentre of their predecessors (two sweeps), edges are curves from column
to column. Nodes are coloured by device. Graphs larger than
:data:`FULL_LIMIT` tasks are condensed: one node per (column bucket, device)
holding the number of tasks it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.engine.schedule import Schedule
from mapper.report.common import PathStep, clip_text, device_colours, task_levels, text_colour
from mapper.report.svg_gantt import CHAR_W, esc

FULL_LIMIT = 300  # draw every task up to this many
MAX_COLUMNS = 60  # condensed view: at most this many columns
NODE_W, NODE_H = 116, 24
COL_GAP, ROW_GAP, PAD = 44, 10, 12


@dataclass(frozen=True, slots=True)
class _Node:
    key: int  # stable order
    col: int
    label: str
    title: str
    fill: str
    cls: str
    attrs: tuple[tuple[str, object], ...]


def _order(nodes: list[_Node], edges: list[tuple[int, int, str]]) -> dict[int, tuple[int, int]]:
    """(column, row) per node key: barycentre ordering, ties by key."""
    cols: dict[int, list[int]] = {}
    for n in sorted(nodes, key=lambda n: (n.col, n.key)):
        cols.setdefault(n.col, []).append(n.key)
    preds: dict[int, list[int]] = {n.key: [] for n in nodes}
    for a, b, _ in edges:
        preds[b].append(a)
    pos = {k: (c, r) for c, ks in cols.items() for r, k in enumerate(ks)}
    for _sweep in range(2):
        for c in sorted(cols):
            def bary(k: int) -> float:
                ps = [pos[p][1] for p in preds[k]]
                return sum(ps) / len(ps) if ps else pos[k][1]

            cols[c].sort(key=lambda k: (bary(k), k))
            for r, k in enumerate(cols[c]):
                pos[k] = (c, r)
    return pos


def _draw(nodes: list[_Node], edges: list[tuple[int, int, str]], note: str) -> str:
    pos = _order(nodes, edges)
    rows = max((r for _, r in pos.values()), default=0) + 1
    cols = max((c for c, _ in pos.values()), default=0) + 1
    width = 2 * PAD + cols * NODE_W + (cols - 1) * COL_GAP
    height = 2 * PAD + rows * NODE_H + (rows - 1) * ROW_GAP

    def xy(k: int) -> tuple[float, float]:
        c, r = pos[k]
        return PAD + c * (NODE_W + COL_GAP), PAD + r * (NODE_H + ROW_GAP)

    out = [
        f'<svg id="task-graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="task graph" data-view="{note}">'
    ]
    out.append('<g class="edges">')
    for a, b, cls in edges:
        (xa, ya), (xb, yb) = xy(a), xy(b)
        x1, y1, x2, y2 = xa + NODE_W, ya + NODE_H / 2, xb, yb + NODE_H / 2
        mid = (x1 + x2) / 2
        out.append(
            f'<path class="{cls}" data-src="{a}" data-dst="{b}" '
            f'd="M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"/>'
        )
    out.append("</g>")
    for n in sorted(nodes, key=lambda n: n.key):
        x, y = xy(n.key)
        attrs = "".join(f' {k}="{esc(v)}"' for k, v in n.attrs)
        out.append(f'<g class="{n.cls}"{attrs}>')
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_W}" height="{NODE_H}" rx="4" fill="{n.fill}"/>')
        shown = clip_text(n.label, int((NODE_W - 8) / CHAR_W))
        out.append(
            f'<text x="{x + NODE_W / 2:.1f}" y="{y + NODE_H / 2 + 4:.1f}" '
            f'fill="{text_colour(n.fill)}">{esc(shown)}</text>'
        )
        out.append(f"<title>{esc(n.title)}</title></g>")
    out.append("</svg>")
    return "\n".join(out)


def graph_svg(sched: Schedule, crit: tuple[PathStep, ...] = ()) -> tuple[str, str]:
    """(svg, note): the task graph drawn in full, or condensed above
    :data:`FULL_LIMIT` tasks (the note says which)."""
    graph = sched.cost.graph
    devs = sched.cost.platform.devices
    colours = device_colours(sched)
    levels = task_levels(graph)
    on_path = [(p.kind, p.index) for p in crit]
    crit_tasks = {i for k, i in on_path if k == "task"}
    crit_pairs = {(a[1], b[1]) for a, b in zip(on_path, on_path[1:]) if a[0] == b[0] == "task"}
    crit_edges = {i for k, i in on_path if k == "transfer"}
    dev_of = sched.device_of
    if len(graph.tasks) <= FULL_LIMIT:
        nodes = []
        for t in graph.tasks:
            d = dev_of[t.index]
            nodes.append(
                _Node(
                    t.index,
                    levels[t.index],
                    t.name,
                    f"{t.name}\nop: {t.op}\ndevice: {devs[d].name}",
                    colours[d],
                    "node critical" if t.index in crit_tasks else "node",
                    (("data-task", t.index), ("data-device", devs[d].name)),
                )
            )
        edges = []
        for e in graph.edges:
            cls = "edge"
            if dev_of[e.src] != dev_of[e.dst]:
                cls += " xfer"
            if e.index in crit_edges or (e.src, e.dst) in crit_pairs:
                cls += " critical"
            edges.append((e.src, e.dst, cls))
        return _draw(nodes, edges, "full"), f"{len(graph.tasks)} tasks, {len(graph.edges)} edges."
    # condensed: (column bucket, device) groups
    n_levels = max(levels) + 1
    n_cols = min(n_levels, MAX_COLUMNS)
    col = [lv * n_cols // n_levels for lv in levels]
    groups: dict[tuple[int, int], list[int]] = {}
    for i in range(len(graph.tasks)):
        groups.setdefault((col[i], dev_of[i]), []).append(i)
    keys = {g: k for k, g in enumerate(sorted(groups))}
    nodes = []
    for (c, d), members in sorted(groups.items()):
        first, last = graph.tasks[members[0]].name, graph.tasks[members[-1]].name
        nodes.append(
            _Node(
                keys[(c, d)],
                c,
                f"{len(members)} on {devs[d].name}",
                f"{len(members)} tasks on {devs[d].name}\n{first} \u2026 {last}",
                colours[d],
                "node group critical" if crit_tasks.intersection(members) else "node group",
                (("data-device", devs[d].name), ("data-count", len(members))),
            )
        )
    pairs = sorted(
        {(keys[(col[e.src], dev_of[e.src])], keys[(col[e.dst], dev_of[e.dst])]) for e in graph.edges}
        - {(k, k) for k in keys.values()}
    )
    edges = [(a, b, "edge") for a, b in pairs]
    note = (
        f"{len(graph.tasks)} tasks, {len(graph.edges)} edges: condensed to {len(nodes)} groups "
        f"(tasks grouped by device within {n_cols} level bands)."
    )
    return _draw(nodes, edges, "condensed"), note
