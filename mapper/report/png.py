"""A Gantt chart as a PNG, for papers (needs the ``plot`` extra: matplotlib).

Same lanes as the HTML chart: one per device, then one per link carrying
transfers; tasks coloured by op, the critical path outlined in red.
matplotlib is imported only when a PNG is asked for.
"""

from __future__ import annotations

import io
import os

from mapper.core.files import atomic_write
from mapper.core.units import time_unit
from mapper.errors import OptionsError
from mapper.mapping.base import MapResult
from mapper.report.blocks import refuse_drawing
from mapper.report.common import PathStep, critical_path, link_tracks, op_colour, text_colour


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        raise OptionsError(
            "PNG reports need matplotlib: install mapper[plot] (pip install 'mapper[plot]')", obj="png"
        ) from None
    return Figure, FigureCanvasAgg, Patch


def render_png(result: MapResult, *, width_in: float = 10.0, dpi: int = 200, title: str | None = None) -> bytes:
    """The Gantt chart as PNG bytes (no timestamps or versions embedded)."""
    refuse_drawing(result.schedule, "PNG")
    Figure, FigureCanvasAgg, Patch = _matplotlib()
    sched = result.schedule
    graph = sched.cost.graph
    devs = sched.cost.platform.devices
    crit = set(critical_path(sched))
    tracks, pieces = link_tracks(sched)
    lanes = [f"{d.name} ({d.kind})" for d in devs] + [t.key.replace("->", " \u2192 ") for t in tracks]
    span = sched.makespan if sched.makespan > 0 else 1.0
    scale, unit = time_unit(span)
    fig = Figure(figsize=(width_in, 1.0 + 0.42 * len(lanes)), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ys = {i: len(lanes) - 1 - i for i in range(len(lanes))}  # first lane on top
    min_label = 0.012 * span  # per character, at 7 pt on a 10 in wide figure
    for s in sched.slots:
        t = graph.tasks[s.task]
        fill = op_colour(t.op)
        hot = PathStep("task", s.task) in crit
        x, w = s.start / scale, (s.end - s.start) / scale
        ax.barh(ys[s.device], w, left=x, height=0.72, color=fill,
                edgecolor="#b71c1c" if hot else "white", linewidth=1.4 if hot else 0.4)  # fmt: skip
        if s.end - s.start > min_label * (len(t.name) + 1):
            ax.text(x + w / 2, ys[s.device], t.name, ha="center", va="center", fontsize=7, color=text_colour(fill))
    for pc in pieces:
        hot = PathStep("transfer", pc.edge) in crit
        ax.barh(ys[len(devs) + pc.track], (pc.end - pc.start) / scale, left=pc.start / scale, height=0.5,
                color="#8a8f98", edgecolor="#b71c1c" if hot else "none", linewidth=1.0)  # fmt: skip
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([lanes[len(lanes) - 1 - y] for y in range(len(lanes))], fontsize=8)
    ax.set_xlim(0, span / scale * 1.01)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlabel(f"time ({unit})", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#dde1e6", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title is None:
        title = f"{graph.name} on {sched.cost.platform.name}: {result.mapper}, "
        title += f"makespan {sched.makespan / scale:.4g} {unit}"
    ax.set_title(title, fontsize=10)
    ops = sorted({t.op for t in graph.tasks})
    handles = [Patch(color=op_colour(op), label=op) for op in ops]
    ax.legend(handles=handles, fontsize=7, ncol=min(len(ops), 8), loc="upper center",
              bbox_to_anchor=(0.5, -0.22 if len(lanes) > 3 else -0.35), frameon=False)  # fmt: skip
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def write_png(result: MapResult, path: str | os.PathLike, **kw) -> None:
    """Write :func:`render_png` to ``path`` atomically (keyword options pass through)."""
    atomic_write(path, render_png(result, **kw))
