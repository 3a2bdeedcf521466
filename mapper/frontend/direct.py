"""Text straight to a task graph, for the plain explicit-cost programs huge graphs are written in.

A generated workflow or DAG of 10^5-10^6 tasks is one ``graph`` of one-line ``task NAME cost
{ dev: T [unit], ... }`` and ``a -> b [comm T [unit] | bytes S [unit]]`` statements. The
syntax tree of such a program (:mod:`mapper.frontend.fastparse`) holds some 40 nodes a task
line, only for the lowerer to read each once; :func:`direct_graph` reads the lines with the
line grammar the fast parser uses (:mod:`mapper.frontend.lines`) and makes the
:class:`~mapper.core.graph.TaskGraph` the lowerer would (tasks, spans, costs, edges and their
order: a test compares the two), with no tree. It declines (None) on anything else: another
form of statement, an unusual spelling, and every error (an unknown name, a duplicate, a
cycle, a value out of range), which
the parser and the lowerer then report with its place in the file.
"""

from __future__ import annotations

import io
import re
from typing import Any

from mapper.core.graph import Edge, Placement, Task, TaskGraph
from mapper.core.heap import collection_paused
from mapper.errors import InputError, SourceSpan
from mapper.frontend.lines import EDGE_LINE, MIN_LINES, NAME, NUMBER, TASK_LINE
from mapper.frontend.lowering.program import MAX_TASKS
from mapper.frontend.lowering.values import BYTE_UNITS, MAX_SECONDS, MAX_WORK, MIN_SECONDS, TIME_UNITS
from mapper.frontend.nodes import builder
from mapper.frontend.syntax import KEYWORDS

__all__ = ["direct_graph"]

#: One cost entry with its spaces and separator (group 1), as :data:`mapper.frontend.lines.ITEM` reads it.
_ITEM = re.compile(rf"([ \t\f]*({NAME})[ \t\f]*:[ \t\f]*({NUMBER})(?:[ \t\f]*({NAME}))?[ \t\f]*(?:,|$))")
#: A cost entry's colon and number (group 1): splitting a cost at them leaves the text around the numbers.
_NUMBERS = re.compile(rf":[ \t\f]*({NUMBER})").split
#: A line of spaces and a comment at most, the graph's head and its closing brace.
_BLANK = re.compile(r"[ \t\f]*(?:#[^\n]*)?\n?")
_HEAD = re.compile(rf"[ \t\f]*graph[ \t\f]+({NAME})[ \t\f]*\{{[ \t\f]*(?:#[^\n]*)?\n?")
_CLOSE = re.compile(r"[ \t\f]*\}[ \t\f]*(?:#[^\n]*)?\n?")

#: The fast parser's line expressions, a line's newline allowed (lines are read with theirs).
_TASK_NL = re.compile(TASK_LINE.pattern + r"\n?")
_EDGE_NL = re.compile(EDGE_LINE.pattern + r"\n?")

_task = builder(Task)
_edge = builder(Edge)
_span = builder(SourceSpan)
_ANYWHERE = Placement()


class _Decline(Exception):
    """Not a plain explicit-cost program, or one with an error."""


def direct_graph(text: str, file: str) -> TaskGraph | None:
    """The graph of ``text`` (the contents of ``file``) when it is a plain explicit-cost program
    without errors (module docstring), else None."""
    if "\r" in text or "\\" in text or text.count("\n") < MIN_LINES:
        return None
    try:
        with collection_paused():
            return _Reader(file).read(text)
    except (_Decline, InputError):  # InputError: a cycle, which the lowerer reports at its edge
        return None


def _seconds(num: str, unit: str | None) -> float:
    """A literal time in seconds (:func:`mapper.frontend.lowering.values.literal_seconds`)."""
    value = float(num)
    if unit is not None:
        scale = TIME_UNITS.get(unit)
        if scale is None:
            raise _Decline
        value = value / scale
    if value == 0 or MIN_SECONDS <= value <= MAX_SECONDS:
        return value
    raise _Decline


def _in_range(values: list[float]) -> bool:
    """Each of ``values`` is 0 or a time from :data:`MIN_SECONDS` to :data:`MAX_SECONDS`."""
    if max(values) > MAX_SECONDS:
        return False
    return min(values) >= MIN_SECONDS or all(v == 0 or v >= MIN_SECONDS for v in values)


#: A cost's device names and units -> its sorted device names (one string object each), the
#: order that sorts its entries, and each entry's divisor (1 without a unit: ``x / 1.0 == x``).
_Shape = tuple[tuple[str, ...], tuple[int, ...] | None, tuple[float, ...]]


