"""Busy intervals per device, for insertion-based list scheduling.

The insertion policy of HEFT (Topcuoglu, Hariri, Wu, IEEE TPDS 13(3), 2002):
a task goes into the earliest idle gap, between two tasks already placed on
the device, that starts no earlier than its ready time and is long enough for
it; otherwise after the last task.

Finding that gap by walking the device's tasks from the ready time costs time
linear in the tasks placed, so list scheduling a wide graph was quadratic
(10,000 independent tasks: 10 s). Each device therefore also keeps its idle
gaps of positive length in time order, in blocks that know their longest gap
(square-root decomposition), so a search skips every block too short for the
task. The blocks answer exactly as the walk does: a block is skipped only when
rounding cannot make any of its gaps fit, and each gap is then tested with the
walk's own arithmetic. Zero-length tasks, which fit zero-length gaps too, take
the walk.
"""

from __future__ import annotations

import math
from bisect import bisect_right

#: Gaps per block (a block splits at twice this).
BLOCK = 64


def _slack(end: float) -> float:
    """What rounding may take from a gap ending at ``end``: a fit test ``start + d <= end``
    can hold for a computed length ``end - start`` this much below ``d``."""
    return 4.0 * math.ulp(abs(end)) + 1e-300


class _Gaps:
    """The positive idle gaps of one device, sorted by start, in blocks of parallel lists:
    starts, ends, and lengths plus rounding slack (the block's longest is their max)."""

    __slots__ = ("starts", "ends", "lens", "firsts", "longest")

    def __init__(self) -> None:
        self.starts: list[list[float]] = []
        self.ends: list[list[float]] = []
        self.lens: list[list[float]] = []
        self.firsts: list[float] = []  # each block's first start
        self.longest: list[float] = []  # each block's longest gap, plus its rounding slack

    def add(self, start: float, end: float) -> None:
        if not end > start:
            return
        length = end - start + _slack(end)
        if not self.starts:
            self.starts.append([start])
            self.ends.append([end])
            self.lens.append([length])
            self.firsts.append(start)
            self.longest.append(length)
            return
        b = max(0, bisect_right(self.firsts, start) - 1)
        starts = self.starts[b]
        i = bisect_right(starts, start)
        starts.insert(i, start)
        self.ends[b].insert(i, end)
        self.lens[b].insert(i, length)
        if i == 0:
            self.firsts[b] = start
        if length > self.longest[b]:
            self.longest[b] = length
        if len(starts) > 2 * BLOCK:
            for parts in (self.starts, self.ends, self.lens):
                block = parts[b]
                parts[b:b + 1] = [block[:BLOCK], block[BLOCK:]]
            self.firsts[b:b + 1] = [self.starts[b][0], self.starts[b + 1][0]]
            self.longest[b:b + 1] = [max(self.lens[b]), max(self.lens[b + 1])]

    def remove_containing(self, start: float, end: float) -> tuple[float, float] | None:
        """Remove and return the gap that holds ``[start, end]``, if any."""
        b = bisect_right(self.firsts, start) - 1
        if b < 0:
            return None
        starts, ends = self.starts[b], self.ends[b]
        i = bisect_right(starts, start) - 1
        if i < 0 or not (starts[i] <= start and end <= ends[i]):
            return None
        gap = (starts.pop(i), ends.pop(i))
        length = self.lens[b].pop(i)
        if not starts:
            del self.starts[b], self.ends[b], self.lens[b], self.firsts[b], self.longest[b]
            return gap
        if i == 0:
            self.firsts[b] = starts[0]
        if length >= self.longest[b]:
            self.longest[b] = max(self.lens[b])
        return gap

    def first_fit(self, ready: float, duration: float) -> float | None:
        """The start in the earliest gap where ``duration`` fits from ``ready`` on, or None."""
        if not self.starts:
            return None
        b = max(0, bisect_right(self.firsts, ready) - 1)
        i = max(0, bisect_right(self.starts[b], ready) - 1)
        for k in range(b, len(self.starts)):
            if k > b and self.longest[k] < duration:
                continue
            starts, ends = self.starts[k], self.ends[k]
            for j in range(i if k == b else 0, len(starts)):
                cand = ready if ready > starts[j] else starts[j]
                if cand + duration <= ends[j]:
                    return cand
        return None


class Timeline:
    """The tasks placed on each device, in start order, and their idle gaps."""

    def __init__(self, n_devices: int) -> None:
        self._starts: list[list[float]] = [[] for _ in range(n_devices)]
        self._ends: list[list[float]] = [[] for _ in range(n_devices)]
        self._tasks: list[list[int]] = [[] for _ in range(n_devices)]
        self._gaps = [_Gaps() for _ in range(n_devices)]

    def slot(self, d: int, ready: float, duration: float, insertion: bool = True) -> tuple[float, int]:
        """``(start, position)`` of the earliest fit on ``d``; without
        ``insertion`` only after the device's last task."""
        ends = self._ends[d]
        if not insertion or not ends:
            return max(ready, ends[-1] if ends else 0.0), len(ends)
        if duration > 0:
            start = self._gaps[d].first_fit(ready, duration)
            if start is not None:
                return start, bisect_right(ends, start)
            return max(ready, ends[-1]), len(ends)
        return self._walk(d, ready, duration)

    def _walk(self, d: int, ready: float, duration: float) -> tuple[float, int]:
        """The gap search by walking the tasks from the ready time (zero-length tasks)."""
        ends, starts = self._ends[d], self._starts[d]
        i = bisect_right(ends, ready)
        prev_end = ends[i - 1] if i > 0 else 0.0
        while i < len(ends):
            cand = max(ready, prev_end)
            if cand + duration <= starts[i]:
                return cand, i
            prev_end = ends[i]
            i += 1
        return max(ready, prev_end), len(ends)

    def place(self, d: int, position: int, task: int, start: float, end: float) -> None:
        ends = self._ends[d]
        gaps = self._gaps[d]
        if position == len(ends):  # after the last task: the time between them becomes a gap
            gaps.add(ends[-1] if ends else 0.0, start)
        else:
            gap = gaps.remove_containing(start, end)
            if gap is not None:
                gaps.add(gap[0], start)
                gaps.add(end, gap[1])
        self._starts[d].insert(position, start)
        ends.insert(position, end)
        self._tasks[d].insert(position, task)

    def last_end(self, d: int) -> float:
        return self._ends[d][-1] if self._ends[d] else 0.0

    def order(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(ts) for ts in self._tasks)
