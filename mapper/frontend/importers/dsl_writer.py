"""Write a task graph of kernel-less tasks as DSL text (docs/dsl.md).

:func:`graph_to_dsl` emits one ``task`` statement per task (``work``,
``cost``, ``parallel``, ``streamable``, ``memory``, ``colocate``,
``backward`` and placement annotations) and one
edge statement per edge (``bytes`` or ``comm``); the text lowers with
:func:`mapper.frontend.load.graph_from_text` to the same graph, spans aside. Numbers
are written with ``repr`` so they read back bit for bit.
:func:`dsl_names` turns arbitrary ids into unique DSL identifiers, and
:func:`dsl_number` writes a number the DSL reads back bit for bit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from mapper.core.graph import Task, TaskGraph
from mapper.core.terminal import escape_controls
from mapper.errors import OptionsError
from mapper.frontend.parse import KEYWORDS  # the words the grammar reserves

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_BAD = re.compile(r"[^A-Za-z0-9_]")


def is_name(text: str) -> bool:
    """True when ``text`` is a DSL identifier that is not a keyword."""
    return bool(_IDENT.match(text)) and text not in KEYWORDS


def dsl_name(raw: str) -> str:
    """``raw`` as a DSL identifier: other characters become ``_``, a leading
    digit (or an empty name) gets a ``t`` prefix, a keyword a ``_`` suffix."""
    name = _BAD.sub("_", raw)
    if not name or name[0].isdigit():
        name = "t" + name
    if name in KEYWORDS:
        name += "_"
    return name


def dsl_names(raws: Sequence[str]) -> tuple[str, ...]:
    """Unique DSL identifiers for ``raws``, in order.

    Each name is :func:`dsl_name` of its id; when that name is taken (by an
    earlier id, or by a later id's unchanged name), ``_2``, ``_3``, ... is
    appended, the first free suffix, in input order. Deterministic.
    """
    base = [dsl_name(r) for r in raws]
    taken = {b for b, r in zip(base, raws) if b == r}  # exact ids keep their names
    out: list[str] = []
    used: set[str] = set()
    for b, r in zip(base, raws):
        name = b
        if name in used or (name in taken and name != r):
            k = 2
            while f"{b}_{k}" in used or f"{b}_{k}" in taken:
                k += 1
            name = f"{b}_{k}"
        used.add(name)
        out.append(name)
    return tuple(out)


#: Characters that end a line for some reader (Python's str.splitlines, TOML, the DSL), and tabs.
_LINE_BREAKS = re.compile("[\t\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def comment_text(text: str) -> str:
    """``text`` safe inside a one-line ``#`` comment of a generated DSL or TOML file:
    line breaks and every other control character shown escaped (``\\n``, ``\\x1b``)."""
    return escape_controls(_LINE_BREAKS.sub(lambda m: repr(m.group(0))[1:-1], text))


def dsl_string(text: str) -> str:
    """``text`` as a DSL string literal (which has no escapes): quotes, backslashes and
    control characters become ``_``."""
    return '"' + re.sub(r'["\\\x00-\x1f\x7f-\x9f\u2028\u2029]', "_", escape_controls(text)) + '"'


def dsl_number(x: float) -> str:
    """A finite number in DSL syntax that parses back to the same float."""
    x = float(x)
    if not math.isfinite(x):
        raise OptionsError(f"cannot write the non-finite number {x!r} in the DSL")
    text = repr(x)
    return text if x >= 0 else f"({text})"


def _task_line(t: Task) -> str:
    if t.op != "task":
        raise OptionsError(f"task {t.name!r} is a {t.op} call; only kernel-less tasks can be written",
                           obj=t.name)
    parts = [f"task {t.name}"]
    if t.explicit_cost:
        for dev, _ in t.explicit_cost:
            if not is_name(dev):
                raise OptionsError(f"task {t.name!r}: cost key {dev!r} is not a DSL identifier", obj=t.name)
        parts.append("cost { " + ", ".join(f"{dev}: {dsl_number(s)}" for dev, s in t.explicit_cost) + " }")
    if t.flops or t.bytes_read or t.bytes_written or not t.explicit_cost:
        parts.append(f"work {{ flops {dsl_number(t.flops)}, bytes_read {dsl_number(t.bytes_read)}, "
                     f"bytes_written {dsl_number(t.bytes_written)} }}")
    if t.parallel != 1.0:
        parts.append(f"parallel {dsl_number(t.parallel)}")
    if t.streamable:
        parts.append(f"streamable {int(t.streamable)}")
    if t.memory is not None:
        parts.append(f"memory {dsl_number(t.memory)}")
    if t.colocate:
        if not is_name(t.colocate):
            raise OptionsError(f"task {t.name!r}: colocation class {t.colocate!r} is not a DSL identifier",
                               obj=t.name)
        parts.append(f"colocate {t.colocate}")
    if t.backward:
        parts.append("backward")
    if t.deadline is not None:
        parts.append(f"deadline {dsl_number(t.deadline)} s")
    parts.extend(f"@{a}" for a in t.placement.allow)
    parts.extend(f"@!{d}" for d in t.placement.deny)
    return " ".join(parts)


def graph_to_dsl(graph: TaskGraph, header: Sequence[str] = ()) -> str:
    """DSL text for ``graph``: ``graph NAME { task ...; edges }``.

    Parameters
    ----------
    graph : a graph whose tasks are all kernel-less (``op == "task"``).
    header : comment lines put before the graph (without ``#``).

    Raises
    ------
    OptionsError
        When a task is a kernel call, a name is not a DSL identifier, an edge
        has both ``comm`` and ``bytes``, or a number is not finite.
    """
    for name in (graph.name, *(t.name for t in graph.tasks)):
        if not is_name(name):
            raise OptionsError(f"{name!r} is not a DSL identifier (or is a keyword)", obj=name)
    lines = [f"# {comment_text(h)}".rstrip() for h in header]
    lines.append(f"graph {graph.name} {{")
    lines.extend("  " + _task_line(t) for t in graph.tasks)
    if graph.edges:
        lines.append("")
    names = [t.name for t in graph.tasks]
    for e in graph.edges:
        head = f"  {names[e.src]} -> {names[e.dst]}"
        if e.comm is not None:
            if e.bytes:
                raise OptionsError(f"edge {names[e.src]} -> {names[e.dst]} has both comm and bytes; "
                                   "the DSL gives one", obj=graph.name)
            lines.append(f"{head} comm {dsl_number(e.comm)}")
        elif e.bytes:
            lines.append(f"{head} bytes {dsl_number(e.bytes)}")
        else:
            lines.append(head)
    lines.append("}")
    return "\n".join(lines) + "\n"