class _Reader:
    def __init__(self, file: str) -> None:
        self.file = file
        self.tasks: list[Task] = []
        self.index: dict[str, int] = {}  # task name -> index
        self.words: dict[str, str] = {}  # one string object per device name
        self.shapes: dict[tuple[tuple[str, ...], tuple[str, ...]], _Shape] = {}
        self.skeletons: dict[tuple[str, ...], _Shape] = {}  # a cost's text around its numbers -> shape
        self.keys: list[int] = []  # each edge's dst * n + src, n = 2^32
        self.specs: dict[int, tuple[float, float | None]] = {}  # key -> (bytes, comm)

    def read(self, text: str) -> TaskGraph:
        name: str | None = None
        closed = False
        task, edge = self.task, self.edge
        blank, close, head = _BLANK.fullmatch, _CLOSE.fullmatch, _HEAD.fullmatch
        for k, raw in enumerate(io.StringIO(text), 1):
            if name is not None and not closed:
                if ("task" in raw and task(raw, k)) or edge(raw):
                    continue
                if close(raw):
                    closed = True
                    continue
            if blank(raw):
                continue
            if name is not None:
                raise _Decline  # a statement of another form, or something after the graph
            m = head(raw)
            if m is None or m.group(1) in KEYWORDS:
                raise _Decline
            name = m.group(1)
        if name is None or not closed or not self.tasks or len(self.tasks) > MAX_TASKS:
            raise _Decline
        return TaskGraph(name, tuple(self.tasks), self.edges())

    def task(self, raw: str, line: int) -> bool:
        """Add the task of a task line; False when ``raw`` is not one."""
        m = _TASK_NL.fullmatch(raw)
        if m is None:
            return False
        name, inner = m.group(1, 2)
        if name in KEYWORDS or name in self.index:
            raise _Decline
        parts = _NUMBERS(inner)  # the text around the numbers, the numbers
        skeleton = tuple(parts[0::2])
        shape = self.skeletons.get(skeleton)
        if shape is None:
            shape = self.skeletons[skeleton] = self.cost_shape(inner, parts[1::2])
        names, order, scales = shape
        values = list(map(float.__truediv__, map(float, parts[1::2]), scales))
        if not _in_range(values):
            raise _Decline
        if order is not None:
            values = [values[i] for i in order]
        idx = len(self.tasks)
        span = _span(self.file, line, raw.index("task") + 1, m.end(2) + 2)  # to just past the brace
        self.tasks.append(_task(idx, name, "task", (), (), None, 0.0, 0.0, 0.0, 1.0, 0, _ANYWHERE,
                                tuple(zip(names, values)), span, (), None, "", False, "", (), None))
        self.index[name] = idx
        return True

    def cost_shape(self, inner: str, numbers: list[str]) -> _Shape:
        """The :data:`_Shape` of a cost's entries ``inner`` read with the entry expression, which must
        find the numbers ``numbers`` (then every cost with the same text around its numbers reads
        alike: a number's first match is the same, and what follows it is the same text)."""
        items = _ITEM.findall(inner)
        if not items:
            raise _Decline
        whole, keys, nums, units = zip(*items)
        size = sum(map(len, whole))  # the entries follow each other from the brace on
        if size != len(inner) and size != len(inner.rstrip(" \t\f")) or list(nums) != numbers:
            raise _Decline
        shape = self.shapes.get((keys, units))
        if shape is None:
            shape = self.shapes[(keys, units)] = self.shape(keys, units)
        return shape

    def shape(self, keys: tuple[str, ...], units: tuple[str, ...]) -> _Shape:
        """The :data:`_Shape` of a cost's device names and units (declines on a keyword, a device
        given twice or another unit)."""
        if len(set(keys)) != len(keys) or any(w in KEYWORDS for w in (*keys, *units)):
            raise _Decline
        if any(u and u not in TIME_UNITS for u in units):
            raise _Decline
        order = sorted(range(len(keys)), key=keys.__getitem__)
        names = tuple(self.words.setdefault(keys[i], keys[i]) for i in order)
        scales = tuple(TIME_UNITS[u] if u else 1.0 for u in units)
        return names, None if order == sorted(order) else tuple(order), scales

    def edge(self, raw: str) -> bool:
        """Add the edge of an edge line; False when ``raw`` is not one."""
        m = _EDGE_NL.fullmatch(raw)
        if m is None:
            return False
        a, b, kind, num, unit = m.groups()
        if kind is not None and kind not in ("comm", "bytes") or unit in KEYWORDS:
            return False
        src, dst = self.index.get(a), self.index.get(b)
        if src is None or dst is None or src == dst:  # KEYWORDS name no task
            raise _Decline
        key = (dst << 32) | src
        if key in self.specs:
            raise _Decline
        spec: tuple[float, float | None]
        if kind is None:
            spec = (0.0, None)
        elif kind == "comm":
            spec = (0.0, _seconds(num, unit))
        else:
            size = float(num)
            if unit is not None:
                if unit not in BYTE_UNITS:
                    raise _Decline
                size = size * BYTE_UNITS[unit]
            if not size <= MAX_WORK:
                raise _Decline
            spec = (size, None)
        self.specs[key] = spec
        self.keys.append(key)
        return True

    def edges(self) -> tuple[Edge, ...]:
        """The edges by (dst, src), as :func:`mapper.frontend.lowering.edges.graph_edges` orders them."""
        keys = self.keys
        if any(keys[i] > keys[i + 1] for i in range(len(keys) - 1)):
            keys.sort()
        specs = self.specs
        low = (1 << 32) - 1
        out: list[Any] = []
        append = out.append
        for i, key in enumerate(keys):
            size, comm = specs[key]
            append(_edge(i, key & low, key >> 32, size, comm, ""))
        return tuple(out)
