"""Weighted task graphs as the optimal-scheduling literature exchanges them: DOT and GXL.

The benchmark set of optimal task scheduling with communication delays
(Sinnen's group, University of Auckland; e.g. Orr and Sinnen, "Optimal task
scheduling for partially heterogeneous systems", Parallel Computing 2021, and
the ILPs of Venugopalan and Sinnen, IEEE TPDS 2015) gives each graph as a
Graphviz DOT digraph or a GXL document whose nodes carry a ``Weight`` (the
task's time) and whose edges carry a ``Weight`` (the transfer's time when the
two tasks run on different processors, 0 on the same one), for ``N``
identical, fully connected processors (the P|prec,c_ij|Cmax problem):

    digraph "Nodes_7_OutTree" {          <gxl><graph id="g" edgemode="directed">
        a   [Weight=5];                    <node id="a"><attr name="Weight"><int>5</int></attr></node>
        a -> b  [Weight=15];               <edge from="a" to="b"><attr name="Weight"><int>15</int></attr></edge>
    }                                    </graph></gxl>

:func:`read_weighted` reads either into a :class:`WeightedGraph`; every error
names the line and column in the file. :func:`weighted_dsl` writes the DSL
(kernel-less tasks with a cost for kind ``cpu``, edges with ``comm``) and
:func:`procs_platform` the platform of ``N`` identical processors.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from mapper.core.files import Unreadable, read_text
from mapper.core.graph import Edge, Task, TaskGraph, topological_order
from mapper.errors import InputError, SourceSpan
from mapper.frontend.importers.dsl_writer import comment_text, dsl_name, dsl_names, graph_to_dsl
from mapper.frontend.lowering.values import MAX_SECONDS, MIN_SECONDS

#: The formats :func:`read_weighted` reads.
WEIGHTED_FORMATS = ("dot", "gxl")
#: The most processors ``--procs`` may ask for (a platform holds at most that many devices).
MAX_PROCS = 1024
#: The most nodes and edges of one graph (the benchmark sets' largest have a few thousand).
MAX_NODES = 250_000
MAX_EDGES = 500_000
#: The longest name, string or Weight text, in characters.
MAX_STRING = 65_536
#: A Weight: a decimal number in ASCII digits (no signs but ``-``, no ``_``, no other scripts' digits).
_NUMBER = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", re.ASCII)


@dataclass(frozen=True, slots=True)
class WeightedGraph:
    """Nodes with weights and edges with weights, in file order."""

    file: str
    name: str
    nodes: tuple[tuple[str, float], ...]
    edges: tuple[tuple[str, str, float], ...]


def _fail(file: str, line: int, col: int, message: str) -> InputError:
    return InputError(message, span=SourceSpan(file, line, col), obj=file)


def _weight(file: str, line: int, col: int, raw: str, what: str) -> float:
    if not _NUMBER.fullmatch(raw):
        raise _fail(file, line, col, f"{what}: expected a number in ASCII digits as its Weight, got {raw[:40]!r}")
    value = float(raw)
    if not math.isfinite(value) or value < 0 or value > MAX_SECONDS or 0 < value < MIN_SECONDS:
        raise _fail(file, line, col, f"{what}: a Weight is a time from 0 to {MAX_SECONDS:g} (0 or at least "
                                     f"{MIN_SECONDS:g}), got {raw[:40]!r}")
    return value


class _Collector:
    """Nodes and edges as a reader finds them, checked as they come."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.nodes: dict[str, float | None] = {}
        self.where: dict[str, tuple[int, int]] = {}
        self.edges: dict[tuple[str, str], float | None] = {}
        self.edge_at: dict[tuple[str, str], tuple[int, int]] = {}

    def node(self, name: str, weight: float | None, line: int, col: int) -> None:
        if name in self.nodes and weight is not None and self.nodes[name] is not None:
            first = self.where[name]
            raise _fail(self.file, line, col, f"node {name!r} is given twice (first at line {first[0]})")
        if len(self.nodes) >= MAX_NODES:
            raise _fail(self.file, line, col, f"more than {MAX_NODES:,} nodes (the limit of a weighted task graph)")
        if weight is not None or name not in self.nodes:
            self.nodes[name] = weight
            self.where.setdefault(name, (line, col))

    def edge(self, a: str, b: str, weight: float | None, line: int, col: int) -> None:
        if a == b:
            raise _fail(self.file, line, col, f"edge {a!r} -> {b!r} joins a node to itself")
        if (a, b) in self.edges:
            raise _fail(self.file, line, col, f"edge {a!r} -> {b!r} is given twice "
                                              f"(first at line {self.edge_at[(a, b)][0]})")
        if len(self.edges) >= MAX_EDGES:
            raise _fail(self.file, line, col, f"more than {MAX_EDGES:,} edges (the limit of a weighted task graph)")
        for n in (a, b):
            if n not in self.nodes:
                self.node(n, None, line, col)
        self.edges[(a, b)] = weight
        self.edge_at[(a, b)] = (line, col)

    def result(self, name: str) -> WeightedGraph:
        if not self.nodes:
            raise _fail(self.file, 1, 1, "the graph has no nodes")
        for n, w in self.nodes.items():
            if w is None:
                raise _fail(self.file, *self.where[n], f"node {n!r} has no Weight (its time)")
        for (a, b), w in self.edges.items():
            if w is None:
                raise _fail(self.file, *self.edge_at[(a, b)], f"edge {a!r} -> {b!r} has no Weight (its transfer time)")
        _acyclic(self)
        return WeightedGraph(self.file, name, tuple((n, float(w or 0.0)) for n, w in self.nodes.items()),
                             tuple((a, b, float(w or 0.0)) for (a, b), w in self.edges.items()))


