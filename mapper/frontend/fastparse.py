"""A fast path for the commonest large programs: explicit-cost graphs.

Profiled graphs and the classic scheduling benchmarks are one ``graph`` of
one-line ``task NAME cost { dev: time [unit], ... }`` and ``a -> b [comm T
[unit] | bytes S [unit]]`` statements, thousands of them. Lark's LALR parser
builds a tree of them at about 0.4 ms a line; :func:`fast_parse` reads such a
program line by line with the grammar's own token expressions and builds the
same :class:`~mapper.frontend.syntax.Program`, spans included (a test checks it equal to
Lark's on every program it accepts). Anything else, or anything unusual (a
keyword where a name is, a ``;``, a continuation, a second graph), returns
None, and :func:`mapper.frontend.parse.parse` uses Lark (:mod:`mapper.frontend.lark_parse`),
which also gives the messages for programs with errors.
"""

from __future__ import annotations

import re

from mapper.errors import SourceSpan
from mapper.frontend import nodes as N
from mapper.frontend import syntax as S
from mapper.frontend.lines import EDGE_LINE, ITEM, MIN_LINES, TASK_LINE
from mapper.frontend.syntax import KEYWORDS

#: The grammar's tokens (grammar/mapper.lark), in the lexer's order of preference.
_TOKEN = re.compile(
    r"(?P<ws>[ \t\f]+)|(?P<comment>#[^\n]*)"
    r"|(?P<float>[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)|(?P<int>[0-9]+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<arrow>->)|(?P<punct>[{}:,])"
)


class _Decline(Exception):
    """The text is not of the fast path's form."""


def _tokens(line: str) -> list[tuple[str, str, int]]:
    """``(kind, text, 1-based column)`` of a line's tokens, comments and spaces left out."""
    out: list[tuple[str, str, int]] = []
    pos = 0
    for m in _TOKEN.finditer(line):
        start = m.start()
        if start != pos:  # a character no token takes
            raise _Decline
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws" or kind == "comment":
            continue
        text = m.group()
        if kind == "punct" or (kind == "name" and text in KEYWORDS):
            kind = text
        out.append((kind or "", text, start + 1))
    if pos != len(line):
        raise _Decline
    return out


def fast_parse(text: str, file: str) -> S.Program | None:
    """The program of ``text`` when it is an explicit-cost graph (module docstring), else None."""
    if "\r" in text or "\\" in text or text.count("\n") < MIN_LINES:  # a ';' outside a comment declines below
        return None
    try:
        return _Reader(text, file).program()
    except (_Decline, IndexError, ValueError):
        return None


class _Words(dict[str, str]):
    """Strings by themselves: ``words[s]`` is the first string equal to ``s`` looked up."""

    def __missing__(self, key: str) -> str:
        self[key] = key
        return key


