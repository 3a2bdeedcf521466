"""Busy blocks: a huge schedule drawn per device, not per task.

Past :data:`DETAIL_LIMIT` tasks the HTML Gantt chart and the Perfetto trace
draw, per device (and per link), blocks of consecutive busy time: a device's
tasks in start order, merged while the next one starts less than ``gap``
after the block's end (one pixel at the chart's scale), so a block stands
for the tasks it holds and its busy time is the union of theirs (the
device's busy time is the sum over its blocks). Interval merging after a
sort, O(n log n). DOT and PNG, whose layout and drawing cost grows faster,
refuse past :data:`DRAW_LIMIT` tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.engine.schedule import Schedule
from mapper.errors import OptionsError

# Each drawn task is an SVG group of 3-4 elements; browsers render, hover and scroll
# inline SVG documents of more than some 10^5 elements slowly (a 10^5-task Gantt chart
# is 4*10^5 elements), so past this many tasks the chart and trace draw busy blocks.
DETAIL_LIMIT = 20_000
# Graphviz's dot layout (network simplex ranking, crossing minimisation) and a matplotlib
# bar per task take minutes past some 10^4 nodes: past this many tasks DOT and PNG refuse.
DRAW_LIMIT = 20_000


@dataclass(frozen=True, slots=True)
class Block:
    """One lane's busy stretch: ``tasks`` items, busy ``busy`` seconds within [start, end]."""

    lane: int
    start: float
    end: float
    items: int
    busy: float


def merge(intervals: list[tuple[int, float, float]], gap: float) -> list[Block]:
    """``(lane, start, end)`` intervals merged per lane across gaps under ``gap``, by (lane, start)."""
    out: list[Block] = []
    lane, start, end, items, busy = -1, 0.0, 0.0, 0, 0.0
    for ln, s, e in sorted(intervals):
        if ln == lane and s <= end + gap:
            busy += max(e - max(s, end), 0.0)
            end = max(end, e)
            items += 1
            continue
        if items:
            out.append(Block(lane, start, end, items, busy))
        lane, start, end, items, busy = ln, s, e, 1, e - s
    if items:
        out.append(Block(lane, start, end, items, busy))
    return out


def aggregated(sched: Schedule) -> bool:
    """Whether ``sched`` is drawn as busy blocks (more than :data:`DETAIL_LIMIT` tasks)."""
    return len(sched.slots) > DETAIL_LIMIT


def device_blocks(sched: Schedule, gap: float) -> list[Block]:
    """The schedule's busy blocks per device (``lane`` is the device index)."""
    return merge([(s.device, s.start, s.end) for s in sched.slots], gap)


def note(sched: Schedule, what: str, gap: str = "one pixel") -> str:
    """The sentence that says a report aggregates, and why."""
    return (f"{len(sched.slots):,} tasks (more than {DETAIL_LIMIT:,}): the {what} shows each device's "
            f"consecutive busy time as blocks, merged across gaps shorter than {gap}; "
            "the JSON report lists every task.")


def refuse_drawing(sched: Schedule, fmt: str) -> None:
    """Raise a usage error when ``sched`` has too many tasks for ``fmt`` (DOT or PNG)."""
    if len(sched.slots) > DRAW_LIMIT:
        raise OptionsError(f"--{fmt.lower()}: {len(sched.slots):,} tasks is more than the {DRAW_LIMIT:,} a {fmt} "
                           "drawing supports; use --json (every task), --html or --trace (busy blocks past "
                           f"{DETAIL_LIMIT:,} tasks)")