def _acyclic(c: _Collector) -> None:
    names = list(c.nodes)
    at = {n: i for i, n in enumerate(names)}
    succ: list[list[int]] = [[] for _ in names]
    for a, b in c.edges:
        succ[at[a]].append(at[b])
    order, indeg = topological_order(succ)
    if len(order) < len(names):
        n = next(names[i] for i, d in enumerate(indeg) if d > 0)
        raise _fail(c.file, *c.where[n], f"the edges form a cycle through node {n!r}: a task graph is acyclic")


# -- DOT -----------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+) | (?P<comment>//[^\n]*|/\*.*?\*/|^\#[^\n]*)
  | (?P<arrow>->|--) | (?P<punct>[\[\]{};,=:])
  | (?P<quote>")
  | (?P<id>[A-Za-z_\x80-\U0010ffff][A-Za-z_0-9\x80-\U0010ffff]*|-?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?)
  | (?P<bad>.)""", re.X | re.S | re.M)
_ESCAPED_QUOTE = re.compile(r'\\"')


def _string_end(text: str, start: int) -> int:
    """The index of the quote that closes the string opened at ``start`` (-1: none); linear."""
    i = start + 1
    while True:
        j = text.find('"', i)
        if j < 0:
            return -1
        k = j
        while k > i and text[k - 1] == "\\":
            k -= 1
        if (j - k) % 2 == 0:  # an even run of backslashes before it: not escaped
            return j
        i = j + 1


def _tokens(text: str, file: str) -> Iterator[tuple[str, str, int, int]]:
    """``(kind, text, line, column)`` of each token, one at a time (a string unquoted, ``\\"`` undone)."""
    line, start, pos = 1, 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m is not None  # ``bad`` takes any character
        kind, end = m.lastgroup or "bad", m.end()
        col = pos - start + 1
        if kind == "bad":
            value = m.group()
            shown = repr(value) if value.isprintable() else f"U+{ord(value):04X}"
            raise _fail(file, line, col, f"unexpected character {shown}")
        if kind == "quote":
            close = _string_end(text, pos)
            if close < 0:
                raise _fail(file, line, col, "a string is not closed")
            if close - pos - 1 > MAX_STRING:
                raise _fail(file, line, col, f"a string of {close - pos - 1:,} characters (the limit is "
                                             f"{MAX_STRING:,})")
            kind, end = "string", close + 1
            yield kind, _ESCAPED_QUOTE.sub('"', text[pos + 1:close]), line, col
        elif kind != "ws" and kind != "comment":
            if end - pos > MAX_STRING:
                raise _fail(file, line, col, f"a name of {end - pos:,} characters (the limit is {MAX_STRING:,})")
            yield kind, m.group(), line, col
            pos = end
            continue  # names, numbers and punctuation hold no line break
        newlines = text.count("\n", pos, end)
        if newlines:
            line += newlines
            start = text.rindex("\n", pos, end) + 1
        pos = end


class _DotParser:
    """A recursive-descent reader over :func:`_tokens`, one token of look-ahead."""

    def __init__(self, text: str, file: str) -> None:
        self.tokens = _tokens(text, file)
        self.file = file
        self.last: tuple[str, str, int, int] | None = None
        self.next: tuple[str, str, int, int] = self._pull()

    def _pull(self) -> tuple[str, str, int, int]:
        tok = next(self.tokens, None)
        if tok is None:
            return ("eof", "", *self._end())
        return tok

    def advance(self) -> tuple[str, str, int, int]:
        tok = self.next
        if tok[0] != "eof":
            self.last = tok
            self.next = self._pull()
        return tok

    def peek(self) -> tuple[str, str, int, int]:
        return self.next

    def _end(self) -> tuple[int, int]:
        return (self.last[2], self.last[3] + len(self.last[1])) if self.last else (1, 1)

    def take(self, kind: str, value: str | None = None, what: str = "") -> tuple[str, str, int, int]:
        tok = self.peek()
        if tok[0] != kind or (value is not None and tok[1] != value):
            want = what or (repr(value) if value else kind)
            got = "the end of the file" if tok[0] == "eof" else repr(tok[1][:40])
            raise _fail(self.file, tok[2], tok[3], f"expected {want}, got {got}")
        self.advance()
        return tok

    def word(self, what: str) -> tuple[str, int, int]:
        tok = self.peek()
        if tok[0] not in ("id", "string"):
            self.take("id", what=what)
        self.advance()
        return tok[1], tok[2], tok[3]

    def attrs(self) -> dict[str, tuple[str, int, int]]:
        out: dict[str, tuple[str, int, int]] = {}
        while self.peek()[1] == "[":
            self.take("punct", "[")
            while self.peek()[1] != "]":
                key, kline, kcol = self.word("an attribute name")
                self.take("punct", "=")
                value, line, col = self.word("an attribute value")
                if key.lower() == "weight" and "weight" in out:
                    raise _fail(self.file, kline, kcol, f"the Weight is given twice (first at line {out['weight'][1]})")
                out[key.lower()] = (value, line, col)
                if self.peek()[1] in (",", ";"):
                    self.advance()
            self.take("punct", "]")
        return out

    def parse(self) -> WeightedGraph:
        c = _Collector(self.file)
        tok = self.peek()
        if tok[0] == "id" and tok[1].lower() == "strict":
            self.advance()
            tok = self.peek()
        if tok[0] == "id" and tok[1].lower() == "graph":
            raise _fail(self.file, tok[2], tok[3], "an undirected graph: a task graph is a digraph")
        self.take("id", "digraph", "'digraph'")
        name = os.path.splitext(os.path.basename(self.file))[0]
        if self.peek()[0] in ("id", "string"):
            name = self.word("a graph name")[0]
        self.take("punct", "{")
        while self.peek()[1] != "}":
            kind, value, line, col = self.peek()
            if kind == "eof":
                self.take("punct", "}")
            if kind == "punct" and value == ";":
                self.advance()
                continue
            if kind == "id" and value.lower() in ("graph", "node", "edge"):
                self.advance()
                self.attrs()  # defaults: no weights are taken from them
                continue
            if kind == "id" and value.lower() == "subgraph" or value == "{":
                raise _fail(self.file, line, col, "subgraphs are not supported in a weighted task graph")
            first, line, col = self.word("a node name")
            if self.peek()[1] == "=":  # a graph attribute
                self.advance()
                self.word("a value")
                continue
            chain = [(first, line, col)]
            while self.peek()[0] == "arrow":
                arrow = self.take("arrow")
                if arrow[1] == "--":
                    raise _fail(self.file, arrow[2], arrow[3], "an undirected edge '--': a task graph is a digraph")
                chain.append(self.word("a node name"))
            at = self.attrs()
            w = at.get("weight")
            if len(chain) == 1:
                c.node(first, None if w is None else _weight(self.file, w[1], w[2], w[0], f"node {first!r}"),
                       line, col)
            else:
                for (a, la, ca), (b, _, _) in zip(chain, chain[1:]):
                    c.edge(a, b, None if w is None else _weight(self.file, w[1], w[2], w[0], f"edge {a!r} -> {b!r}"),
                           la, ca)
        self.take("punct", "}")
        if self.peek()[0] != "eof":
            tok = self.peek()
            raise _fail(self.file, tok[2], tok[3], "text after the graph's closing '}'")
        return c.result(name)


def parse_dot(text: str, file: str = "<string>") -> WeightedGraph:
    """A DOT digraph with ``Weight`` on nodes and edges (module docstring)."""
    return _plain_dot(text, file) or _DotParser(text, file).parse()


_NAME = r'(?:"([^"\\\n]*)"|([A-Za-z_][A-Za-z_0-9]*|[0-9]+))'
_VALUE = r'(?:"([^"\\\n]*)"|(-?[0-9.]+(?:[eE][-+]?[0-9]+)?))'
_PLAIN_HEAD = re.compile(r'[ \t\r]*(?:[sS][tT][rR][iI][cC][tT][ \t\r]+)?digraph'
                         r'(?:[ \t\r]*"([^"\\\n]*)"|[ \t\r]+([A-Za-z_][A-Za-z_0-9]*))?[ \t\r]*\{[ \t\r]*')
_PLAIN_LINE = re.compile(rf'[ \t\r]*{_NAME}(?:[ \t\r]*->[ \t\r]*{_NAME})?[ \t\r]*\[[ \t\r]*([A-Za-z]+)[ \t\r]*='
                         rf'[ \t\r]*{_VALUE}[ \t\r]*\][ \t\r]*;?[ \t\r]*')
#: Below this many lines the token path is fast enough.
_PLAIN_MIN_LINES = 200
_KEYWORDS = frozenset({"graph", "node", "edge", "subgraph", "strict", "digraph"})


def _plain_dot(text: str, file: str) -> WeightedGraph | None:
    """The graph of a DOT file written one statement a line, as the benchmark sets write
    them (``a [Weight=5];``, ``a -> b [Weight=15];``), read a line at a time; None for
    anything else or anything wrong, which the token path then reads (and words the error)."""
    lines = text.split("\n")
    if len(lines) < _PLAIN_MIN_LINES:
        return None
    head = _PLAIN_HEAD.fullmatch(lines[0])
    if head is None:
        return None
    name = next((g for g in head.groups() if g is not None), os.path.splitext(os.path.basename(file))[0])
    c = _Collector(file)
    try:
        for k, raw in enumerate(lines[1:], 2):
            m = _PLAIN_LINE.fullmatch(raw)
            if m is None:
                if raw.strip(" \t\r") == "}" and not "".join(lines[k:]).strip(" \t\r"):
                    return c.result(name)
                if raw.strip(" \t\r"):
                    return None
                continue
            qa, a, qb, b, key, qw, w = m.groups()
            if (a or "").lower() in _KEYWORDS or (b or "").lower() in _KEYWORDS or key.lower() != "weight":
                return None
            a = qa if qa is not None else a
            b = qb if qb is not None else b
            raw_weight = qw if qw is not None else w
            col = m.start(1) - 1 if qa is not None else m.start(2)  # a string's column is its opening quote's
            wcol = m.start(6) - 1 if qw is not None else m.start(7)
            if b is None:
                c.node(a, _weight(file, k, wcol + 1, raw_weight, f"node {a!r}"), k, col + 1)
            else:
                c.edge(a, b, _weight(file, k, wcol + 1, raw_weight, f"edge {a!r} -> {b!r}"), k, col + 1)
    except InputError:
        return None
    return None


# -- GXL -----------------------------------------------------------------------------------------

#: Characters handed to the XML parser at a time.
_GXL_CHUNK = 1 << 20


def parse_gxl(text: str, file: str = "<string>") -> WeightedGraph:
    """A GXL document of one ``<graph>`` whose nodes and edges have a ``Weight`` attribute (module
    docstring), read by a streaming parser in linear time. Entity declarations are refused (no
    document may expand itself); nothing is fetched."""
    import xml.parsers.expat

    m = re.search(r"<!ENTITY", text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        raise _fail(file, line, m.start() - text.rfind("\n", 0, m.start()), "entity declarations are not allowed")
    c = _Collector(file)
    p = xml.parsers.expat.ParserCreate("utf-8")  # the text is decoded already: its declaration is not followed
    p.buffer_text = True
    stack: list[str] = []
    state: dict = {"name": os.path.splitext(os.path.basename(file))[0], "owner": None, "attr": None,
                   "text": [], "size": 0, "values": 0, "graphs": 0}

    def where() -> tuple[int, int]:
        return p.CurrentLineNumber, p.CurrentColumnNumber + 1

    def long(value: str, what: str) -> str:
        if len(value) > MAX_STRING:
            raise _fail(file, *where(), f"{what} of {len(value):,} characters (the limit is {MAX_STRING:,})")
        return value

    def start(tag: str, attrs: dict[str, str]) -> None:
        stack.append(tag)
        line, col = where()
        if tag == "graph" and len(stack) <= 2:
            state["graphs"] += 1
            if state["graphs"] > 1:
                raise _fail(file, line, col, "a second <graph>: a file holds one task graph")
            state["name"] = long(attrs.get("id", state["name"]), "a graph id")
            if attrs.get("edgemode", "directed") not in ("directed", "defaultdirected"):
                raise _fail(file, line, col, f"edgemode {attrs.get('edgemode')!r}: a task graph is directed")
        elif tag == "node":
            if "id" not in attrs:
                raise _fail(file, line, col, "a node without an id")
            state["owner"] = ("node", long(attrs["id"], "a node id"), line, col, [None])
        elif tag == "edge":
            if "from" not in attrs or "to" not in attrs:
                raise _fail(file, line, col, "an edge without from and to")
            state["owner"] = ("edge", (long(attrs["from"], "a node id"), long(attrs["to"], "a node id")),
                              line, col, [None])
        elif tag == "attr" and state["owner"] is not None and len(stack) >= 2 and stack[-2] in ("node", "edge"):
            state["attr"] = attrs.get("name", "").lower()
            state["text"], state["size"], state["values"] = [], 0, 0
            if state["attr"] == "weight" and state["owner"][4][0] is not None:
                raise _fail(file, line, col, f"the Weight of {_owner(state['owner'])} is given twice")
        elif tag in ("rel", "relend", "hypergraph") or tag == "graph":
            raise _fail(file, line, col, f"<{tag}> is not supported in a weighted task graph")
        elif state["attr"] == "weight" and stack[-2] == "attr":
            state["values"] += 1
            if state["values"] > 1:
                raise _fail(file, line, col, f"the Weight of {_owner(state['owner'])} holds more than one value")

    def data(chunk: str) -> None:
        if state["attr"] != "weight":
            return
        text, word = state["text"], chunk.strip()
        if chunk[:1].isspace() and text and text[-1] != " ":
            text.append(" ")  # a run of white space (2 MB of newlines) kept as one space
        if word:
            state["size"] += len(word)
            if state["size"] > MAX_STRING:
                raise _fail(file, *where(), f"the Weight of {_owner(state['owner'])} is more than "
                                            f"{MAX_STRING:,} characters long")
            text.append(word)
            if chunk[-1:].isspace():
                text.append(" ")

    def end(tag: str) -> None:
        stack.pop()
        owner = state["owner"]
        if tag == "attr" and state["attr"] is not None and stack and stack[-1] in ("node", "edge"):
            if state["attr"] == "weight" and owner is not None:
                line, col = where()
                owner[4][0] = _weight(file, line, col, "".join(state["text"]).strip(), _owner(owner))
            state["attr"] = None
        elif tag in ("node", "edge") and owner is not None:
            kind, key, line, col, w = owner
            if kind == "node":
                c.node(key, w[0], line, col)
            else:
                c.edge(key[0], key[1], w[0], line, col)
            state["owner"] = None

    p.StartElementHandler = start
    p.EndElementHandler = end
    p.CharacterDataHandler = data
    p.EntityDeclHandler = lambda *a: (_ for _ in ()).throw(_fail(file, *where(), "entity declarations are not allowed"))
    try:
        for k in range(0, len(text), _GXL_CHUNK):
            p.Parse(_utf8(text, k, file), False)
        p.Parse(b"", True)
    except xml.parsers.expat.ExpatError as err:
        why = xml.parsers.expat.errors.messages.get(err.code, "error")
        raise _fail(file, err.lineno, err.offset + 1, f"not well-formed XML: {why}") from None
    return c.result(state["name"])


def _owner(owner: tuple) -> str:
    """Words for the node or edge whose attributes are being read."""
    return f"node {owner[1]!r}" if owner[0] == "node" else f"edge {owner[1][0]!r} -> {owner[1][1]!r}"


def _utf8(text: str, k: int, file: str) -> bytes:
    """The UTF-8 bytes of ``text``'s chunk at ``k``; InputError at a lone surrogate."""
    try:
        return text[k:k + _GXL_CHUNK].encode("utf-8")
    except UnicodeEncodeError as err:
        at = k + err.start
        line, col = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        raise _fail(file, line, col, "not valid text (a lone surrogate)") from None


def read_weighted(path: str | os.PathLike[str], fmt: str) -> WeightedGraph:
    """Read a ``dot`` or ``gxl`` file; InputError naming the place at fault."""
    file = os.fspath(path)
    try:
        text = read_text(file)
    except Unreadable as err:
        raise InputError(f"cannot read the {fmt.upper()} file: {err.why}", obj=file) from None
    return parse_dot(text, file) if fmt == "dot" else parse_gxl(text, file)


# -- writers -------------------------------------------------------------------------------------

def weighted_dsl(g: WeightedGraph) -> str:
    """The DSL: one kernel-less task per node with its time on any CPU (``cost { cpu: W }``), one
    edge per edge with its transfer time (``comm W``)."""
    names = dsl_names([n for n, _ in g.nodes])
    index = {n: k for k, (n, _) in enumerate(g.nodes)}
    tasks = tuple(Task(k, names[k], "task", explicit_cost=(("cpu", w),)) for k, (_, w) in enumerate(g.nodes))
    edges = tuple(Edge(i, index[a], index[b], 0.0, w) for i, (a, b, w) in enumerate(g.edges))
    graph = TaskGraph(dsl_name(g.name) or "graph", tasks, edges, (), ())
    header = [f"{os.path.basename(g.file)}: {g.name}, {len(g.nodes)} tasks and {len(g.edges)} edges",
              "imported by `mapper import`: a task's Weight is its time on any processor (cost { cpu: W }), an "
              "edge's Weight its transfer time between two processors (comm W, 0 on one processor)"]
    renamed = [(n, names[k]) for k, (n, _) in enumerate(g.nodes) if n != names[k]][:20]
    if renamed:
        header.append("renamed to DSL names: " + ", ".join(f"{a!r} -> {b}" for a, b in renamed))
    return graph_to_dsl(graph, header)


def procs_platform(n: int, name: str) -> str:
    """A platform of ``n`` identical processors, fully connected: kind ``cpu``, no rates, no links
    (the edges give their own transfer times)."""
    return "\n".join([
        f"# {comment_text(name)}: {n} identical, fully connected processors for explicit-cost task graphs",
        "# (the P|prec,c_ij|Cmax model of optimal scheduling with communication delays: tasks give their times,",
        "# edges their transfer times between two processors; no rates, no links)",
        f'name = "procs{n}"',
        f'description = "{n} identical processors, fully connected (explicit-cost graphs only)"',
        "",
        "[[device]]",
        'name = "p"',
        f"count = {n}",
        'kind = "cpu"',
        "",
    ])
