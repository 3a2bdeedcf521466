"""``mapper serve --html OUT``: the text report and, for the first replica, the batch size, the KV
cache in use and the queue over time (docs/serving.md).

Each chart is an SVG polyline of the simulator's steps (:attr:`mapper.serving.inflight.Run.timeline`);
past :data:`MAX_POINTS` steps every k-th step is drawn, and the page says so.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

#: The most points a chart draws.
MAX_POINTS = 2000
WIDTH, HEIGHT, PAD = 760, 150, 44

_STYLE = ("body{font-family:system-ui,sans-serif;margin:24px;color:#222}pre{background:#f6f6f6;padding:12px}"
          "svg{display:block;margin:6px 0 18px}h2{font-size:15px;margin:14px 0 2px}")


def _chart(title: str, times: Sequence[float], values: Sequence[float], top: float, unit: str) -> str:
    end = times[-1] if times and times[-1] > 0 else 1.0
    top = top if top > 0 else 1.0
    pts = " ".join(f"{PAD + (WIDTH - 2 * PAD) * t / end:.1f},{HEIGHT - 20 - (HEIGHT - 40) * v / top:.1f}"
                   for t, v in zip(times, values))
    return (f"<h2>{html.escape(title)}</h2><svg width='{WIDTH}' height='{HEIGHT}' role='img' "
            f"aria-label='{html.escape(title)}'>"
            f"<line x1='{PAD}' y1='{HEIGHT - 20}' x2='{WIDTH - PAD}' y2='{HEIGHT - 20}' stroke='#999'/>"
            f"<line x1='{PAD}' y1='20' x2='{PAD}' y2='{HEIGHT - 20}' stroke='#999'/>"
            f"<text x='2' y='24' font-size='11'>{top:,.0f}</text><text x='2' y='{HEIGHT - 20}' font-size='11'>0</text>"
            f"<text x='{WIDTH - PAD}' y='{HEIGHT - 4}' font-size='11' text-anchor='end'>{end:,.3g} s</text>"
            f"<text x='{PAD + 4}' y='14' font-size='11'>{html.escape(unit)}</text>"
            f"<polyline fill='none' stroke='#1f6fb2' stroke-width='1.2' points='{pts}'/></svg>")


def serving_html(text: str, timeline: Sequence[tuple[float, int, int, int]], blocks: int, block_tokens: int,
                 max_batch: int) -> str:
    """The page: ``text`` (the text report) and the three charts of ``timeline``."""
    k = max(1, -(-len(timeline) // MAX_POINTS))
    rows = list(timeline[::k])
    if timeline and rows[-1] is not timeline[-1]:
        rows.append(timeline[-1])
    times = [r[0] for r in rows]
    note = f"<p>Every {k}th of {len(timeline):,} steps is drawn.</p>" if k > 1 else ""
    charts = (_chart(f"Batch size (sequences a step runs; at most {max_batch:,})", times, [r[1] for r in rows],
                     max([r[1] for r in rows], default=1), "sequences")
              + _chart("KV cache in use", times, [r[2] * block_tokens for r in rows], blocks * block_tokens, "tokens")
              + _chart("Requests waiting", times, [r[3] for r in rows], max([r[3] for r in rows], default=1),
                       "requests"))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>mapper serve</title>"
            f"<style>{_STYLE}</style></head><body><h1>mapper serve</h1><pre>{html.escape(text)}</pre>"
            f"<p>The first replica over time, step by step.</p>{note}{charts}</body></html>\n")