class _Reader:
    def __init__(self, text: str, file: str) -> None:
        self.text = text
        self.file = file
        # one string object per distinct word (device names, units, ``comm``, task names): each
        # match returns a new string, and a huge graph repeats a few words millions of times
        self.word = _Words().__getitem__

    def span(self, line: int, col: int, end: int | None) -> SourceSpan:
        return SourceSpan(self.file, line, col, end)

    def name(self, tok: tuple[str, str, int], line: int) -> S.Name:
        if tok[0] != "name":
            raise _Decline
        return S.Name(tok[1], (), self.span(line, tok[2], tok[2] + len(tok[1])))

    def number(self, tok: tuple[str, str, int], line: int) -> S.Num:
        kind, text, col = tok
        if kind not in ("int", "float"):
            raise _Decline
        value: int | float = int(text) if kind == "int" else float(text)
        return S.Num(value, self.span(line, col, col + len(text)))

    def program(self) -> S.Program:
        graph: tuple[str, int, int] | None = None  # name, line, column of `graph`
        body: list[S.Stmt] = []
        closed: int | None = None
        for k, raw in enumerate(self.text.split("\n"), 1):
            if graph is not None and closed is None:
                stmt = self.task_line(raw, k) if "task" in raw else self.edge_line(raw, k)
                if stmt is not None:
                    body.append(stmt)
                    continue
            toks = _tokens(raw)
            if not toks:
                continue
            if closed is not None:
                raise _Decline  # something after the graph
            if graph is None:
                if [t[0] for t in toks] != ["graph", "name", "{"]:
                    raise _Decline
                graph = (toks[1][1], k, toks[0][2])
            elif [t[0] for t in toks] == ["}"]:
                closed = k
                end = toks[0][2] + 1
            elif toks[0][0] == "task":
                body.append(self.task(toks, k))
            else:
                body.append(self.edge(toks, k))
        if graph is None or closed is None:
            raise _Decline
        name, line, col = graph
        span = self.span(line, col, end if closed == line else None)
        return S.Program(self.file, (S.GraphDef(name, tuple(body), span),), self.text)

    def task_line(self, raw: str, line: int) -> S.TaskStmt | None:
        """A task line read by :data:`TASK_LINE` and :data:`ITEM` (None: take the token path)."""
        m = TASK_LINE.fullmatch(raw)
        if m is None or m.group(1) in KEYWORDS:
            return None
        inner, base = m.group(2), m.start(2) + 1
        items: list[S.Measure] = []
        pos = 0
        span, num_, measure = N.span, N.num, N.measure
        file, word = self.file, self.word
        for it in ITEM.finditer(inner):
            start, end = it.span()
            if start != pos or end == start:
                return None
            pos = end
            key, num, unit = it.groups()
            key = word(key)
            if key in KEYWORDS or unit in KEYWORDS:
                return None
            kc, nc = base + it.start(1), base + it.start(2)
            value: int | float = float(num) if ("." in num or "e" in num or "E" in num) else int(num)
            end = nc + len(num)
            unit_span = None
            if unit is not None:
                unit = word(unit)
                uc = base + it.start(3)
                end = uc + len(unit)
                unit_span = span(file, line, uc, end)
            items.append(measure(key, num_(value, span(file, line, nc, nc + len(num))), unit,
                                 span(file, line, kc, end), unit_span))
            if inner[pos - 1] != ",":
                break
        if pos != len(inner.rstrip(" \t\f")) and pos != len(inner) or not items:
            return None
        close = raw.index("}", base - 1 + len(inner)) + 1
        task_col = raw.index("task") + 1
        name_col = m.start(1) + 1
        cost_col = raw.index("cost", m.end(1)) + 1
        name = N.name(word(m.group(1)), (), span(file, line, name_col, name_col + len(m.group(1))))
        cost = S.Cost(tuple(items), span(file, line, cost_col, close + 1))
        return S.TaskStmt(name, (cost,), span(file, line, task_col, close + 1))

    def task(self, toks: list[tuple[str, str, int]], line: int) -> S.TaskStmt:
        # task NAME cost { KEY : NUM [UNIT] (, KEY : NUM [UNIT])* [,] } [memory NUM [UNIT]] [colocate NAME] [backward]
        close_at = next((k for k, tok in enumerate(toks) if tok[0] == "}"), -1)
        extra = self.trailing(toks[close_at + 1:], line) if close_at > 0 else ()
        toks = toks[:close_at + 1]
        if len(toks) < 7 or toks[2][0] != "cost" or toks[3][0] != "{" or toks[-1][0] != "}":
            raise _Decline
        items: list[S.Measure] = []
        i = 4
        while i < len(toks) - 1:
            key, colon, value = toks[i], toks[i + 1], toks[i + 2]
            if key[0] != "name" or colon[0] != ":":
                raise _Decline
            num = self.number(value, line)
            i += 3
            unit = unit_span = None
            last = value
            if toks[i][0] == "name":
                unit, last = toks[i][1], toks[i]
                unit_span = self.span(line, last[2], last[2] + len(unit))
                i += 1
            items.append(S.Measure(key[1], num, unit, self.span(line, key[2], last[2] + len(last[1])), unit_span))
            if toks[i][0] == ",":
                i += 1
            elif toks[i][0] != "}":
                raise _Decline
        if not items:
            raise _Decline
        close = toks[-1][2] + 1
        cost = S.Cost(tuple(items), self.span(line, toks[2][2], close))
        end = extra[-1].span.end_col or close if extra else close
        return S.TaskStmt(self.name(toks[1], line), (cost, *extra), self.span(line, toks[0][2], end))

    def trailing(self, toks: list[tuple[str, str, int]], line: int) -> tuple[S.Annotation, ...]:
        """``memory NUM [UNIT]``, ``colocate NAME`` and ``backward`` after a task's cost, in any order."""
        out: list[S.Annotation] = []
        i = 0
        while i < len(toks):
            kind, text, col = toks[i]
            if kind == "memory":
                num = self.number(toks[i + 1], line)
                unit = unit_span = None
                last = toks[i + 1]
                if i + 2 < len(toks) and toks[i + 2][0] == "name":
                    last = toks[i + 2]
                    unit, unit_span = last[1], self.span(line, last[2], last[2] + len(last[1]))
                    i += 1
                out.append(S.Memory(num, unit, self.span(line, col, last[2] + len(last[1])), unit_span))
                i += 2
            elif kind == "colocate":
                name = toks[i + 1]
                if name[0] != "name":
                    raise _Decline
                out.append(S.Colocate(name[1], self.span(line, col, name[2] + len(name[1]))))
                i += 2
            elif kind == "backward":
                out.append(S.Backward(self.span(line, col, col + len(text))))
                i += 1
            else:
                raise _Decline
        return tuple(out)

    def edge_line(self, raw: str, line: int) -> S.EdgeStmt | None:
        """An edge line read by :data:`EDGE_LINE` (None: take the token path)."""
        m = EDGE_LINE.fullmatch(raw)
        if m is None:
            return None
        word = self.word
        a, b, kind, num, unit = word(m.group(1)), word(m.group(2)), m.group(3), m.group(4), m.group(5)
        if a in KEYWORDS or b in KEYWORDS or (kind is not None and kind not in ("comm", "bytes")):
            return None
        if unit in KEYWORDS:
            return None
        file, span, name = self.file, N.span, N.name
        ac, bc = m.start(1) + 1, m.start(2) + 1
        src = name(a, (), span(file, line, ac, ac + len(a)))
        dst = name(b, (), span(file, line, bc, bc + len(b)))
        last = m.end(5) if unit is not None else m.end(4) if num is not None else m.end(2)
        whole = span(file, line, ac, last + 1)
        if kind is None:
            return S.EdgeStmt(src, dst, None, None, None, whole, None)
        kind, unit = word(kind), unit if unit is None else word(unit)
        nc = m.start(4) + 1
        value: int | float = float(num) if ("." in num or "e" in num or "E" in num) else int(num)
        unit_span = span(file, line, m.start(5) + 1, m.end(5) + 1) if unit is not None else None
        return S.EdgeStmt(src, dst, kind, N.num(value, span(file, line, nc, nc + len(num))), unit, whole, unit_span)

    def edge(self, toks: list[tuple[str, str, int]], line: int) -> S.EdgeStmt:
        # NAME -> NAME [(comm | bytes) NUM [UNIT]]
        if len(toks) < 3 or toks[1][0] != "arrow":
            raise _Decline
        src, dst = self.name(toks[0], line), self.name(toks[2], line)
        last = toks[-1]
        span = self.span(line, toks[0][2], last[2] + len(last[1]))
        if len(toks) == 3:
            return S.EdgeStmt(src, dst, None, None, None, span, None)
        if toks[3][0] not in ("comm", "bytes") or len(toks) not in (5, 6):
            raise _Decline
        value = self.number(toks[4], line)
        unit = unit_span = None
        if len(toks) == 6:
            if toks[5][0] != "name":
                raise _Decline
            unit = toks[5][1]
            unit_span = self.span(line, toks[5][2], toks[5][2] + len(unit))
        return S.EdgeStmt(src, dst, toks[3][1], value, unit, span, unit_span)
